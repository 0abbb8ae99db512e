//! [`DeliveryRouter`]: the machine of the delivery layer ([`ProtocolId::DELIVERY`]), which
//! carries reliable delivery's messages between **named endpoints** on any nodes: a
//! producer's [`SequencedMessage`]s to a consumer, the consumer's [`ConsumerMessage`]s back
//! (point-to-point and work pulling; sharded consumers travel through sharding instead).
//!
//! It holds no protocol state of its own — numbering, windows and resends are the
//! controllers' ([`super::ProducerController`], [`super::ConsumerController`]) — and only
//! routes: what it is asked to send goes to the node named, on the ordinary lane (so
//! per-pair order is the lane's); what arrives is checked (names and ids within their
//! bounds) and handed to the owner as [`RouterEvent::Inbound`], which passes it to the
//! endpoint by name; malformed input is counted and dropped. It also tells the owner which
//! nodes are members ([`RouterEvent::Members`]), so that a work-pulling producer stops
//! assigning to workers whose node left and gives their messages to others, and which is
//! oldest per role ([`RouterMembers::oldest`]), so that a producer to a cluster singleton's
//! endpoint follows the singleton as it moves.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::message::{ConsumerMessage, SequencedMessage, MAX_PRODUCER_ID_BYTES};
use crate::address::{Address, UniqueAddress};
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};

/// Longest endpoint name accepted, bytes.
pub const MAX_ENDPOINT_NAME_BYTES: usize = 256;

/// What one endpoint tells another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeliveryBody {
    /// A producer's message to a consumer.
    Sequenced(SequencedMessage),
    /// A consumer's answer to a producer.
    Control(ConsumerMessage),
    /// The receiving node has no endpoint named as the sender's envelope was addressed
    /// (`from` names it): its router's answer to a producer's message for a consumer that
    /// stopped, or never started there. A work-pulling producer gives that worker's
    /// messages to the others (Akka's producer does so when a worker's consumer
    /// controller terminates).
    NoEndpoint,
}

/// A message between two endpoints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryEnvelope {
    /// The receiving endpoint's name on the node it is sent to.
    pub to: String,
    /// The sending endpoint's name on the node it comes from (where answers go).
    pub from: String,
    /// The message.
    pub body: DeliveryBody,
}

impl DeliveryEnvelope {
    /// True if the names and the producer id are within their bounds.
    pub fn is_well_formed(&self) -> bool {
        let name = |n: &str| !n.is_empty() && n.len() <= MAX_ENDPOINT_NAME_BYTES;
        let body = match &self.body {
            DeliveryBody::Sequenced(m) => {
                !m.producer_id.is_empty() && m.producer_id.len() <= MAX_PRODUCER_ID_BYTES
            }
            DeliveryBody::Control(_) | DeliveryBody::NoEndpoint => true,
        };
        name(&self.to) && name(&self.from) && body
    }
}

/// The members as the delivery layer sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouterMembers {
    /// Every member not yet `Removed` (and not `Down`), this node included.
    pub addresses: BTreeSet<Address>,
    /// The members that are `Up`, `PreparingForShutdown` or `ReadyForShutdown`, oldest
    /// first (up-number, ties by address: `Member::age_cmp`), with their roles.
    pub oldest_first: Vec<(Address, BTreeSet<String>)>,
}

impl RouterMembers {
    /// The oldest member with `role` (any member for `None`) that is not leaving: where a
    /// cluster singleton of that role runs once membership has settled (Akka's singleton
    /// placement; the singleton layer's `OldestChangedBuffer` also counts a downed oldest
    /// until it is removed, and this node while it leaves, which this does not — during
    /// those moments the singleton's endpoint is missing here, and a producer waits).
    pub fn oldest(&self, role: Option<&str>) -> Option<&Address> {
        self.oldest_first
            .iter()
            .find(|(_, roles)| role.is_none_or(|r| roles.contains(r)))
            .map(|(a, _)| a)
    }

    fn of(view: &MembershipView) -> Self {
        let addresses = view
            .members
            .values()
            .filter(|m| !matches!(m.status, MemberStatus::Removed | MemberStatus::Down))
            .map(|m| m.unique_address.address.clone())
            .collect();
        let oldest_first = view
            .by_age(None)
            .into_iter()
            .filter(|m| m.status != MemberStatus::Leaving)
            .map(|m| (m.unique_address.address.clone(), m.roles.clone()))
            .collect();
        RouterMembers {
            addresses,
            oldest_first,
        }
    }
}

/// What the router tells its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouterEvent {
    /// An envelope for a local endpoint, from node `from`.
    Inbound {
        /// The sending node.
        from: UniqueAddress,
        /// The envelope (well-formed).
        envelope: DeliveryEnvelope,
    },
    /// The members changed (their addresses, or who is oldest).
    Members(RouterMembers),
}

