//! [`SingletonEffects`]: the singleton layer's part of its host. For each named singleton
//! of the node it starts the instance (the user's behaviour, with a fresh mailbox) on
//! `StartInstance`, closes the mailbox on `StopInstance` and reports the end of the
//! behaviour back to the machine, acquires and renews the lease, answers asks (the
//! instance's replies go through the machine), and completes the `cluster-exiting`
//! hand-over once every singleton's is done.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use concord_core::group::MachineGroup;
use concord_core::singleton::{ClusterSingleton, SingletonEvent};
use futures_channel::{mpsc, oneshot};
use futures_util::FutureExt as _;
use tracing::{info, warn, Instrument};

use super::command::{AskReply, Completion, SingletonCommand, SingletonCompletion};
use super::instance::{Behaviour, RawEnvelope, SingletonContext, Wire};
use super::metrics;
use crate::host::{Completions, Effects, LayerEffects};
use crate::lease::Lease;
use crate::remote::log_limit::LogLimiter;

/// Messages waiting in a running instance's mailbox, at most; more are dropped and counted.
pub(crate) const MAILBOX_SIZE: usize = 10_000;

/// Starts the user's behaviour for one incarnation: given the name, incarnation, mailbox
/// and the host's completion queue (for replies), the behaviour's future.
pub(crate) type Factory = Box<
    dyn Fn(
            String,
            u64,
            mpsc::Receiver<RawEnvelope>,
            Completions<SingletonCompletion>,
        ) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send,
>;

/// The factory of `behaviour`'s instances on the node at `node`.
pub(crate) fn factory<M: Wire, R: Wire, B: Behaviour<M, R>>(
    behaviour: Arc<B>,
    node: concord_core::Address,
) -> Factory {
    Box::new(move |name, incarnation, mailbox, replies| {
        let ctx = SingletonContext::<M, R>::new(name, node.clone(), incarnation, mailbox, replies);
        Box::pin(behaviour.start(ctx))
    })
}

/// The effects' side of one named singleton.
pub(crate) struct Instance {
    factory: Factory,
    mailbox: Option<mpsc::Sender<RawEnvelope>>,
    incarnation: Option<u64>,
    asks: HashMap<u64, AskReply>,
    next_ask: u64,
    lease: Option<Arc<dyn Lease>>,
    lease_held: bool,
    exiting_done: bool,
    mailbox_full: u64,
}

impl Instance {
    /// `factory` starts the behaviour; `lease` guards the instance (`use-lease`).
    pub(crate) fn new(factory: Factory, lease: Option<Arc<dyn Lease>>) -> Self {
        Instance {
            factory,
            mailbox: None,
            incarnation: None,
            asks: HashMap::new(),
            next_ask: 1,
            lease,
            lease_held: false,
            exiting_done: false,
            mailbox_full: 0,
        }
    }
}

/// The layer's effects; see the module docs. The tokio runtime builds them in
/// [`super::ClusterSingletons`]; the simulator with [`SingletonEffects::new`] and
/// [`SingletonEffects::singleton`].
pub struct SingletonEffects {
    instances: BTreeMap<String, Instance>,
    node_label: String,
    /// The `cluster-exiting` hand-over in progress: who waits, and the singletons not done.
    exiting: Option<(oneshot::Sender<()>, BTreeSet<String>)>,
    /// One warning per kind at most every 10 s (buffer overflow, full mailbox).
    warnings: LogLimiter,
}

impl SingletonEffects {
    /// Effects without singletons (add them with [`SingletonEffects::singleton`]) on the
    /// node labelled `node_label` (its address, for metrics).
    pub fn new(node_label: impl Into<String>) -> Self {
        Self::with_instances(BTreeMap::new(), node_label.into())
    }

    /// Hosts the singleton `name` running `behaviour` on the node at `node`, guarded by
    /// `lease` if set. The node's machine group must hold a [`ClusterSingleton`] machine of
    /// the same name.
    pub fn singleton<M: Wire, R: Wire>(
        mut self,
        name: &str,
        node: concord_core::Address,
        behaviour: impl Behaviour<M, R>,
        lease: Option<Arc<dyn Lease>>,
    ) -> Self {
        let f = factory::<M, R, _>(Arc::new(behaviour), node);
        self.instances
            .insert(name.to_string(), Instance::new(f, lease));
        self
    }

    /// Effects for `instances` (by name) on the node labelled `node_label`.
    pub(crate) fn with_instances(
        instances: BTreeMap<String, Instance>,
        node_label: String,
    ) -> Self {
        SingletonEffects {
            instances,
            node_label,
            exiting: None,
            warnings: LogLimiter::new(Duration::from_secs(10)),
        }
    }

