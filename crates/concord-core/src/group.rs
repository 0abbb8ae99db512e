//! [`MachineGroup`]: several machines of one protocol on one node, each under a name —
//! the named singletons of a node, or its sharded entity types — driven as one
//! [`ProtocolMachine`]. A message goes to the machine its [`Routed::route_key`] names (a
//! name this node does not run is dropped and counted, like an unknown protocol); every
//! machine sees every membership change; events leave tagged with their machine's name.

use std::collections::BTreeMap;

use crate::address::UniqueAddress;
use crate::membership_view::MembershipView;
use crate::protocol::{MembershipChange, ProtocolId, ProtocolMachine, Transmit};

/// A message that names the machine of its group it is for.
pub trait Routed {
    /// The name of the machine (the singleton's name, the entity type).
    fn route_key(&self) -> &str;
}

/// Named machines of one protocol, driven as one; see the module docs.
pub struct MachineGroup<M> {
    protocol: ProtocolId,
    machines: BTreeMap<String, M>,
    /// Messages for a name this node does not run, count.
    unrouted: u64,
}

impl<M> MachineGroup<M> {
    /// An empty group of `protocol` machines.
    pub fn new(protocol: ProtocolId) -> Self {
        MachineGroup {
            protocol,
            machines: BTreeMap::new(),
            unrouted: 0,
        }
    }

    /// Adds (or replaces) the machine named `name`.
    pub fn insert(&mut self, name: impl Into<String>, machine: M) {
        self.machines.insert(name.into(), machine);
    }

    /// The machine named `name`.
    pub fn get(&self, name: &str) -> Option<&M> {
        self.machines.get(name)
    }

    /// The machine named `name`, to act on.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut M> {
        self.machines.get_mut(name)
    }

    /// Every machine with its name, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &M)> {
        self.machines.iter()
    }

    /// Every machine with its name, to act on.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut M)> {
        self.machines.iter_mut()
    }

    /// The names, in order.
    pub fn names(&self) -> impl Iterator<Item = &String> {
        self.machines.keys()
    }

    /// Number of machines.
    pub fn len(&self) -> usize {
        self.machines.len()
    }

    /// True if the group has no machine.
    pub fn is_empty(&self) -> bool {
        self.machines.is_empty()
    }

    /// Messages dropped because they named no machine of this group.
    pub fn unrouted(&self) -> u64 {
        self.unrouted
    }
}

impl<M> ProtocolMachine for MachineGroup<M>
where
    M: ProtocolMachine,
    M::Message: Routed,
{
    type Message = M::Message;
    type Event = (String, M::Event);

    fn protocol(&self) -> ProtocolId {
        self.protocol
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: M::Message) {
        match self.machines.get_mut(message.route_key()) {
            Some(m) => m.handle_message(now_ms, from, message),
            None => self.unrouted += 1,
        }
    }

    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, change: MembershipChange) {
        for m in self.machines.values_mut() {
            m.handle_membership(now_ms, view, change);
        }
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        for m in self.machines.values_mut() {
            if m.poll_timeout().is_some_and(|t| t <= now_ms) {
                m.handle_timeout(now_ms);
            }
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit<M::Message>> {
        self.machines.values_mut().find_map(|m| m.poll_transmit())
    }

    fn poll_event(&mut self) -> Option<(String, M::Event)> {
        self.machines
            .iter_mut()
            .find_map(|(name, m)| m.poll_event().map(|e| (name.clone(), e)))
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.machines
            .values()
            .filter_map(|m| m.poll_timeout())
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::protocol::Lane;
    use std::collections::VecDeque;

    #[derive(Clone, Debug, PartialEq)]
    struct Msg(String, u32);
    impl Routed for Msg {
        fn route_key(&self) -> &str {
            &self.0
        }
    }

    /// Echoes every message back to its sender and reports it; a timer at `deadline`.
    #[derive(Default)]
    struct Echo {
        out: VecDeque<Transmit<Msg>>,
        events: VecDeque<u32>,
        deadline: Option<u64>,
        timeouts: u32,
    }

    impl ProtocolMachine for Echo {
        type Message = Msg;
        type Event = u32;
        fn protocol(&self) -> ProtocolId {
            ProtocolId(1000)
        }
        fn handle_message(&mut self, _: u64, from: &UniqueAddress, m: Msg) {
            self.events.push_back(m.1);
            self.out.push_back(Transmit {
                to: from.address.clone(),
                to_uid: Some(from.uid),
                lane: Lane::Ordinary,
                message: m,
            });
        }
        fn handle_membership(&mut self, _: u64, _: &MembershipView, _: MembershipChange) {}
        fn handle_timeout(&mut self, _: u64) {
            self.timeouts += 1;
            self.deadline = None;
        }
        fn poll_transmit(&mut self) -> Option<Transmit<Msg>> {
            self.out.pop_front()
        }
        fn poll_event(&mut self) -> Option<u32> {
            self.events.pop_front()
        }
        fn poll_timeout(&self) -> Option<u64> {
            self.deadline
        }
    }

    #[test]
    fn routes_by_name_tags_events_and_runs_only_due_timers() {
        let peer = UniqueAddress::new(Address::new("s", "h", 1), 7);
        let mut g = MachineGroup::new(ProtocolId(1000));
        g.insert("a", Echo::default());
        g.insert(
            "b",
            Echo {
                deadline: Some(50),
                ..Echo::default()
            },
        );
        g.get_mut("a").unwrap().deadline = Some(10);
        g.handle_message(0, &peer, Msg("b".into(), 1));
        g.handle_message(0, &peer, Msg("a".into(), 2));
        g.handle_message(0, &peer, Msg("zz".into(), 3));
        assert_eq!(g.unrouted(), 1, "a name this node does not run is dropped");
        assert_eq!(g.poll_event(), Some(("a".into(), 2)));
        assert_eq!(g.poll_event(), Some(("b".into(), 1)));
        assert_eq!(g.poll_event(), None);
        assert_eq!(g.poll_transmit().map(|t| t.message.1), Some(2));
        assert_eq!(g.poll_transmit().map(|t| t.message.1), Some(1));
        assert_eq!(g.poll_timeout(), Some(10));
        g.handle_timeout(10);
        assert_eq!(g.get("a").unwrap().timeouts, 1);
        assert_eq!(g.get("b").unwrap().timeouts, 0, "not due yet");
        assert_eq!(g.poll_timeout(), Some(50));
    }
}
