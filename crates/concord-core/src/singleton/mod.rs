//! Cluster Singleton: exactly one instance of a service on the oldest member (optionally
//! of a role), handed over in order when that member leaves, restarted elsewhere only
//! after a crashed one has surely stopped (Akka's `ClusterSingletonManager` and
//! `ClusterSingletonProxy`; Pekko `ClusterSingletonManager.scala`; research notes §2).
//!
//! [`ClusterSingleton`] is the sans-IO machine of one named singleton on one node. It
//! holds the node's [`manager`] (which decides when this node runs the instance) and its
//! [`proxy`] (which finds the instance and delivers messages to it in order). The runtime
//! runs the instance when told [`SingletonEvent::StartInstance`], stops it on
//! [`SingletonEvent::StopInstance`] and reports back with
//! [`ClusterSingleton::instance_terminated`]; the hand-over during a graceful leave runs
//! inside coordinated shutdown's `cluster-exiting` phase
//! ([`ClusterSingleton::self_exiting`], [`SingletonEvent::ExitingDone`]).

mod context;
mod event;
pub mod manager;
mod manager_hand_over;
mod manager_lease;
mod message;
mod oldest;
pub mod proxy;
mod settings;
mod timer;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use crate::address::UniqueAddress;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{MembershipChange, ProtocolId, ProtocolMachine, Transmit};

use context::{Ctx, SingletonOutputs};
use manager::Manager;
use proxy::Proxy;
use timer::SingletonTimer;

pub use event::SingletonEvent;
pub use manager::{ManagerState, ManagerStats};
pub use message::{SingletonBody, SingletonMessage};
pub use oldest::OldestChangedBuffer;
pub use proxy::ProxyStats;
pub use settings::SingletonSettings;

/// One named singleton on one node: its manager and its proxy. See the module docs.
///
/// A thin dispatcher: each input goes to the [`manager`] or the [`proxy`] with a `Ctx`
/// over the shared outputs; what one sends the other (on this node) goes through the
/// loopback queue, handled before the input returns.
pub struct ClusterSingleton {
    settings: SingletonSettings,
    self_node: UniqueAddress,
    manager: Manager,
    proxy: Proxy,
    /// Transmits, events and timers for the host.
    out: SingletonOutputs,
    /// Messages to this node itself, handled before the next input returns.
    loopback: VecDeque<SingletonBody>,
}

impl ClusterSingleton {
    /// The singleton `settings.name` on `self_node`; `seed` seeds its incarnation numbers.
    pub fn new(settings: SingletonSettings, self_node: UniqueAddress, seed: u64) -> Self {
        ClusterSingleton {
            manager: Manager::new(self_node.clone(), settings.role.clone(), seed),
            proxy: Proxy::new(settings.buffer_size),
            settings,
            self_node,
            out: Outputs::new(),
            loopback: VecDeque::new(),
        }
    }

    /// The manager, the proxy and the context they share, borrowed apart.
    fn parts(&mut self) -> (&mut Manager, &mut Proxy, Ctx<'_>) {
        let ClusterSingleton {
            settings,
            self_node,
            manager,
            proxy,
            out,
            loopback,
        } = self;
        (manager, proxy, Ctx::new(settings, self_node, out, loopback))
    }

    /// The settings.
    pub fn settings(&self) -> &SingletonSettings {
        &self.settings
    }

    /// The manager's state.
    pub fn state(&self) -> ManagerState {
        self.manager.state()
    }

    /// The incarnation of the instance running on this node, if one is.
    pub fn running_incarnation(&self) -> Option<u64> {
        self.manager.running()
    }

    /// The manager's counters.
    pub fn manager_stats(&self) -> &ManagerStats {
        &self.manager.stats
    }

    /// The proxy's counters.
    pub fn proxy_stats(&self) -> &ProxyStats {
        &self.proxy.stats
    }

    /// Where the proxy delivers now (the node running the instance), if known.
    pub fn proxy_target(&self) -> Option<&UniqueAddress> {
        self.proxy.target()
    }

    /// Messages buffered in the proxy.
    pub fn proxy_buffered(&self) -> usize {
        self.proxy.buffered()
    }

    fn drain_loopback(&mut self, now_ms: u64) {
        while let Some(body) = self.loopback.pop_front() {
            let me = self.self_node.clone();
            self.dispatch(now_ms, &me, body);
        }
    }

