//! [`SimHost`]: a layer's real [`LayerHost`] — the runtime's host with the layer's real
//! effects — on a simulated node, and [`SimRuntime`], the virtual-time executor its
//! background work runs on.
//!
//! A simulated node hosts a layer exactly as the tokio runtime does: messages, membership
//! changes and timeouts go into the host, its transmits leave through an outbound sender
//! the simulated network drains, and the work its effects spawn (an entity batch that
//! waits, a singleton instance, a lease request) runs on the node's [`SimRuntime`], polled
//! deterministically between simulation events, with timers in virtual time
//! ([`SimRuntime::sleep`]). Blocking work runs at once. Only the clock and the executor
//! differ from production.

use std::any::Any;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};

use concord::host::{
    Clock, Collect, HostInput, LayerEffects, LayerHost, ManualClock, MembershipInput, MessageOf,
    Spawner, Task,
};
use concord::remote::codec::Inbound;
use concord_core::{MembershipChange, MembershipView, ProtocolMachine, Transmit, UniqueAddress};
use futures_channel::mpsc::UnboundedReceiver;
use futures_util::task::ArcWake;

use crate::hosted::{HostedMachine, Payload};

#[derive(Default)]
struct Exec {
    tasks: BTreeMap<u64, Task>,
    /// Woken tasks, polled in spawn order (deterministic).
    ready: BTreeSet<u64>,
    /// Sleeping futures: (deadline ms, sequence) → waker.
    timers: BTreeMap<(u64, u64), Waker>,
    next_id: u64,
    next_seq: u64,
}

struct TaskWaker {
    id: u64,
    exec: Weak<Mutex<Exec>>,
}

impl ArcWake for TaskWaker {
    fn wake_by_ref(arc_self: &Arc<Self>) {
        if let Some(exec) = arc_self.exec.upgrade() {
            lock(&exec).ready.insert(arc_self.id);
        }
    }
}

fn lock(e: &Mutex<Exec>) -> std::sync::MutexGuard<'_, Exec> {
    e.lock().unwrap_or_else(|p| p.into_inner())
}

/// The executor of one simulated node's host: tasks polled in virtual time; see the module
/// docs. Cheap to clone (clones share the tasks).
#[derive(Clone)]
pub struct SimRuntime {
    exec: Arc<Mutex<Exec>>,
    clock: ManualClock,
}

impl SimRuntime {
    /// An executor reading `clock`.
    pub fn new(clock: ManualClock) -> Self {
        SimRuntime {
            exec: Arc::default(),
            clock,
        }
    }

    /// A future that completes once virtual time reaches now + `ms`.
    pub fn sleep(&self, ms: u64) -> Sleep {
        Sleep {
            at: self.clock.now_ms().saturating_add(ms),
            exec: Arc::downgrade(&self.exec),
            clock: self.clock.clone(),
            key: None,
        }
    }

    /// Tasks not finished yet.
    pub fn tasks(&self) -> usize {
        lock(&self.exec).tasks.len()
    }

    /// The earliest timer, ms.
    pub fn next_timer(&self) -> Option<u64> {
        lock(&self.exec).timers.keys().next().map(|(at, _)| *at)
    }

    /// Wakes every sleeper due at `now_ms`.
    pub fn fire_timers(&self, now_ms: u64) {
        let due: Vec<Waker> = {
            let mut e = lock(&self.exec);
            let later = e.timers.split_off(&(now_ms.saturating_add(1), 0));
            let due = std::mem::replace(&mut e.timers, later);
            due.into_values().collect()
        };
        for w in due {
            w.wake();
        }
    }

    /// Polls every woken task until none is ready; true if any was polled.
    pub fn run_ready(&self) -> bool {
        let mut any = false;
        loop {
            let next = {
                let mut e = lock(&self.exec);
                let Some(id) = e.ready.pop_first() else {
                    break;
                };
                e.tasks.remove(&id).map(|t| (id, t))
            };
            let Some((id, mut task)) = next else {
                continue;
            };
            any = true;
            let waker = futures_util::task::waker(Arc::new(TaskWaker {
                id,
                exec: Arc::downgrade(&self.exec),
            }));
            let mut cx = Context::from_waker(&waker);
            if task.as_mut().poll(&mut cx).is_pending() {
                lock(&self.exec).tasks.insert(id, task);
            }
        }
        any
    }
}

impl Spawner for SimRuntime {
    fn spawn(&self, task: Task) {
        let mut e = lock(&self.exec);
        let id = e.next_id;
        e.next_id += 1;
        e.tasks.insert(id, task);
        e.ready.insert(id);
    }

    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send + 'static>) {
        work();
    }
}