    /// Acquires (`renew`: renews) the lease of `name` in the background.
    fn acquire_lease(fx: &Effects<'_, Self>, name: &str, lease: Arc<dyn Lease>, renew: bool) {
        let completions = fx.completions().clone();
        let name = name.to_string();
        fx.spawn(Box::pin(async move {
            let granted = lease.acquire().await.unwrap_or(false) && (!renew || lease.check_lease());
            completions.send(SingletonCompletion(Completion::Lease { name, granted }));
        }));
    }

    /// Starts instance `incarnation` of `name`.
    fn start_instance(&mut self, fx: &Effects<'_, Self>, name: &str, incarnation: u64) {
        let Some(h) = self.instances.get_mut(name) else {
            return;
        };
        info!(singleton = %name, incarnation, "singleton instance starting");
        let (tx, rx) = mpsc::channel(MAILBOX_SIZE);
        h.mailbox = Some(tx);
        h.incarnation = Some(incarnation);
        let running = (h.factory)(name.to_string(), incarnation, rx, fx.completions().clone());
        let completions = fx.completions().clone();
        let span = tracing::info_span!("singleton", name = %name, node = %self.node_label);
        let name = name.to_string();
        fx.spawn(Box::pin(async move {
            if let Err(p) = AssertUnwindSafe(running.instrument(span))
                .catch_unwind()
                .await
            {
                let why = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panicked".into());
                warn!(singleton = %name, error = %why, "singleton behaviour failed");
            }
            completions.send(SingletonCompletion(Completion::InstanceEnded {
                name,
                incarnation,
            }));
        }));
    }

    /// One singleton's exiting hand-over is done.
    fn exiting_done(&mut self, name: &str) {
        if let Some(h) = self.instances.get_mut(name) {
            h.exiting_done = true;
        }
        if let Some((_, remaining)) = &mut self.exiting {
            remaining.remove(name);
            if remaining.is_empty() {
                if let Some((done, _)) = self.exiting.take() {
                    let _ = done.send(());
                }
            }
        }
    }
}

impl LayerEffects for SingletonEffects {
    type Machine = MachineGroup<ClusterSingleton>;
    type Command = SingletonCommand;
    type Completion = SingletonCompletion;

