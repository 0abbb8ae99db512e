//! Tests of the sharding machine: a small cluster of machines in one test, with a
//! hand-made membership view and per-link FIFO queues (the runtime's lanes keep order
//! per link; the order *between* links is chosen by a seeded RNG), playing the runtime
//! around each machine: it runs entities as lists of the messages they received, hands
//! that list over as the entity's state, and checks at every step that no entity is alive
//! on two nodes.

mod load_aware;
mod scenarios;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::address::{Address, UniqueAddress};
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;
use crate::membership_view::MembershipView;
use crate::protocol::{MembershipChange, ProtocolMachine};

use super::{ClusterSharding, ShardingEvent, ShardingMessage, ShardingSettings, StopReason};

pub(super) fn node(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("t", "10.0.0.1", 2550 + i), 1000 + u64::from(i))
}

/// One entity incarnation as the test runtime runs it: the payloads it received.
#[derive(Clone, Debug, Default)]
pub(super) struct EntityRun {
    pub(super) received: Vec<String>,
}

/// The test's stand-in for the runtime around one machine.
pub(super) struct TestNode {
    pub(super) machine: ClusterSharding,
    /// (shard, entity) → the running entity.
    pub(super) entities: BTreeMap<(String, String), EntityRun>,
    /// Stops requested, done at the given time: (at, shard, entity, handoff).
    pub(super) stopping: Vec<(u64, String, String, bool)>,
    /// How long an entity takes to stop, ms.
    pub(super) stop_delay_ms: u64,
    /// Replies to this node's asks.
    pub(super) replies: BTreeMap<u64, Result<Vec<u8>, String>>,
    /// Asks dropped here.
    pub(super) dropped: Vec<Option<u64>>,
    pub(super) graceful_done: bool,
    pub(super) exiting_done: bool,
    pub(super) started: u64,
}

/// A cluster of sharding machines.
pub(super) struct TestCluster {
    pub(super) now: u64,
    pub(super) nodes: BTreeMap<UniqueAddress, TestNode>,
    /// Members as the view shows them.
    pub(super) members: BTreeMap<UniqueAddress, Member>,
    pub(super) unreachable: BTreeSet<UniqueAddress>,
    links: BTreeMap<(UniqueAddress, UniqueAddress), VecDeque<ShardingMessage>>,
    rng: SmallRng,
    version: u64,
    next_up: u32,
    pub(super) settings: ShardingSettings,
    /// Every (entity, node) that was ever alive, for the one-incarnation check.
    pub(super) checks: u64,
}

impl TestCluster {
    pub(super) fn new(seed: u64, settings: ShardingSettings) -> Self {
        TestCluster {
            now: 1_000_000,
            nodes: BTreeMap::new(),
            members: BTreeMap::new(),
            unreachable: BTreeSet::new(),
            links: BTreeMap::new(),
            rng: SmallRng::seed_from_u64(seed),
            version: 0,
            next_up: 1,
            settings,
            checks: 0,
        }
    }

    /// Starts node `i` as an Up member (its machine sees the new view).
    pub(super) fn add_node(&mut self, i: u16) -> UniqueAddress {
        self.add_node_with(i, self.settings.clone())
    }

    pub(super) fn add_node_with(&mut self, i: u16, settings: ShardingSettings) -> UniqueAddress {
        let n = node(i);
        let machine = ClusterSharding::new(settings, n.clone(), u64::from(i), self.now);
        self.nodes.insert(
            n.clone(),
            TestNode {
                machine,
                entities: BTreeMap::new(),
                stopping: Vec::new(),
                stop_delay_ms: 0,
                replies: BTreeMap::new(),
                dropped: Vec::new(),
                graceful_done: false,
                exiting_done: false,
                started: 0,
            },
        );
        let m = Member::joining(n.clone(), BTreeSet::new(), "1.0.0").with_up(self.next_up);
        self.next_up += 1;
        self.members.insert(n.clone(), m);
        self.publish();
        n
    }

    /// Sets a member's status (Leaving, Exiting, Down) and publishes the view.
    pub(super) fn set_status(&mut self, n: &UniqueAddress, status: MemberStatus) {
        if let Some(m) = self.members.get_mut(n) {
            *m = m.with_status(status);
        }
        self.publish();
    }

    /// Crashes `n`: its machine is gone, messages to and from it are lost; the others
    /// see it removed.
    pub(super) fn crash(&mut self, n: &UniqueAddress) {
        self.nodes.remove(n);
        self.members.remove(n);
        self.links.retain(|(a, b), _| a != n && b != n);
        self.publish();
    }

    /// A node that left gracefully is removed.
    pub(super) fn remove(&mut self, n: &UniqueAddress) {
        self.crash(n);
    }

