//! Tests of the key-value store: objects (the dotted-version-vector laws), the replica
//! store and its hash tree, and small clusters of machines with a hand-made membership view
//! and an instant, lossless network that drops what goes to a down node.

mod cluster;
mod objects;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::address::{Address, UniqueAddress};
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;
use crate::membership_view::MembershipView;
use crate::protocol::{MembershipChange, ProtocolMachine, Transmit};

use super::{KvEvent, KvMachine, KvMessage, KvSettings, MemoryStorage, ReadOptions, WriteOptions};

pub(super) fn node(i: u16) -> UniqueAddress {
    UniqueAddress::new(
        Address::new("kv", "10.0.0.1", 2550 + i),
        1000 + u64::from(i),
    )
}

pub(super) fn settings() -> KvSettings {
    KvSettings {
        auto_commit: true,
        tombstone_grace_ms: 1_000,
        ..KvSettings::default()
    }
}

/// A cluster of key-value machines.
pub(super) struct TestCluster {
    pub(super) now: u64,
    pub(super) nodes: BTreeMap<UniqueAddress, KvMachine<MemoryStorage>>,
    pub(super) disks: BTreeMap<UniqueAddress, MemoryStorage>,
    pub(super) members: BTreeMap<UniqueAddress, Member>,
    /// Nodes that are down: messages to and from them are lost; the others see them
    /// unreachable.
    pub(super) down: BTreeSet<UniqueAddress>,
    queue: VecDeque<(UniqueAddress, Transmit<KvMessage>)>,
    pub(super) events: BTreeMap<UniqueAddress, Vec<KvEvent>>,
    pub(super) settings: KvSettings,
    next_request: u64,
    version: u64,
    /// Messages delivered, by name.
    pub(super) delivered: BTreeMap<&'static str, u64>,
}

impl TestCluster {
    pub(super) fn new(count: u16, settings: KvSettings) -> Self {
        let mut c = TestCluster {
            now: 1_000_000,
            nodes: BTreeMap::new(),
            disks: BTreeMap::new(),
            members: BTreeMap::new(),
            down: BTreeSet::new(),
            queue: VecDeque::new(),
            events: BTreeMap::new(),
            settings,
            next_request: 0,
            version: 0,
            delivered: BTreeMap::new(),
        };
        for i in 0..count {
            c.add(node(i), true);
        }
        c.publish();
        // Every node's first ring makes its segments pending; let anti-entropy settle.
        c.run_for(3_000);
        c
    }

    /// Adds node `n` (Up at once if `up`) with a fresh disk, or its old one after a crash.
    pub(super) fn add(&mut self, n: UniqueAddress, up: bool) {
        let disk = self.disks.entry(n.clone()).or_default().clone();
        let m = KvMachine::new(
            self.settings.clone(),
            n.clone(),
            disk,
            0x5eed ^ n.uid,
            self.now,
        )
        .expect("memory storage");
        self.nodes.insert(n.clone(), m);
        let member = Member::joining(n.clone(), BTreeSet::new(), "1.0.0");
        let member = if up {
            member.with_up(self.members.len() as u32 + 1)
        } else {
            member
        };
        self.members.insert(n, member);
    }

    pub(super) fn set_status(&mut self, n: &UniqueAddress, status: MemberStatus) {
        if let Some(m) = self.members.get_mut(n) {
            *m = if status == MemberStatus::Up {
                m.with_up(100 + self.version as u32)
            } else {
                m.with_status(status)
            };
        }
        self.publish();
    }

    pub(super) fn view_for(&self, me: &UniqueAddress) -> MembershipView {
        let mut g = Gossip::empty();
        for (ua, m) in &self.members {
            g.members.insert(ua.clone(), m.clone());
        }
        for u in &self.down {
            if let Some(obs) = self
                .members
                .keys()
                .find(|k| *k != u && !self.down.contains(*k))
            {
                g.overview.reachability = g.overview.reachability.unreachable(obs, u);
            }
        }
        MembershipView::of(&MembershipState::new(g, me.clone()), self.version)
    }

    pub(super) fn publish(&mut self) {
        self.version += 1;
        let now = self.now;
        let ids: Vec<UniqueAddress> = self.nodes.keys().cloned().collect();
        for id in ids {
            if self.down.contains(&id) {
                continue;
            }
            let view = self.view_for(&id);
            if let Some(n) = self.nodes.get_mut(&id) {
                n.handle_membership(now, &view, MembershipChange::CurrentClusterState);
            }
            self.drain(&id);
        }
        self.deliver_all();
    }

    /// Takes a node down (unreachable, messages lost) without removing it.
    pub(super) fn take_down(&mut self, n: &UniqueAddress) {
        self.down.insert(n.clone());
        self.publish();
    }

    /// Brings a down node back (the same incarnation, as after a partition).
    pub(super) fn bring_back(&mut self, n: &UniqueAddress) {
        self.down.remove(n);
        self.publish();
    }

    /// Crashes and removes a node (its disk stays for a restart).
    pub(super) fn remove(&mut self, n: &UniqueAddress) {
        self.nodes.remove(n);
        self.members.remove(n);
        self.down.remove(n);
        self.publish();
    }