    fn name(&self) -> &'static str {
        "singleton"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: SingletonCommand) {
        let now = fx.now_ms;
        match command {
            SingletonCommand::Tell {
                name,
                payload,
                ask,
                trace,
            } => {
                fx.follow_trace(trace);
                let (Some(h), Some(m)) = (self.instances.get_mut(&name), fx.machine.get_mut(&name))
                else {
                    return;
                };
                let ask = ask.map(|tx| {
                    let id = h.next_ask;
                    h.next_ask += 1;
                    h.asks.insert(id, tx);
                    id
                });
                m.tell(now, payload, ask);
            }
            SingletonCommand::Status { reply } => {
                let status = fx
                    .machine
                    .iter()
                    .map(|(name, m)| {
                        serde_json::json!({
                            "name": name,
                            "role": m.settings().role,
                            "state": format!("{:?}", m.state()),
                            "runningHere": m.running_incarnation().is_some(),
                            "runsOn": m.proxy_target().map(|t| t.address.to_string()),
                            "buffered": m.proxy_buffered(),
                        })
                    })
                    .collect();
                let _ = reply.send(status);
            }
            SingletonCommand::SelfExiting { done } => {
                let remaining: BTreeSet<String> = self
                    .instances
                    .iter()
                    .filter(|(_, h)| !h.exiting_done)
                    .map(|(n, _)| n.clone())
                    .collect();
                for (_, m) in fx.machine.iter_mut() {
                    m.self_exiting(now);
                }
                if remaining.is_empty() {
                    let _ = done.send(());
                } else {
                    self.exiting = Some((done, remaining));
                }
            }
        }
    }

    fn completion(&mut self, fx: &mut Effects<'_, Self>, completion: SingletonCompletion) {
        let now = fx.now_ms;
        match completion {
            SingletonCompletion(Completion::InstanceEnded { name, incarnation }) => {
                let (Some(h), Some(m)) = (self.instances.get_mut(&name), fx.machine.get_mut(&name))
                else {
                    return;
                };
                if h.incarnation == Some(incarnation) {
                    info!(singleton = %name, incarnation, "singleton instance stopped");
                    h.incarnation = None;
                    h.mailbox = None;
                    m.instance_terminated(now);
                }
            }
            SingletonCompletion(Completion::Lease { name, granted }) => {
                let (Some(h), Some(m)) = (self.instances.get_mut(&name), fx.machine.get_mut(&name))
                else {
                    return;
                };
                let was_held = h.lease_held;
                h.lease_held = granted;
                if was_held && !granted {
                    warn!(singleton = %name, "singleton lease lost");
                    m.lease_lost(now);
                } else if !was_held {
                    if !granted {
                        metrics::singleton_lease_refused(&self.node_label, &name);
                    }
                    m.lease_result(now, granted);
                }
            }
            SingletonCompletion(Completion::Reply {
                name,
                to,
                ask,
                payload,
            }) => {
                if let Some(m) = fx.machine.get_mut(&name) {
                    m.reply(now, &to, ask, payload);
                }
            }
        }
    }

    fn event(&mut self, fx: &mut Effects<'_, Self>, (name, event): (String, SingletonEvent)) {
        let now = fx.now_ms;
        match event {
            SingletonEvent::StartInstance { incarnation } => {
                self.start_instance(fx, &name, incarnation)
            }
            SingletonEvent::StopInstance => {
                info!(singleton = %name, "singleton instance stopping");
                if let Some(h) = self.instances.get_mut(&name) {
                    h.mailbox = None;
                    if h.incarnation.is_none() {
                        if let Some(m) = fx.machine.get_mut(&name) {
                            m.instance_terminated(now);
                        }
                    }
                }
            }
            SingletonEvent::Deliver { from, payload, ask } => {
                let Some(h) = self.instances.get_mut(&name) else {
                    return;
                };
                let delivered = h.mailbox.as_mut().is_some_and(|m| {
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
                if let Some(tx) = self
                    .instances
                    .get_mut(&name)
                    .and_then(|h| h.asks.remove(&ask))
                {
                    let _ = tx.send(Ok(payload));
                }
            }
            SingletonEvent::Dropped { ask } => {
                if let Some(suppressed) = self.warnings.allow("dropped") {
                    let dropped = fx.machine.get(&name).map_or(0, |m| m.proxy_stats().dropped);
                    warn!(singleton = %name, dropped, suppressed,
                        "singleton proxy buffer full while the instance moves; the oldest message was dropped");
                }
                if let Some(tx) = ask.and_then(|a| self.instances.get_mut(&name)?.asks.remove(&a)) {
                    let _ = tx.send(Err("the proxy's buffer was full".into()));
                }
            }
            SingletonEvent::AcquireLease => {
                match self.instances.get(&name).and_then(|h| h.lease.clone()) {
                    Some(lease) => Self::acquire_lease(fx, &name, lease, false),
                    None => {
                        if let Some(m) = fx.machine.get_mut(&name) {
                            m.lease_result(now, true);
                        }
                    }
                }
            }
            SingletonEvent::ReleaseLease => {
                if let Some(h) = self.instances.get_mut(&name) {
                    h.lease_held = false;
                    if let Some(lease) = h.lease.clone() {
                        fx.spawn(Box::pin(async move {
                            let _ = lease.release().await;
                        }));
                    }
                }
            }
            SingletonEvent::ExitingDone => self.exiting_done(&name),
            SingletonEvent::Stuck => {
                warn!(singleton = %name, "singleton hand-over did not complete; starting over")
            }
        }
    }

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        for (name, h) in self.instances.iter_mut() {
            h.asks.retain(|_, tx| !tx.is_canceled());
            if let Some(m) = fx.machine.get(name) {
                metrics::record_singleton(
                    &self.node_label,
                    name,
                    m.running_incarnation().is_some(),
                    m.manager_stats(),
                    m.proxy_stats(),
                    m.proxy_buffered(),
                );
            }
        }
        let renew: Vec<(String, Arc<dyn Lease>)> = self
            .instances
            .iter()
            .filter(|(_, h)| h.lease_held)
            .filter_map(|(n, h)| Some((n.clone(), h.lease.clone()?)))
            .collect();
        for (name, lease) in renew {
            // Renew; a lease that cannot be renewed is lost.
            Self::acquire_lease(fx, &name, lease, true);
        }
    }

    fn stopped(&mut self, _machine: &mut MachineGroup<ClusterSingleton>) {
        // The node is gone: every instance's mailbox closes, so its behaviour ends.
        for h in self.instances.values_mut() {
            h.mailbox = None;
        }
    }
}
