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
//! assigning to workers whose node left and gives their messages to others.

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
    /// The addresses of the cluster's members changed: every member not yet `Removed`
    /// (and not `Down`), this node included.
    Members(BTreeSet<Address>),
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
    members: BTreeSet<Address>,
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
            members: BTreeSet::new(),
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

    /// The members' addresses as last seen.
    pub fn members(&self) -> &BTreeSet<Address> {
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
        let members: BTreeSet<Address> = view
            .members
            .values()
            .filter(|m| !matches!(m.status, MemberStatus::Removed | MemberStatus::Down))
            .map(|m| m.unique_address.address.clone())
            .collect();
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
