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

pub mod manager;
mod manager_lease;
mod oldest;
pub mod proxy;
mod settings;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::address::UniqueAddress;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};

pub use manager::{ManagerState, ManagerStats};
pub use oldest::OldestChangedBuffer;
pub use proxy::ProxyStats;
pub use settings::SingletonSettings;

/// A message of the singleton protocol; every message names its singleton.
#[derive(Clone, Debug, PartialEq)]
pub struct SingletonMessage {
    /// The singleton's name.
    pub name: String,
    /// What it says.
    pub body: SingletonBody,
}

/// The singleton protocol's messages (Akka's hand-over messages, plus the proxy's).
#[derive(Clone, Debug, PartialEq)]
pub enum SingletonBody {
    /// New oldest → previous oldest: hand the singleton over to me (retried every
    /// `hand-over-retry-interval`).
    HandOverToMe,
    /// Previous oldest → new oldest: the singleton is being stopped.
    HandOverInProgress,
    /// Previous oldest → new oldest: the singleton has stopped; start yours.
    HandOverDone,
    /// Previous oldest → new oldest that may not know it: ask me for the hand-over.
    TakeOverFromMe,
    /// Proxy → oldest: is the instance running there?
    Identify,
    /// The answer: the running instance's incarnation, or `None`.
    Identified {
        /// Incarnation of the running instance.
        incarnation: Option<u64>,
    },
    /// Proxy → the node running the instance: a message for it.
    Deliver {
        /// The proxy's sequence number (its send order).
        seq: u64,
        /// The encoded message.
        payload: Vec<u8>,
        /// Set for an ask: where the reply goes back to.
        ask: Option<u64>,
    },
    /// The instance is not running here: the message goes back to the proxy.
    Undelivered {
        /// The proxy's sequence number.
        seq: u64,
        /// The encoded message.
        payload: Vec<u8>,
        /// The ask, if any.
        ask: Option<u64>,
    },
    /// The instance's reply to an ask.
    Reply {
        /// The ask answered.
        ask: u64,
        /// The encoded reply.
        payload: Vec<u8>,
    },
}

/// What the singleton machine asks of its runtime, or tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SingletonEvent {
    /// Start the instance (this node is the oldest, the previous one has stopped).
    StartInstance {
        /// A number unique to this start of the instance.
        incarnation: u64,
    },
    /// Stop the instance: let it finish what it has, then report
    /// [`ClusterSingleton::instance_terminated`].
    StopInstance,
    /// Acquire the singleton's lease and report [`ClusterSingleton::lease_result`].
    AcquireLease,
    /// Release the lease.
    ReleaseLease,
    /// A message for the running instance.
    Deliver {
        /// The sender's node.
        from: UniqueAddress,
        /// The encoded message.
        payload: Vec<u8>,
        /// Set for an ask: pass it to [`ClusterSingleton::reply`].
        ask: Option<u64>,
    },
    /// A reply to this node's ask.
    Reply {
        /// The ask.
        ask: u64,
        /// The encoded reply.
        payload: Vec<u8>,
    },
    /// The proxy's buffer was full: the oldest message was dropped (an ask fails).
    Dropped {
        /// The dropped message's ask, if any.
        ask: Option<u64>,
    },
    /// The hand-over of a leaving node is done (or there was nothing to hand over): the
    /// `cluster-exiting` phase may go on.
    ExitingDone,
    /// The manager could not complete a hand-over within its retries and started over
    /// (Akka's `ClusterSingletonManagerIsStuck`).
    Stuck,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SingletonTimer {
    /// Hand-over (or take-over) retry.
    Retry,
    /// A removed member counts as gone from now on.
    DelayedMemberRemoved(UniqueAddress),
    /// Retry acquiring the lease.
    LeaseRetry,
    /// Forget removed members remembered for 15 minutes.
    CleanupRemoved,
    /// The proxy's identification.
    Identify,
}

/// One named singleton on one node: its manager and its proxy. See the module docs.
pub struct ClusterSingleton {
    settings: SingletonSettings,
    self_node: UniqueAddress,
    oldest: OldestChangedBuffer,
    manager: manager::Manager,
    proxy: proxy::Proxy,
    rng: SmallRng,
    /// Transmits, events and timers for the host.
    out: Outputs<SingletonMessage, SingletonEvent, SingletonTimer>,
    /// Messages to this node itself, handled before the next input returns.
    loopback: VecDeque<SingletonBody>,
}

