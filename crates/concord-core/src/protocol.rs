//! The shape every protocol machine shares, and the vocabulary the runtime and the
//! simulator use to carry their messages: [`ProtocolId`], [`Lane`], [`Transmit`] and
//! [`ProtocolMachine`].
//!
//! A node runs one machine per protocol (membership, singleton, distributed data,
//! sharding, ...). Each is sans-IO with the same verbs (DESIGN.md §1): inputs
//! [`ProtocolMachine::handle_message`], [`ProtocolMachine::handle_membership`] and
//! [`ProtocolMachine::handle_timeout`]; outputs polled with
//! [`ProtocolMachine::poll_transmit`], [`ProtocolMachine::poll_event`] and
//! [`ProtocolMachine::poll_timeout`]. On the wire every message travels in an envelope
//! naming its protocol, so the runtime (and the simulator) route it to the right machine
//! without knowing its type (DESIGN.md §4).

use crate::address::{Address, UniqueAddress};
use crate::events::ClusterEvent;
use crate::membership_view::MembershipView;

/// Identifies a protocol on the wire (the envelope's `protocol` field) and in metrics.
///
/// Ids below [`ProtocolId::FIRST_APPLICATION_ID`] are reserved for Concord's layers;
/// applications register their own protocols from that id on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolId(pub u32);

impl ProtocolId {
    /// Cluster membership (gossip, heartbeats, joining).
    pub const MEMBERSHIP: ProtocolId = ProtocolId(1);
    /// Cluster Singleton (manager hand-over, proxy identification).
    pub const SINGLETON: ProtocolId = ProtocolId(2);
    /// Distributed Data (replicator gossip, reads and writes).
    pub const DISTRIBUTED_DATA: ProtocolId = ProtocolId(3);
    /// Cluster Sharding (coordinator, regions, shards).
    pub const SHARDING: ProtocolId = ProtocolId(4);
    /// The Dynamo-style key-value store.
    pub const KEY_VALUE: ProtocolId = ProtocolId(5);
    /// The replicated journal (persistence's built-in store).
    pub const JOURNAL: ProtocolId = ProtocolId(6);
    /// Reliable delivery between named endpoints (point-to-point and work pulling).
    pub const DELIVERY: ProtocolId = ProtocolId(7);
    /// Cluster metrics gossip (each node's sampled load, spread to every node).
    pub const CLUSTER_METRICS: ProtocolId = ProtocolId(8);
    /// Messages to handles registered with the receptionist (and pub-sub topics).
    pub const RECEPTIONIST: ProtocolId = ProtocolId(9);
    /// Partitioned services: the partition table's gossip, handoffs, service messages.
    pub const SERVICES: ProtocolId = ProtocolId(10);
    /// `concord bench remote`: raw payloads for the throughput benchmark.
    pub const BENCH: ProtocolId = ProtocolId(900);
    /// The first id applications may use for their own protocols.
    pub const FIRST_APPLICATION_ID: u32 = 1000;

    /// A short name for logs and metric labels: the layer's name for Concord's own
    /// protocols, `app-<id>` for application protocols.
    pub fn name(self) -> String {
        match self {
            ProtocolId::MEMBERSHIP => "membership".into(),
            ProtocolId::SINGLETON => "singleton".into(),
            ProtocolId::DISTRIBUTED_DATA => "ddata".into(),
            ProtocolId::SHARDING => "sharding".into(),
            ProtocolId::KEY_VALUE => "kv".into(),
            ProtocolId::JOURNAL => "journal".into(),
            ProtocolId::DELIVERY => "delivery".into(),
            ProtocolId::CLUSTER_METRICS => "cluster-metrics".into(),
            ProtocolId::RECEPTIONIST => "receptionist".into(),
            ProtocolId::SERVICES => "services".into(),
            ProtocolId::BENCH => "bench".into(),
            ProtocolId(n) => format!("app-{n}"),
        }
    }
}