/// Why an envelope was not sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RouterError {
    /// A name is empty or longer than 256 bytes, or the producer id longer than 512.
    #[error("endpoint name empty or longer than 256 bytes, or producer id too long")]
    Malformed,
}

/// Counters (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Envelopes sent.
    pub sent: u64,
    /// Envelopes received and handed to the owner.
    pub received: u64,
    /// Envelopes received malformed: dropped.
    pub malformed: u64,
}

/// The delivery layer's machine; see the module docs.
#[derive(Debug)]
pub struct DeliveryRouter {
    members: RouterMembers,
    transmits: VecDeque<Transmit<DeliveryEnvelope>>,
    events: VecDeque<RouterEvent>,
    stats: RouterStats,
}

impl Default for DeliveryRouter {
    fn default() -> Self {
        Self::new()
    }
}

impl DeliveryRouter {
    /// A router that knows no member yet.
    pub fn new() -> Self {
        DeliveryRouter {
            members: RouterMembers::default(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: RouterStats::default(),
        }
    }

    /// Sends `envelope` to node `to` (any incarnation at that address: a consumer that
    /// restarted there is reached, and its controller sorts out what it knows).
    ///
    /// # Errors
    /// [`RouterError::Malformed`]: nothing sent.
    pub fn send(&mut self, to: &Address, envelope: DeliveryEnvelope) -> Result<(), RouterError> {
        if !envelope.is_well_formed() {
            return Err(RouterError::Malformed);
        }
        self.stats.sent += 1;
        self.transmits.push_back(Transmit {
            to: to.clone(),
            to_uid: None,
            lane: Lane::Ordinary,
            message: envelope,
        });
        Ok(())
    }

    /// The members as last seen.
    pub fn members(&self) -> &RouterMembers {
        &self.members
    }

    /// Counters.
    pub fn stats(&self) -> RouterStats {
        self.stats
    }
}

impl ProtocolMachine for DeliveryRouter {
    type Message = DeliveryEnvelope;
    type Event = RouterEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::DELIVERY
    }

    fn handle_message(&mut self, _now_ms: u64, from: &UniqueAddress, envelope: DeliveryEnvelope) {
        if !envelope.is_well_formed() {
            self.stats.malformed += 1;
            return;
        }
        self.stats.received += 1;
        self.events.push_back(RouterEvent::Inbound {
            from: from.clone(),
            envelope,
        });
    }

    fn handle_membership(&mut self, _now_ms: u64, view: &MembershipView, _: MembershipChange) {
        let members = RouterMembers::of(view);
        if members != self.members {
            self.members = members.clone();
            self.events.push_back(RouterEvent::Members(members));
        }
    }

    fn handle_timeout(&mut self, _now_ms: u64) {}

    fn poll_transmit(&mut self) -> Option<Transmit<DeliveryEnvelope>> {
        self.transmits.pop_front()
    }

    fn poll_event(&mut self) -> Option<RouterEvent> {
        self.events.pop_front()
    }

    fn poll_timeout(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::Gossip;
    use crate::member::Member;
    use crate::membership_state::MembershipState;
    use crate::protocol::MembershipChange;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), u64::from(i))
    }

    fn view(ms: &[(u16, MemberStatus, u32, &str)]) -> MembershipView {
        let mut g = Gossip::empty();
        for (i, st, up, role) in ms {
            let m = Member::joining(n(*i), [role.to_string()].into(), "1")
                .with_up(*up)
                .with_status(*st);
            g.members.insert(n(*i), m);
        }
        MembershipView::of(&MembershipState::new(g, n(1)), 7)
    }

    #[test]
    fn members_name_the_oldest_per_role_leaving_excluded_and_change_only_when_they_do() {
        use MemberStatus::*;
        let mut r = DeliveryRouter::new();
        let v = view(&[
            (1, Leaving, 1, "a"),
            (2, Up, 3, "a"),
            (3, Up, 2, "b"),
            (4, Down, 0, "a"),
            (5, Joining, 0, "b"),
        ]);
        r.handle_membership(0, &v, MembershipChange::CurrentClusterState);
        let Some(RouterEvent::Members(m)) = r.poll_event() else {
            panic!("the members are told");
        };
        // The leaving oldest hands its singleton over: the next oldest of the role.
        assert_eq!(m.oldest(Some("a")), Some(&n(2).address));
        assert_eq!(m.oldest(None), Some(&n(3).address));
        assert_eq!(m.oldest(Some("c")), None);
        // Down is not a member to send to; Leaving and Joining still are.
        assert!(!m.addresses.contains(&n(4).address));
        assert!(m.addresses.contains(&n(1).address) && m.addresses.contains(&n(5).address));
        // The same membership again: nothing told.
        r.handle_membership(0, &v, MembershipChange::CurrentClusterState);
        assert!(r.poll_event().is_none());
    }
}
