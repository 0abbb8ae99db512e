//! The Cluster Singleton driver task: owns one sans-IO [`ClusterSingleton`] machine per
//! named singleton and plays the runtime around them — starts the instance (spawning the
//! user's behaviour with a fresh mailbox) on `StartInstance`, closes its mailbox on
//! `StopInstance` and reports the end of the behaviour back, acquires and renews the
//! lease, routes asks and replies, and tells the coordinated shutdown when the hand-over
//! of a leaving node is done.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use concord_core::singleton::{ClusterSingleton, SingletonEvent, SingletonMessage};
use concord_core::{MembershipChange, ProtocolMachine, UniqueAddress};
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn, Instrument};

use super::codec::SingletonCodec;
use super::instance::RawEnvelope;
use crate::clock::Clock;
use crate::layer::{DriverInput, DriverInputs};
use crate::lease::Lease;
use crate::metrics;
use crate::remote::log_limit::LogLimiter;
use crate::remote::ProtocolSender;

/// Messages waiting in a running instance's mailbox, at most; more are dropped and counted.
pub(crate) const MAILBOX_SIZE: usize = 10_000;

/// Starts the user's behaviour for one incarnation: given the name, node, incarnation,
/// mailbox and reply queue, the behaviour's future.
pub(crate) type Factory = Box<
    dyn Fn(
            String,
            u64,
            mpsc::Receiver<RawEnvelope>,
            mpsc::Sender<Job>,
        ) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send,
>;

/// An ask's outcome: the encoded reply, or why there is none.
pub(crate) type AskReply = oneshot::Sender<Result<Vec<u8>, String>>;

/// A job from a handle or a shutdown task, run on the driver.
pub(crate) type Job = Box<dyn FnOnce(&mut Driver) + Send>;

/// One named singleton on this node.
pub(crate) struct Hosted {
    pub(crate) machine: ClusterSingleton,
    factory: Factory,
    mailbox: Option<mpsc::Sender<RawEnvelope>>,
    incarnation: Option<u64>,
    pub(crate) asks: HashMap<u64, AskReply>,
    next_ask: u64,
    lease: Option<Arc<dyn Lease>>,
    lease_held: bool,
    exiting: Vec<oneshot::Sender<()>>,
    exiting_done: bool,
    mailbox_full: u64,
}

impl Hosted {
    pub(crate) fn new(
        machine: ClusterSingleton,
        factory: Factory,
        lease: Option<Arc<dyn Lease>>,
    ) -> Self {
        Hosted {
            machine,
            factory,
            mailbox: None,
            incarnation: None,
            asks: HashMap::new(),
            next_ask: 1,
            lease,
            lease_held: false,
            exiting: Vec::new(),
            exiting_done: false,
            mailbox_full: 0,
        }
    }

    /// A fresh ask id.
    pub(crate) fn next_ask(&mut self) -> u64 {
        let a = self.next_ask;
        self.next_ask += 1;
        a
    }
}

/// The driver's state.
pub(crate) struct Driver {
    pub(crate) singletons: BTreeMap<String, Hosted>,
    clock: Clock,
    sender: ProtocolSender<SingletonCodec>,
    self_node: UniqueAddress,
    node_label: String,
    /// The driver's own job queue: instances, lease tasks and replies report through it.
    jobs: mpsc::Sender<Job>,
    /// One warning per kind at most every 10 s (buffer overflow, full mailbox).
    warnings: LogLimiter,
}

impl Driver {
    pub(crate) fn new(
        singletons: BTreeMap<String, Hosted>,
        clock: Clock,
        sender: ProtocolSender<SingletonCodec>,
        self_node: UniqueAddress,
        jobs: mpsc::Sender<Job>,
    ) -> Self {
        Driver {
            singletons,
            clock,
            sender,
            node_label: self_node.address.to_string(),
            self_node,
            jobs,
            warnings: LogLimiter::new(std::time::Duration::from_secs(10)),
        }
    }