impl std::fmt::Display for ProtocolId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// The stream a message travels on between two nodes (Akka Artery's control, ordinary and
/// large-message streams). Each lane is its own connection and queue, so bulk traffic
/// never delays a heartbeat; order is kept per (sender, receiver, lane).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// Heartbeats, membership and system messages.
    Control,
    /// Layer and user messages.
    Ordinary,
    /// Payloads larger than the ordinary frame limit (full ddata states, big user
    /// messages); has its own, larger frame limit.
    Large,
}

impl Lane {
    /// All lanes, in wire order.
    pub const ALL: [Lane; 3] = [Lane::Control, Lane::Ordinary, Lane::Large];

    /// Name for logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Control => "control",
            Lane::Ordinary => "ordinary",
            Lane::Large => "large",
        }
    }

    /// Index in [`Lane::ALL`] (also the lane's number in the handshake).
    pub fn index(self) -> usize {
        match self {
            Lane::Control => 0,
            Lane::Ordinary => 1,
            Lane::Large => 2,
        }
    }

    /// The lane with number `i` in the handshake.
    pub fn from_index(i: u32) -> Option<Lane> {
        Lane::ALL.get(usize::try_from(i).ok()?).copied()
    }
}

/// A message a machine wants sent.
#[derive(Clone, Debug, PartialEq)]
pub struct Transmit<M> {
    /// Destination address.
    pub to: Address,
    /// Destination incarnation, when known: a peer at `to` with another uid must not get it.
    pub to_uid: Option<u64>,
    /// The lane it should travel on (the runtime moves a frame larger than the ordinary
    /// limit to [`Lane::Large`]).
    pub lane: Lane,
    /// The message.
    pub message: M,
}

impl<M> Transmit<M> {
    /// The same destination and lane with another message (used to wrap a machine's
    /// message into a routed one).
    pub fn map<N>(self, f: impl FnOnce(M) -> N) -> Transmit<N> {
        Transmit {
            to: self.to,
            to_uid: self.to_uid,
            lane: self.lane,
            message: f(self.message),
        }
    }
}

/// What [`ProtocolMachine::handle_membership`] is told about the view it receives.
/// Non-exhaustive: a later version may add kinds of change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MembershipChange<'a> {
    /// The view as a whole, without the events that led to it: the first view a machine
    /// gets, or a fresh one after its subscription lagged (Akka's `CurrentClusterState`).
    CurrentClusterState,
    /// One domain event; the view is the state after the batch of events it belongs to.
    Event(&'a ClusterEvent),
}

/// The sans-IO shape of every protocol machine (membership, singleton, distributed data,
/// sharding, ...). Time is milliseconds passed in by the caller; a machine never reads a
/// clock, never sleeps and never touches a socket.
pub trait ProtocolMachine {
    /// The messages this protocol exchanges between nodes.
    type Message;
    /// What the machine tells its local owner (domain events, results of requests).
    type Event;

    /// The protocol id its messages carry on the wire.
    fn protocol(&self) -> ProtocolId;

    /// A message from `from` (authenticated by the transport handshake).
    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: Self::Message);

    /// The membership view changed (or is given whole, see [`MembershipChange`]).
    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, change: MembershipChange);

    /// Time passed: runs every timer due at `now_ms`.
    fn handle_timeout(&mut self, now_ms: u64);

    /// Next message to send.
    fn poll_transmit(&mut self) -> Option<Transmit<Self::Message>>;

    /// Next event for the local owner.
    fn poll_event(&mut self) -> Option<Self::Event>;

    /// The next time [`ProtocolMachine::handle_timeout`] must be called, ms.
    fn poll_timeout(&self) -> Option<u64>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_round_trip_through_their_index() {
        for l in Lane::ALL {
            assert_eq!(Lane::from_index(l.index() as u32), Some(l));
        }
        assert_eq!(Lane::from_index(3), None);
        assert_eq!(Lane::from_index(u32::MAX), None);
    }

    #[test]
    fn protocol_names() {
        assert_eq!(ProtocolId::MEMBERSHIP.name(), "membership");
        assert_eq!(ProtocolId(1234).name(), "app-1234");
        assert_eq!(ProtocolId::SHARDING.to_string(), "sharding(4)");
    }
}