    fn drain(&mut self, id: &UniqueAddress) {
        let Some(m) = self.nodes.get_mut(id) else {
            return;
        };
        while let Some(t) = m.poll_transmit() {
            self.queue.push_back((id.clone(), t));
        }
        while let Some(e) = m.poll_event() {
            self.events.entry(id.clone()).or_default().push(e);
        }
    }

    fn deliver_all(&mut self) {
        let mut steps = 0;
        while let Some((from, t)) = self.queue.pop_front() {
            steps += 1;
            assert!(steps < 1_000_000, "message storm");
            let to = self
                .nodes
                .keys()
                .find(|n| n.address == t.to && Some(n.uid) == t.to_uid)
                .cloned();
            let Some(to) = to else { continue };
            if self.down.contains(&to) || self.down.contains(&from) {
                continue;
            }
            *self.delivered.entry(t.message.name()).or_default() += 1;
            let now = self.now;
            if let Some(m) = self.nodes.get_mut(&to) {
                m.handle_message(now, &from, t.message);
            }
            self.drain(&to);
        }
    }

    /// Delivers `message` from `from` to `to` (as the network would, also a second time).
    pub(super) fn inject(&mut self, from: &UniqueAddress, to: &UniqueAddress, message: KvMessage) {
        let now = self.now;
        if let Some(m) = self.nodes.get_mut(to) {
            m.handle_message(now, from, message);
        }
        self.drain(to);
        self.deliver_all();
    }

    /// Runs `ms` of time in 10 ms steps.
    pub(super) fn run_for(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now += 10;
            let now = self.now;
            let ids: Vec<UniqueAddress> = self.nodes.keys().cloned().collect();
            for id in ids {
                if self.down.contains(&id) {
                    continue;
                }
                if let Some(m) = self.nodes.get_mut(&id) {
                    if m.poll_timeout().is_some_and(|t| t <= now) {
                        m.handle_timeout(now);
                    }
                }
                self.drain(&id);
            }
            self.deliver_all();
        }
    }

    fn request(&mut self) -> u64 {
        self.next_request += 1;
        self.next_request
    }

    fn result_of(&mut self, at: &UniqueAddress, request: u64) -> Option<KvEvent> {
        for _ in 0..2_000 {
            if let Some(events) = self.events.get_mut(at) {
                if let Some(i) = events.iter().position(|e| match e {
                    KvEvent::WriteDone { request: r, .. }
                    | KvEvent::ReadDone { request: r, .. } => *r == request,
                }) {
                    return Some(events.remove(i));
                }
            }
            self.run_for(10);
        }
        None
    }

    pub(super) fn put(
        &mut self,
        at: &UniqueAddress,
        key: &str,
        value: &str,
        context: Option<crate::ddata::VersionVector>,
        options: WriteOptions,
    ) -> Result<(), super::KvError> {
        let r = self.request();
        let now = self.now;
        self.nodes.get_mut(at).expect("node").put(
            now,
            r,
            key.to_string(),
            value.as_bytes().to_vec(),
            context,
            options,
        );
        self.drain(at);
        self.deliver_all();
        match self.result_of(at, r) {
            Some(KvEvent::WriteDone { result, .. }) => result,
            other => panic!("no write answer: {other:?}"),
        }
    }

    pub(super) fn delete(
        &mut self,
        at: &UniqueAddress,
        key: &str,
        context: Option<crate::ddata::VersionVector>,
    ) -> Result<(), super::KvError> {
        let r = self.request();
        let now = self.now;
        self.nodes.get_mut(at).expect("node").delete(
            now,
            r,
            key.to_string(),
            context,
            WriteOptions::default(),
        );
        self.drain(at);
        self.deliver_all();
        match self.result_of(at, r) {
            Some(KvEvent::WriteDone { result, .. }) => result,
            other => panic!("no delete answer: {other:?}"),
        }
    }

    pub(super) fn get(
        &mut self,
        at: &UniqueAddress,
        key: &str,
        options: ReadOptions,
    ) -> Result<super::ReadResult, super::KvError> {
        let r = self.request();
        let now = self.now;
        self.nodes
            .get_mut(at)
            .expect("node")
            .get(now, r, key.to_string(), options);
        self.drain(at);
        self.deliver_all();
        match self.result_of(at, r) {
            Some(KvEvent::ReadDone { result, .. }) => result,
            other => panic!("no read answer: {other:?}"),
        }
    }

    /// The live values of `key` as one node stores it (sorted).
    pub(super) fn stored(&mut self, at: &UniqueAddress, key: &str) -> Option<Vec<String>> {
        let o = self.nodes.get_mut(at)?.store().get(key).ok()??;
        let mut v: Vec<String> = o
            .values()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        v.sort();
        Some(v)
    }

    /// The nodes of the key's preference list (default n), from the first node's ring.
    pub(super) fn owners(&self, key: &str) -> Vec<UniqueAddress> {
        let m = self
            .nodes
            .iter()
            .find(|(n, _)| !self.down.contains(*n))
            .map(|(_, m)| m)
            .expect("a running node");
        let s = super::ring::segment_of(super::key_hash(key));
        m.ring()
            .preference_list(s, self.settings.n)
            .into_iter()
            .cloned()
            .collect()
    }
}

/// Values of a read, sorted.
pub(super) fn values(r: &super::ReadResult) -> Vec<String> {
    let mut v: Vec<String> = r
        .object
        .iter()
        .flat_map(|o| o.values())
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    v.sort();
    v
}
