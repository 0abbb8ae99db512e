//! [`ReceptionistMachine`]: the sans-IO side of the receptionist's messaging — which
//! handles this node holds (registered under which key), and where a message to a
//! [`ServiceInstance`] goes: to a local handle at once, to a member's node over the wire,
//! nowhere (counted) otherwise. Delivery is at most once, as Akka's `tell` to a listed
//! `ActorRef`: a message to a handle that went away, or whose node left, is dropped.
//!
//! The registry itself (which handles exist cluster-wide) is replicated with Distributed
//! Data by the runtime; [`super::listing`] says what it means under a membership view.

use std::collections::{BTreeMap, BTreeSet};

use super::service_instance::{ServiceInstance, ServiceKeyId};
use crate::address::UniqueAddress;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};

/// A message to one registered handle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceptionistEnvelope {
    /// The key the handle is registered under (checked on arrival).
    pub key: ServiceKeyId,
    /// The handle's id on the receiving node.
    pub instance: u64,
    /// The message, encoded by the application's type.
    pub payload: Vec<u8>,
}

/// What the machine tells its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReceptionistEvent {
    /// Hand `payload` to the local handle `instance`.
    Deliver {
        /// The handle.
        instance: u64,
        /// The message.
        payload: Vec<u8>,
    },
}

/// Why a message was not sent or delivered (counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum DropReason {
    /// The target node is not a member (it left, or was never seen).
    NotAMember,
    /// No local handle with that id and key (deregistered, or a restarted node's).
    NoSuchHandle,
    /// From a node that is not a member.
    FromStranger,
}

impl DropReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::NotAMember => "not-a-member",
            DropReason::NoSuchHandle => "no-such-handle",
            DropReason::FromStranger => "from-stranger",
        }
    }
}

/// Why a registration was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationRefused {
    /// The node holds `max-registrations` handles already.
    #[error("this node holds {0} registrations, the most `receptionist.max-registrations` allows")]
    TooMany(usize),
    /// The id is in use.
    #[error("handle id {0} is registered already")]
    Duplicate(u64),
}

/// Counters (for metrics and tests).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceptionistStats {
    /// Messages sent to other nodes.
    pub sent: u64,
    /// Messages handed to local handles.
    pub delivered: u64,
    /// Messages dropped, by reason.
    pub dropped: BTreeMap<DropReason, u64>,
}

/// The receptionist machine of one node; see the module docs.
#[derive(Debug)]
pub struct ReceptionistMachine {
    me: UniqueAddress,
    max_registrations: usize,
    local: BTreeMap<u64, ServiceKeyId>,
    members: BTreeSet<UniqueAddress>,
    stats: ReceptionistStats,
    out: Outputs<ReceptionistEnvelope, ReceptionistEvent, u8>,
}

impl ReceptionistMachine {
    /// The machine of node `me`, holding at most `max_registrations` handles.
    pub fn new(me: UniqueAddress, max_registrations: usize) -> Self {
        ReceptionistMachine {
            members: [me.clone()].into(),
            me,
            max_registrations,
            local: BTreeMap::new(),
            stats: ReceptionistStats::default(),
            out: Outputs::new(),
        }
    }

    /// Registers local handle `id` under `key`.
    ///
    /// # Errors
    /// [`RegistrationRefused`]: the node's limit is reached, or `id` is in use.
    pub fn register(&mut self, id: u64, key: ServiceKeyId) -> Result<(), RegistrationRefused> {
        if self.local.contains_key(&id) {
            return Err(RegistrationRefused::Duplicate(id));
        }
        if self.local.len() >= self.max_registrations {
            return Err(RegistrationRefused::TooMany(self.local.len()));
        }
        self.local.insert(id, key);
        Ok(())
    }

    /// Forgets local handle `id`; its key if it was registered.
    pub fn deregister(&mut self, id: u64) -> Option<ServiceKeyId> {
        self.local.remove(&id)
    }

    /// Handles registered here.
    pub fn registrations(&self) -> usize {
        self.local.len()
    }

    /// The counters.
    pub fn stats(&self) -> &ReceptionistStats {
        &self.stats
    }

    fn drop_one(&mut self, reason: DropReason) {
        *self.stats.dropped.entry(reason).or_insert(0) += 1;
    }

    /// Sends `payload` to `to` (registered under `key`): a local handle gets it as a
    /// [`ReceptionistEvent::Deliver`], a member's node over the ordinary lane; anything
    /// else is dropped and counted. Returns whether it was delivered or sent.
    pub fn send(&mut self, to: &ServiceInstance, key: &ServiceKeyId, payload: Vec<u8>) -> bool {
        if to.node == self.me {
            return self.deliver(to.id, key, payload);
        }
        if !self.members.contains(&to.node) {
            self.drop_one(DropReason::NotAMember);
            return false;
        }
        self.stats.sent += 1;
        self.out.transmits.push_back(Transmit {
            to: to.node.address.clone(),
            to_uid: Some(to.node.uid),
            lane: Lane::Ordinary,
            message: ReceptionistEnvelope {
                key: key.clone(),
                instance: to.id,
                payload,
            },
        });
        true
    }