    /// The clock now, ms.
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Starts the `cluster-exiting` hand-over of every singleton; `done` fires when all
    /// are done.
    pub(crate) fn self_exiting(&mut self, done: oneshot::Sender<()>) {
        let now = self.now();
        let (tx, mut rx) = mpsc::channel::<()>(self.singletons.len().max(1));
        let n = self.singletons.len();
        for h in self.singletons.values_mut() {
            let (one, wait) = oneshot::channel();
            h.exiting.push(one);
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = wait.await;
                let _ = tx.send(()).await;
            });
            h.machine.self_exiting(now);
        }
        drop(tx);
        tokio::spawn(async move {
            for _ in 0..n {
                if rx.recv().await.is_none() {
                    break;
                }
            }
            let _ = done.send(());
        });
    }

    pub(crate) async fn run(mut self, mut inputs: DriverInputs<Job, SingletonMessage>) {
        let view = inputs.view();
        let now = self.now();
        for h in self.singletons.values_mut() {
            h.machine
                .handle_membership(now, &view, MembershipChange::CurrentClusterState);
        }
        self.flush();
        loop {
            let deadline = self
                .singletons
                .values()
                .filter_map(|h| h.machine.poll_timeout())
                .min()
                .map(|t| self.clock.instant_at(t));
            let input = inputs.next(deadline).await;
            let now = self.now();
            match input {
                DriverInput::Stop => break,
                DriverInput::Job(job) => job(&mut self),
                DriverInput::Inbound(b) => {
                    for (m, _) in b.messages {
                        if let Some(h) = self.singletons.get_mut(&m.name) {
                            h.machine.handle_message(now, &b.from, m);
                        }
                    }
                }
                DriverInput::View(view) => {
                    for h in self.singletons.values_mut() {
                        h.machine.handle_membership(
                            now,
                            &view,
                            MembershipChange::CurrentClusterState,
                        );
                    }
                }
                DriverInput::Timeout => {
                    for h in self.singletons.values_mut() {
                        if h.machine.poll_timeout().is_some_and(|t| t <= now) {
                            h.machine.handle_timeout(now);
                        }
                    }
                }
                DriverInput::Tick => self.tick(),
            }
            self.flush();
        }
        // The node is gone: stop every instance.
        for h in self.singletons.values_mut() {
            h.mailbox = None;
        }
    }

    /// The instance `incarnation` of `name` has ended.
    fn instance_ended(&mut self, name: &str, incarnation: u64) {
        let now = self.now();
        if let Some(h) = self.singletons.get_mut(name) {
            if h.incarnation == Some(incarnation) {
                info!(singleton = %name, incarnation, "singleton instance stopped");
                h.incarnation = None;
                h.mailbox = None;
                h.machine.instance_terminated(now);
            }
        }
    }

    /// The outcome of acquiring (or renewing) the lease of `name`.
    fn lease_outcome(&mut self, name: &str, granted: bool) {
        let now = self.now();
        if let Some(h) = self.singletons.get_mut(name) {
            let was_held = h.lease_held;
            h.lease_held = granted;
            if was_held && !granted {
                warn!(singleton = %name, "singleton lease lost");
                h.machine.lease_lost(now);
            } else if !was_held {
                if !granted {
                    crate::metrics::singleton_lease_refused(&self.node_label, name);
                }
                h.machine.lease_result(now, granted);
            }
        }
    }

    /// Reports `outcome` of a lease operation on `name` back to the driver.
    fn report_lease(jobs: mpsc::Sender<Job>, name: String, lease: Arc<dyn Lease>, renew: bool) {
        tokio::spawn(async move {
            let granted = lease.acquire().await.unwrap_or(false) && (!renew || lease.check_lease());
            let _ = jobs
                .send(Box::new(move |d: &mut Driver| {
                    d.lease_outcome(&name, granted)
                }))
                .await;
        });
    }

    /// Once a second: metrics, forgotten asks, lease renewal.
    fn tick(&mut self) {
        for (name, h) in self.singletons.iter_mut() {
            h.asks.retain(|_, tx| !tx.is_closed());
            metrics::record_singleton(
                &self.node_label,
                name,
                h.machine.running_incarnation().is_some(),
                h.machine.manager_stats(),
                h.machine.proxy_stats(),
                h.machine.proxy_buffered(),
            );
            if let (Some(lease), true) = (&h.lease, h.lease_held) {
                // Renew; a lease that cannot be renewed is lost.
                Self::report_lease(self.jobs.clone(), name.clone(), lease.clone(), true);
            }
        }
    }

    /// Carries every machine's outputs out.
    fn flush(&mut self) {
        let node = self.self_node.address.clone();
        for (name, h) in self.singletons.iter_mut() {
            // Handling an event may give the machine more to send and say.
            loop {
                let mut any = false;
                while let Some(t) = h.machine.poll_transmit() {
                    any = true;
                    self.sender.send(&t);
                }
                while let Some(e) = h.machine.poll_event() {
                    any = true;
                    match e {
                        SingletonEvent::StartInstance { incarnation } => {
                            info!(singleton = %name, incarnation, "singleton instance starting");
                            let (tx, rx) = mpsc::channel(MAILBOX_SIZE);
                            h.mailbox = Some(tx);
                            h.incarnation = Some(incarnation);
                            let fut = (h.factory)(name.clone(), incarnation, rx, self.jobs.clone());
                            let jobs = self.jobs.clone();
                            let name = name.clone();
                            let span = tracing::info_span!("singleton", name = %name, node = %node);
                            tokio::spawn(async move {
                                if let Err(e) = tokio::spawn(fut.instrument(span)).await {
                                    warn!(singleton = %name, error = %e, "singleton behaviour failed");
                                }
                                let ended: Job = Box::new(move |d: &mut Driver| {
                                    d.instance_ended(&name, incarnation)
                                });
                                let _ = jobs.send(ended).await;
                            });
                        }
                        SingletonEvent::StopInstance => {
                            info!(singleton = %name, "singleton instance stopping");
                            h.mailbox = None;
                            if h.incarnation.is_none() {
                                let now = self.clock.now_ms();
                                h.machine.instance_terminated(now);
                            }
                        }
                        SingletonEvent::Deliver { from, payload, ask } => {
                            let delivered = h.mailbox.as_ref().is_some_and(|m| {
                                m.try_send(RawEnvelope {
                                    payload,
                                    reply_to: ask.map(|a| (from.clone(), a)),
                                })
                                .is_ok()
                            });
                            if !delivered {
                                h.mailbox_full += 1;
                                if let Some(suppressed) = self.warnings.allow("mailbox") {
                                    warn!(singleton = %name, dropped = h.mailbox_full, suppressed, "singleton mailbox full; message dropped");
                                }
                            }
                        }
                        SingletonEvent::Reply { ask, payload } => {
                            if let Some(tx) = h.asks.remove(&ask) {
                                let _ = tx.send(Ok(payload));
                            }
                        }
                        SingletonEvent::Dropped { ask } => {
                            if let Some(suppressed) = self.warnings.allow("dropped") {
                                warn!(singleton = %name, dropped = h.machine.proxy_stats().dropped, suppressed,
                                    "singleton proxy buffer full while the instance moves; the oldest message was dropped");
                            }
                            if let Some(tx) = ask.and_then(|a| h.asks.remove(&a)) {
                                let _ = tx.send(Err("the proxy's buffer was full".into()));
                            }
                        }
                        SingletonEvent::AcquireLease => match h.lease.clone() {
                            Some(lease) => {
                                Self::report_lease(self.jobs.clone(), name.clone(), lease, false)
                            }
                            None => {
                                let now = self.clock.now_ms();
                                h.machine.lease_result(now, true);
                            }
                        },
                        SingletonEvent::ReleaseLease => {
                            h.lease_held = false;
                            if let Some(lease) = h.lease.clone() {
                                tokio::spawn(async move {
                                    let _ = lease.release().await;
                                });
                            }
                        }
                        SingletonEvent::ExitingDone => {
                            h.exiting_done = true;
                            for w in h.exiting.drain(..) {
                                let _ = w.send(());
                            }
                        }
                        SingletonEvent::Stuck => {
                            warn!(singleton = %name, "singleton hand-over did not complete; starting over")
                        }
                    }
                }
                if !any {
                    break;
                }
            }
            if h.exiting_done {
                for w in h.exiting.drain(..) {
                    let _ = w.send(());
                }
            }
        }
    }
}