    pub(super) fn view_for(&self, me: &UniqueAddress) -> MembershipView {
        let mut g = Gossip::empty();
        for (ua, m) in &self.members {
            g.members.insert(ua.clone(), m.clone());
        }
        for u in &self.unreachable {
            if let Some(obs) = self.members.keys().find(|k| *k != u) {
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
            let view = self.view_for(&id);
            if let Some(n) = self.nodes.get_mut(&id) {
                n.machine
                    .handle_membership(now, &view, MembershipChange::CurrentClusterState);
            }
            self.drain(&id);
        }
    }

    /// A local send from node `from` to `entity` (shard by the default extractor).
    pub(super) fn tell(
        &mut self,
        from: &UniqueAddress,
        entity: &str,
        payload: &str,
        ask: Option<u64>,
    ) {
        let shard = super::shard_id(&entity.to_string(), self.settings.number_of_shards);
        let now = self.now;
        if let Some(n) = self.nodes.get_mut(from) {
            n.machine.tell(
                now,
                shard,
                entity.to_string(),
                payload.as_bytes().to_vec(),
                ask,
            );
        }
        self.drain(from);
    }

    /// Takes a node's transmits into the links and plays its events.
    pub(super) fn drain(&mut self, id: &UniqueAddress) {
        loop {
            let now = self.now;
            let Some(n) = self.nodes.get_mut(id) else {
                return;
            };
            let mut any = false;
            while let Some(t) = n.machine.poll_transmit() {
                any = true;
                if let Some(to) = self
                    .members
                    .keys()
                    .find(|k| k.address == t.to && Some(k.uid) == t.to_uid)
                {
                    self.links
                        .entry((id.clone(), to.clone()))
                        .or_default()
                        .push_back(t.message);
                }
            }
            while let Some(e) = n.machine.poll_event() {
                any = true;
                match e {
                    ShardingEvent::StartEntity {
                        shard,
                        entity,
                        state,
                    } => {
                        let received = state
                            .map(|s| {
                                String::from_utf8(s)
                                    .unwrap()
                                    .split('|')
                                    .filter(|x| !x.is_empty())
                                    .map(String::from)
                                    .collect()
                            })
                            .unwrap_or_default();
                        let prev = n
                            .entities
                            .insert((shard, entity.clone()), EntityRun { received });
                        assert!(prev.is_none(), "{entity} started twice on {id}");
                        n.started += 1;
                    }
                    ShardingEvent::Deliver {
                        shard,
                        entity,
                        payload,
                        reply_to,
                    } => {
                        let run = n
                            .entities
                            .get_mut(&(shard, entity.clone()))
                            .unwrap_or_else(|| panic!("{entity} not started on {id}"));
                        let p = String::from_utf8(payload).unwrap();
                        run.received.push(p.clone());
                        if let Some((to, ask)) = reply_to {
                            let reply = format!("{}:{}", id.address.port, run.received.len());
                            n.machine.reply(now, &to, ask, Ok(reply.into_bytes()));
                        }
                    }
                    ShardingEvent::StopEntity {
                        shard,
                        entity,
                        reason,
                    } => {
                        let at = now + n.stop_delay_ms;
                        n.stopping
                            .push((at, shard, entity, reason == StopReason::HandOff));
                    }
                    ShardingEvent::KillEntity { shard, entity } => {
                        n.stopping.retain(|s| !(s.1 == shard && s.2 == entity));
                        n.entities.remove(&(shard.clone(), entity.clone()));
                        n.machine.entity_stopped(now, &shard, &entity, None);
                    }
                    ShardingEvent::Reply { ask, result } => {
                        n.replies.insert(ask, result);
                    }
                    ShardingEvent::Dropped { ask, .. } => n.dropped.push(ask),
                    ShardingEvent::GracefulShutdownDone => n.graceful_done = true,
                    ShardingEvent::ExitingDone => n.exiting_done = true,
                    _ => {}
                }
            }
            if !any {
                return;
            }
        }
    }

    /// Finishes the stops that are due.
    fn run_stops(&mut self) {
        let now = self.now;
        let ids: Vec<UniqueAddress> = self.nodes.keys().cloned().collect();
        for id in ids {
            let Some(n) = self.nodes.get_mut(&id) else {
                continue;
            };
            let due: Vec<_> = n.stopping.iter().filter(|s| s.0 <= now).cloned().collect();
            n.stopping.retain(|s| s.0 > now);
            for (_, shard, entity, handoff) in due {
                let run = n.entities.remove(&(shard.clone(), entity.clone()));
                let state = match (handoff, run) {
                    (true, Some(r)) => Some(r.received.join("|").into_bytes()),
                    _ => None,
                };
                n.machine.entity_stopped(now, &shard, &entity, state);
            }
            self.drain(&id);
        }
    }

    /// No entity is alive on two nodes.
    pub(super) fn check_one_incarnation(&mut self) {
        let mut seen: HashMap<&(String, String), &UniqueAddress> = HashMap::new();
        for (id, n) in &self.nodes {
            for key in n.entities.keys() {
                if let Some(other) = seen.insert(key, id) {
                    panic!("entity {key:?} alive on {other} and {id} at {}", self.now);
                }
            }
        }
        self.checks += 1;
    }

    /// Delivers one message of a random non-empty link, or returns false.
    fn deliver_one(&mut self) -> bool {
        let busy: Vec<(UniqueAddress, UniqueAddress)> = self
            .links
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        if busy.is_empty() {
            return false;
        }
        let k = busy[self.rng.random_range(0..busy.len())].clone();
        let Some(msg) = self.links.get_mut(&k).and_then(|q| q.pop_front()) else {
            return false;
        };
        let now = self.now;
        if let Some(n) = self.nodes.get_mut(&k.1) {
            n.machine.handle_message(now, &k.0, msg);
        }
        self.drain(&k.1);
        true
    }

    /// Delivers messages until none is in flight (time does not move).
    pub(super) fn settle(&mut self) {
        for _ in 0..1_000_000 {
            self.run_stops();
            if !self.deliver_one() {
                self.run_stops();
                if !self.links.values().any(|q| !q.is_empty()) {
                    self.check_one_incarnation();
                    return;
                }
            }
            self.check_one_incarnation();
        }
        panic!("messages never settled");
    }

    /// Moves time forward by `ms` in 10 ms steps, running timers and settling after each.
    pub(super) fn advance(&mut self, ms: u64) {
        let end = self.now + ms;
        while self.now < end {
            self.now = (self.now + 10).min(end);
            let now = self.now;
            let ids: Vec<UniqueAddress> = self.nodes.keys().cloned().collect();
            for id in ids {
                if let Some(n) = self.nodes.get_mut(&id) {
                    if n.machine.poll_timeout().is_some_and(|t| t <= now) {
                        n.machine.handle_timeout(now);
                    }
                }
                self.drain(&id);
            }
            self.settle();
        }
    }

    /// Like [`TestCluster::advance`] but delivering at most `per_step` messages per 10 ms
    /// step, so that sends interleave with a handoff in flight.
    pub(super) fn advance_slowly(&mut self, ms: u64, per_step: usize) {
        let end = self.now + ms;
        while self.now < end {
            self.now = (self.now + 10).min(end);
            let now = self.now;
            let ids: Vec<UniqueAddress> = self.nodes.keys().cloned().collect();
            for id in ids {
                if let Some(n) = self.nodes.get_mut(&id) {
                    if n.machine.poll_timeout().is_some_and(|t| t <= now) {
                        n.machine.handle_timeout(now);
                    }
                }
                self.drain(&id);
            }
            for _ in 0..per_step {
                self.run_stops();
                if !self.deliver_one() {
                    break;
                }
                self.check_one_incarnation();
            }
        }
    }

    /// The node where `entity` is alive.
    pub(super) fn host_of(&self, entity: &str) -> Option<UniqueAddress> {
        self.nodes
            .iter()
            .find(|(_, n)| n.entities.keys().any(|(_, e)| e == entity))
            .map(|(id, _)| id.clone())
    }

    /// What `entity` has received (across incarnations, through handed-over state).
    pub(super) fn received(&self, entity: &str) -> Vec<String> {
        self.nodes
            .values()
            .flat_map(|n| n.entities.iter())
            .find(|((_, e), _)| e == entity)
            .map(|(_, r)| r.received.clone())
            .unwrap_or_default()
    }

    /// The node running the active coordinator.
    pub(super) fn coordinator(&self) -> Option<UniqueAddress> {
        self.nodes
            .iter()
            .find(|(_, n)| n.machine.is_coordinator())
            .map(|(id, _)| id.clone())
    }

    pub(super) fn machine(&mut self, n: &UniqueAddress) -> &mut ClusterSharding {
        &mut self.nodes.get_mut(n).expect("node").machine
    }
}

/// Settings for fast tests: small timeouts, 100 shards.
pub(super) fn fast_settings() -> ShardingSettings {
    ShardingSettings {
        type_name: "counter".into(),
        number_of_shards: 100,
        retry_interval_ms: 200,
        rebalance_interval_ms: 1_000,
        handoff_timeout_ms: 10_000,
        shard_start_timeout_ms: 1_000,
        waiting_for_state_timeout_ms: 500,
        updating_state_timeout_ms: 500,
        removal_margin_ms: 1_000,
        passivation_idle_timeout_ms: None,
        ..ShardingSettings::default()
    }
}