    /// Routes one message: hand-over messages to the manager, answers to the proxy;
    /// `Identify` and `Deliver` are answered for the instance that runs here (or not).
    fn dispatch(&mut self, now_ms: u64, from: &UniqueAddress, body: SingletonBody) {
        let (manager, proxy, mut cx) = self.parts();
        match body {
            SingletonBody::HandOverToMe
            | SingletonBody::HandOverInProgress
            | SingletonBody::HandOverDone
            | SingletonBody::TakeOverFromMe => manager.handle_message(&mut cx, now_ms, from, body),
            SingletonBody::Identify => {
                let incarnation = manager.running();
                cx.send(from, SingletonBody::Identified { incarnation });
            }
            SingletonBody::Deliver { seq, payload, ask } => match manager.running() {
                Some(_) => cx.emit(SingletonEvent::Deliver {
                    from: from.clone(),
                    payload,
                    ask,
                }),
                None => cx.send(from, SingletonBody::Undelivered { seq, payload, ask }),
            },
            SingletonBody::Identified { incarnation } => {
                proxy.identified(&mut cx, from, incarnation)
            }
            SingletonBody::Undelivered { seq, payload, ask } => {
                proxy.undelivered(&mut cx, now_ms, from, seq, payload, ask)
            }
            SingletonBody::Reply { ask, payload } => {
                cx.emit(SingletonEvent::Reply { ask, payload })
            }
        }
    }

    /// The running instance (or the runtime on its behalf) answers an ask from `to`.
    pub fn reply(&mut self, now_ms: u64, to: &UniqueAddress, ask: u64, payload: Vec<u8>) {
        let (_, _, mut cx) = self.parts();
        cx.send(to, SingletonBody::Reply { ask, payload });
        self.drain_loopback(now_ms);
    }

    /// Sends a message to the singleton through the proxy (buffered while the instance is
    /// not known; when the buffer is full the oldest is dropped).
    pub fn tell(&mut self, now_ms: u64, payload: Vec<u8>, ask: Option<u64>) {
        let (_, proxy, mut cx) = self.parts();
        proxy.tell(&mut cx, payload, ask);
        self.drain_loopback(now_ms);
    }

    /// The instance has stopped (after [`SingletonEvent::StopInstance`], or by itself).
    pub fn instance_terminated(&mut self, now_ms: u64) {
        let (manager, _, mut cx) = self.parts();
        manager.instance_terminated(&mut cx);
        self.drain_loopback(now_ms);
    }

    /// The answer to [`SingletonEvent::AcquireLease`].
    pub fn lease_result(&mut self, now_ms: u64, granted: bool) {
        let (manager, _, mut cx) = self.parts();
        manager.lease_result(&mut cx, now_ms, granted);
        self.drain_loopback(now_ms);
    }

    /// The lease was lost while held: the instance is stopped and the lease sought again.
    pub fn lease_lost(&mut self, now_ms: u64) {
        let (manager, _, mut cx) = self.parts();
        manager.lease_lost(&mut cx);
        self.drain_loopback(now_ms);
    }

    /// This node is leaving (coordinated shutdown's `cluster-exiting` phase): it no longer
    /// counts as a candidate; wait for [`SingletonEvent::ExitingDone`].
    pub fn self_exiting(&mut self, now_ms: u64) {
        let (manager, _, mut cx) = self.parts();
        manager.self_exiting(&mut cx, now_ms);
        self.drain_loopback(now_ms);
    }
}

impl ProtocolMachine for ClusterSingleton {
    type Message = SingletonMessage;
    type Event = SingletonEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::SINGLETON
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: SingletonMessage) {
        if message.name != self.settings.name {
            return;
        }
        self.dispatch(now_ms, from, message.body);
        self.drain_loopback(now_ms);
    }

    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, _change: MembershipChange) {
        let (manager, proxy, mut cx) = self.parts();
        manager.membership(&mut cx, now_ms, view);
        proxy.membership(&mut cx, now_ms, view);
        self.drain_loopback(now_ms);
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        let expired = self.out.timers.expired(now_ms);
        let (manager, proxy, mut cx) = self.parts();
        for t in expired {
            match t {
                SingletonTimer::Retry => manager.retry(&mut cx, now_ms),
                SingletonTimer::DelayedMemberRemoved(m) => {
                    manager.delayed_member_removed(&mut cx, now_ms, m)
                }
                SingletonTimer::LeaseRetry => manager.lease_retry(&mut cx),
                SingletonTimer::CleanupRemoved => manager.cleanup_removed(&mut cx, now_ms),
                SingletonTimer::Identify => proxy.identify(&mut cx, now_ms),
            }
        }
        self.drain_loopback(now_ms);
    }

    fn poll_transmit(&mut self) -> Option<Transmit<SingletonMessage>> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<SingletonEvent> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.out.poll_timeout()
    }
}