/// A virtual-time sleep ([`SimRuntime::sleep`]).
pub struct Sleep {
    at: u64,
    exec: Weak<Mutex<Exec>>,
    clock: ManualClock,
    /// Its entry in the timers, once polled.
    key: Option<(u64, u64)>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.clock.now_ms() >= self.at {
            return Poll::Ready(());
        }
        // Every poll registers the waker it was given (the last one is the one to wake:
        // a batch's first poll runs on the host with a no-op waker, later ones on this
        // executor).
        if let Some(exec) = self.exec.upgrade() {
            let mut e = lock(&exec);
            let key = match self.key {
                Some(k) => k,
                None => {
                    let seq = e.next_seq;
                    e.next_seq += 1;
                    (self.at, seq)
                }
            };
            e.timers.insert(key, cx.waker().clone());
            drop(e);
            self.key = Some(key);
        }
        Poll::Pending
    }
}

/// The `cluster-exiting` work of a hosted layer: called until it returns true.
pub type HostExitingTask<E> = Box<dyn FnMut(&mut LayerHost<E>, u64) -> bool>;

/// A layer's real host on a simulated node; see the module docs.
pub struct SimHost<E: LayerEffects> {
    /// The host.
    pub host: LayerHost<E>,
    /// The node's executor.
    pub runtime: SimRuntime,
    out: Collect<MessageOf<E>>,
    completions: UnboundedReceiver<E::Completion>,
    exiting: Option<HostExitingTask<E>>,
}

impl<E: LayerEffects> SimHost<E> {
    /// Hosts `machine` with `effects` on `node`, reading `clock` and running background
    /// work on `runtime`.
    pub fn new(
        machine: E::Machine,
        effects: E,
        node: UniqueAddress,
        clock: ManualClock,
        runtime: SimRuntime,
    ) -> Self {
        let out = Collect::default();
        let mut host = LayerHost::new(
            machine,
            effects,
            node,
            Arc::new(clock),
            Arc::new(runtime.clone()),
            Box::new(out.clone()),
        );
        let completions = host
            .take_completions()
            .expect("a new host still has its completion queue");
        SimHost {
            host,
            runtime,
            out,
            completions,
            exiting: None,
        }
    }

    /// Adds the layer's `cluster-exiting` work (as the runtime layer's coordinated-shutdown
    /// tasks do it): called until it returns true.
    pub fn with_exiting(
        mut self,
        task: impl FnMut(&mut LayerHost<E>, u64) -> bool + 'static,
    ) -> Self {
        self.exiting = Some(Box::new(task));
        self
    }

    /// Settles (background work, completions, flushes) and takes the transmits of the
    /// turns so far, for a simulator that carries a layer's messages itself (the
    /// membership layer's).
    pub fn take_transmits(&mut self) -> Vec<Transmit<MessageOf<E>>> {
        self.settle();
        self.out.take()
    }

    /// Runs the executor and the host's completions until nothing moves, flushing after
    /// each round.
    fn settle(&mut self) {
        loop {
            let mut progress = self.runtime.run_ready();
            while let Ok(c) = self.completions.try_recv() {
                self.host.handle(HostInput::Completion(c));
                progress = true;
            }
            self.host.flush();
            if !progress {
                break;
            }
        }
    }
}

impl<E> HostedMachine for SimHost<E>
where
    E: LayerEffects,
    MessageOf<E>: Any + Send + Debug + Clone,
{
    fn protocol(&self) -> concord_core::ProtocolId {
        self.host.machine().protocol()
    }

    fn deliver(&mut self, _now_ms: u64, from: &UniqueAddress, payload: Payload) -> bool {
        match payload.into_any().downcast::<MessageOf<E>>() {
            Ok(m) => {
                self.host.handle(HostInput::Inbound(Inbound {
                    from: from.clone(),
                    messages: vec![(*m, 0)],
                    traces: Vec::new(),
                }));
                true
            }
            Err(_) => false,
        }
    }

    fn membership(&mut self, _now_ms: u64, view: &Arc<MembershipView>, change: MembershipChange) {
        let input = match change {
            MembershipChange::Event(e) => MembershipInput::Event(view.clone(), e.clone()),
            _ => MembershipInput::CurrentClusterState(view.clone()),
        };
        self.host.handle(HostInput::Membership(input));
    }

    fn timeout(&mut self, now_ms: u64) {
        self.runtime.fire_timers(now_ms);
        if self.host.next_deadline().is_some_and(|t| t <= now_ms) {
            self.host.handle(HostInput::Timeout);
        }
    }

    fn next_timeout(&self) -> Option<u64> {
        match (self.host.next_deadline(), self.runtime.next_timer()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn drain(&mut self, out: &mut Vec<Transmit<Payload>>) {
        self.settle();
        out.extend(
            self.out
                .take()
                .into_iter()
                .map(|t| t.map(|m| Box::new(m) as Payload)),
        );
    }

    fn exiting(&mut self, now_ms: u64) -> bool {
        let done = match &mut self.exiting {
            Some(task) => task(&mut self.host, now_ms),
            None => true,
        };
        self.settle();
        done
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