impl ClusterSingleton {
    /// The singleton `settings.name` on `self_node`; `seed` seeds its incarnation numbers.
    pub fn new(settings: SingletonSettings, self_node: UniqueAddress, seed: u64) -> Self {
        ClusterSingleton {
            oldest: OldestChangedBuffer::new(self_node.clone(), settings.role.clone()),
            manager: manager::Manager::new(),
            proxy: proxy::Proxy::new(settings.buffer_size),
            settings,
            self_node,
            rng: SmallRng::seed_from_u64(seed),
            out: Outputs::new(),
            loopback: VecDeque::new(),
        }
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

    fn send(&mut self, to: &UniqueAddress, body: SingletonBody) {
        if *to == self.self_node {
            self.loopback.push_back(body);
            return;
        }
        self.out.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message: SingletonMessage {
                name: self.settings.name.clone(),
                body,
            },
        });
    }

    fn drain_loopback(&mut self, now_ms: u64) {
        while let Some(body) = self.loopback.pop_front() {
            let me = self.self_node.clone();
            self.dispatch(now_ms, &me, body);
        }
    }

    fn dispatch(&mut self, now_ms: u64, from: &UniqueAddress, body: SingletonBody) {
        match body {
            SingletonBody::HandOverToMe
            | SingletonBody::HandOverInProgress
            | SingletonBody::HandOverDone
            | SingletonBody::TakeOverFromMe => self.manager_message(now_ms, from, body),
            SingletonBody::Identify => {
                let incarnation = self.manager.running();
                self.send(from, SingletonBody::Identified { incarnation });
            }
            SingletonBody::Deliver { seq, payload, ask } => match self.manager.running() {
                Some(_) => self.out.events.push_back(SingletonEvent::Deliver {
                    from: from.clone(),
                    payload,
                    ask,
                }),
                None => self.send(from, SingletonBody::Undelivered { seq, payload, ask }),
            },
            SingletonBody::Identified { incarnation } => {
                self.proxy_identified(now_ms, from, incarnation)
            }
            SingletonBody::Undelivered { seq, payload, ask } => {
                self.proxy_undelivered(now_ms, from, seq, payload, ask)
            }
            SingletonBody::Reply { ask, payload } => self
                .out
                .events
                .push_back(SingletonEvent::Reply { ask, payload }),
        }
    }

    /// The running instance (or the runtime on its behalf) answers an ask from `to`.
    pub fn reply(&mut self, now_ms: u64, to: &UniqueAddress, ask: u64, payload: Vec<u8>) {
        self.send(to, SingletonBody::Reply { ask, payload });
        self.drain_loopback(now_ms);
    }

    /// Sends a message to the singleton through the proxy (buffered while the instance is
    /// not known; when the buffer is full the oldest is dropped).
    pub fn tell(&mut self, now_ms: u64, payload: Vec<u8>, ask: Option<u64>) {
        self.proxy_tell(now_ms, payload, ask);
        self.drain_loopback(now_ms);
    }

    /// The instance has stopped (after [`SingletonEvent::StopInstance`], or by itself).
    pub fn instance_terminated(&mut self, now_ms: u64) {
        self.manager_instance_terminated(now_ms);
        self.drain_loopback(now_ms);
    }

    /// The answer to [`SingletonEvent::AcquireLease`].
    pub fn lease_result(&mut self, now_ms: u64, granted: bool) {
        self.manager_lease_result(now_ms, granted);
        self.drain_loopback(now_ms);
    }

    /// The lease was lost while held: the instance is stopped and the lease sought again.
    pub fn lease_lost(&mut self, now_ms: u64) {
        self.manager_lease_lost(now_ms);
        self.drain_loopback(now_ms);
    }

    /// This node is leaving (coordinated shutdown's `cluster-exiting` phase): it no longer
    /// counts as a candidate; wait for [`SingletonEvent::ExitingDone`].
    pub fn self_exiting(&mut self, now_ms: u64) {
        self.manager_self_exiting(now_ms);
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
        self.manager_membership(now_ms, view);
        self.proxy_membership(now_ms, view);
        self.drain_loopback(now_ms);
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        for t in self.out.timers.expired(now_ms) {
            match t {
                SingletonTimer::Retry => self.manager_retry(now_ms),
                SingletonTimer::DelayedMemberRemoved(m) => {
                    self.manager_delayed_member_removed(now_ms, m)
                }
                SingletonTimer::LeaseRetry => self.manager_lease_retry(now_ms),
                SingletonTimer::CleanupRemoved => self.manager_cleanup_removed(now_ms),
                SingletonTimer::Identify => self.proxy_identify(now_ms),
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

impl crate::group::Routed for SingletonMessage {
    fn route_key(&self) -> &str {
        &self.name
    }
}