    fn deliver(&mut self, instance: u64, key: &ServiceKeyId, payload: Vec<u8>) -> bool {
        if self.local.get(&instance) != Some(key) {
            self.drop_one(DropReason::NoSuchHandle);
            return false;
        }
        self.stats.delivered += 1;
        self.out
            .events
            .push_back(ReceptionistEvent::Deliver { instance, payload });
        true
    }
}

impl ProtocolMachine for ReceptionistMachine {
    type Message = ReceptionistEnvelope;
    type Event = ReceptionistEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::RECEPTIONIST
    }

    fn handle_message(&mut self, _now_ms: u64, from: &UniqueAddress, message: Self::Message) {
        if !self.members.contains(from) {
            self.drop_one(DropReason::FromStranger);
            return;
        }
        self.deliver(message.instance, &message.key, message.payload);
    }

    fn handle_membership(&mut self, _now_ms: u64, view: &MembershipView, _: MembershipChange) {
        self.members = view.members.keys().cloned().collect();
        self.members.insert(self.me.clone());
    }

    fn handle_timeout(&mut self, _now_ms: u64) {}

    fn poll_transmit(&mut self) -> Option<Transmit<Self::Message>> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Self::Event> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemberStatus::Up;
    use crate::test_views::{ua, view};

    fn key(k: &str) -> ServiceKeyId {
        ServiceKeyId::new(k).unwrap()
    }

    fn machine() -> ReceptionistMachine {
        let mut m = ReceptionistMachine::new(ua(0), 2);
        m.handle_membership(
            0,
            &view(0, &[(0, Up), (1, Up)]),
            MembershipChange::CurrentClusterState,
        );
        m
    }

    #[test]
    fn local_handles_get_their_messages_and_members_get_a_transmit() {
        let mut m = machine();
        m.register(1, key("a")).unwrap();
        assert!(m.send(&ServiceInstance { node: ua(0), id: 1 }, &key("a"), vec![7]));
        assert_eq!(
            m.poll_event(),
            Some(ReceptionistEvent::Deliver {
                instance: 1,
                payload: vec![7]
            })
        );
        assert!(m.send(&ServiceInstance { node: ua(1), id: 9 }, &key("a"), vec![8]));
        let t = m.poll_transmit().unwrap();
        assert_eq!((t.to, t.to_uid), (ua(1).address, Some(ua(1).uid)));
        assert_eq!(t.message.instance, 9);
        // A node that is not a member gets nothing.
        assert!(!m.send(&ServiceInstance { node: ua(5), id: 1 }, &key("a"), vec![]));
        assert!(m.poll_transmit().is_none());
        assert_eq!(m.stats().dropped.get(&DropReason::NotAMember), Some(&1));
    }

    #[test]
    fn arrivals_need_a_member_sender_and_a_handle_of_that_key() {
        let mut m = machine();
        m.register(1, key("a")).unwrap();
        let env = |k: &str, instance| ReceptionistEnvelope {
            key: key(k),
            instance,
            payload: vec![1],
        };
        m.handle_message(0, &ua(7), env("a", 1));
        m.handle_message(0, &ua(1), env("b", 1));
        m.handle_message(0, &ua(1), env("a", 2));
        assert!(m.poll_event().is_none());
        m.handle_message(0, &ua(1), env("a", 1));
        assert!(m.poll_event().is_some());
        assert_eq!(m.stats().dropped.get(&DropReason::FromStranger), Some(&1));
        assert_eq!(m.stats().dropped.get(&DropReason::NoSuchHandle), Some(&2));
        // A deregistered handle gets nothing more.
        assert_eq!(m.deregister(1), Some(key("a")));
        m.handle_message(0, &ua(1), env("a", 1));
        assert!(m.poll_event().is_none());
    }

    #[test]
    fn registrations_are_bounded_and_unique() {
        let mut m = machine();
        m.register(1, key("a")).unwrap();
        assert_eq!(
            m.register(1, key("b")),
            Err(RegistrationRefused::Duplicate(1))
        );
        m.register(2, key("b")).unwrap();
        assert_eq!(
            m.register(3, key("c")),
            Err(RegistrationRefused::TooMany(2))
        );
        m.deregister(2);
        assert!(m.register(3, key("c")).is_ok());
        assert_eq!(m.registrations(), 2);
    }
}
