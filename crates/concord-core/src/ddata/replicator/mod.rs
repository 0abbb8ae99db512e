//! The [`Replicator`]: the sans-IO machine that keeps CRDT values replicated across the
//! members of a cluster (Akka's `Replicator`; Pekko `Replicator.scala`; research notes §3).
//!
//! Every node (optionally only those with a role) runs one. Each holds a full replica of
//! every key. The local owner calls [`Replicator::get`], [`Replicator::update`],
//! [`Replicator::delete`] and [`Replicator::subscribe`]; answers come back as
//! [`ReplicatorEvent`]s. Between replicators:
//!
//! - **Reads and writes with a consistency level** ([`ReadConsistency`],
//!   [`WriteConsistency`]): the request goes to `needed - 1` other replicas (reachable
//!   first; oldest first for reads with `prefer-oldest`, shuffled otherwise) and, after a
//!   fifth of the timeout, to up to 10 more; quorum size `min(N, max(N/2 + 1 + k,
//!   min-cap))` ([`consistency`]).
//! - **Read repair** (the original spec's Dynamo design, which Akka only does locally): a
//!   read that reached its quorum merges the replies, stores the merge locally *and*
//!   writes it back to every replica that answered with an older or missing value.
//! - **Anti-entropy gossip** every `gossip-interval` (2 s) to one random node: digests of a
//!   chunk of keys; the peer answers with the envelopes that differ ([`anti_entropy`]).
//! - **Delta propagation** every 400 ms: each updated key's delta, numbered per key, to a
//!   rotating slice of the nodes; a receiver that sees a gap asks for the full state
//!   ([`delta_propagation`]).
//! - **Pruning** of removed nodes' entries: the leader marks, every node sees, the leader
//!   collapses the removed node's share into its own, later data is cleaned ([`pruning`]).
//! - **Durable keys**: every change of a durable key is emitted as
//!   [`ReplicatorEvent::Store`] for the runtime to write before it acts on the next event;
//!   at start the runtime loads them with [`Replicator::load_durable`].

mod aggregator;
pub mod anti_entropy;
mod api;
pub mod consistency;
pub mod delta_propagation;
mod delta_state;
mod entry;
mod envelope;
mod local;
mod messages;
pub mod pruning;
mod read_aggregator;
mod settings;
mod stats;
mod timer;
mod value;
mod write_aggregator;

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};
use crate::timers::TimerTable;

use crate::ddata::replica_id::ReplicaId;
use delta_state::DeltaState;
use entry::Entry;
use read_aggregator::ReadAggregator;
use timer::ReplicatorTimer;
use write_aggregator::WriteAggregator;

pub use api::{DeleteResult, GetResult, ReplicatorEvent, RequestId, UpdateResult};
pub use consistency::{ReadConsistency, WriteConsistency};
pub use envelope::{DataEnvelope, Digest, EnvelopeData, PruningState, SerializedEnvelope};
pub use messages::{DeltaEntry, ReplicatorMessage};
pub use settings::ReplicatorSettings;
pub use stats::ReplicatorStats;
pub use value::{
    check_key_id, DataError, DataTypeId, DataTypeRegistry, FlagKey, GCounterKey, GSetKey,
    InvalidKey, Key, LWWMapKey, LWWRegisterKey, ORMultiMapKey, ORSetKey, PNCounterKey,
    PNCounterMapKey, ReplicatedType, ReplicatedValue, MAX_KEY_BYTES,
};

/// The Distributed Data replicator of one node; see the module docs.
pub struct Replicator {
    settings: ReplicatorSettings,
    self_node: UniqueAddress,
    replica: ReplicaId,
    registry: DataTypeRegistry,
    /// Replicas that count in quorums (Up, Leaving, Exiting, shutting down; with the role),
    /// not this one; the value is true for Exiting.
    nodes: BTreeMap<UniqueAddress, bool>,
    /// WeaklyUp members: they get gossip but do not count.
    weakly_up: BTreeSet<UniqueAddress>,
    unreachable: BTreeSet<UniqueAddress>,
    /// Nodes, oldest first (for `prefer-oldest`).
    by_age: Vec<UniqueAddress>,
    /// Every member (with the role) seen in the membership, to notice removals.
    known: BTreeSet<UniqueAddress>,
    /// Removed nodes, with the all-reachable clock when they were removed.
    removed: BTreeMap<UniqueAddress, u64>,
    /// True if this node replicates (it is a member with the role).
    active: bool,
    data: BTreeMap<String, Entry>,
    deltas: DeltaState,
    reads: BTreeMap<u64, ReadAggregator>,
    writes: BTreeMap<u64, WriteAggregator>,
    next_request: u64,
    subscriptions: BTreeMap<String, usize>,
    changed: BTreeSet<String>,
    rng: SmallRng,
    /// Transmits, events and timers for the host.
    out: Outputs<ReplicatorMessage, ReplicatorEvent, ReplicatorTimer>,
    /// Time during which every node was reachable, ms (the pruning clock).
    all_reachable_clock_ms: u64,
    last_now_ms: u64,
    status_count: u64,
    stats: ReplicatorStats,
}

impl Replicator {
    /// A replicator for `self_node` (its replica id is the node's uid) with the types in
    /// `registry`; `seed` seeds its random choices; its timers start at `now_ms`.
    pub fn new(
        settings: ReplicatorSettings,
        self_node: UniqueAddress,
        registry: DataTypeRegistry,
        seed: u64,
        now_ms: u64,
    ) -> Self {
        let mut timers = TimerTable::new();
        timers.set(
            ReplicatorTimer::Gossip,
            now_ms + settings.gossip_interval_ms,
        );
        timers.set(
            ReplicatorTimer::DeltaPropagation,
            now_ms + settings.delta_propagation_interval_ms,
        );
        timers.set(
            ReplicatorTimer::NotifySubscribers,
            now_ms + settings.notify_subscribers_interval_ms,
        );
        timers.set(
            ReplicatorTimer::Pruning,
            now_ms + settings.pruning_interval_ms,
        );
        Replicator {
            replica: ReplicaId(self_node.uid),
            settings,
            self_node,
            registry,
            nodes: BTreeMap::new(),
            weakly_up: BTreeSet::new(),
            unreachable: BTreeSet::new(),
            by_age: Vec::new(),
            known: BTreeSet::new(),
            removed: BTreeMap::new(),
            active: false,
            data: BTreeMap::new(),
            deltas: DeltaState::default(),
            reads: BTreeMap::new(),
            writes: BTreeMap::new(),
            next_request: 1,
            subscriptions: BTreeMap::new(),
            changed: BTreeSet::new(),
            rng: SmallRng::seed_from_u64(seed),
            out: Outputs {
                timers,
                ..Outputs::new()
            },
            all_reachable_clock_ms: 0,
            last_now_ms: now_ms,
            status_count: 0,
            stats: ReplicatorStats::default(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ReplicatorSettings {
        &self.settings
    }

    /// This node.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// This replica's id (the node's uid).
    pub fn replica(&self) -> ReplicaId {
        self.replica
    }

    /// The data types this replicator decodes.
    pub fn registry(&self) -> &DataTypeRegistry {
        &self.registry
    }

    /// Registers a data type (idempotent).
    pub fn register_type<T: ReplicatedType>(&mut self) -> DataTypeId
    where
        T::Delta: serde::Serialize + serde::de::DeserializeOwned,
    {
        self.registry.register::<T>()
    }

    /// Counters.
    pub fn stats(&self) -> &ReplicatorStats {
        &self.stats
    }

    /// The other replicas that count in quorums now.
    pub fn nodes(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.nodes.keys()
    }

    /// Number of keys held (tombstones included).
    pub fn key_count(&self) -> usize {
        self.data.len()
    }

    /// Every key with its type name (`None` for a tombstone), encoded size in bytes and
    /// whether it is durable (for `GET /cluster/ddata`).
    pub fn key_summaries(&self) -> Vec<(String, Option<&'static str>, usize, bool)> {
        self.data
            .iter()
            .map(|(k, e)| {
                let value = e.envelope.value();
                (
                    k.clone(),
                    value.map(|v| v.type_name()),
                    value.map_or(0, |v| v.encode().len()),
                    self.settings.is_durable(k),
                )
            })
            .collect()
    }

    /// The local value of `key` without a request (a read at `ReadLocal`).
    pub fn local_value(&self, key: &str) -> Option<&DataEnvelope> {
        self.data.get(key).map(|e| &e.envelope)
    }

    /// The digest of `key` (for tests and tools).
    pub fn digest(&self, key: &str) -> Option<Digest> {
        self.data
            .get(key)
            .map(|e| e.digest.unwrap_or_else(|| e.envelope.digest()))
    }

    /// Loads a durable key stored earlier (before the replicator serves anything).
    ///
    /// # Errors
    /// The value's type is not registered, or its bytes do not decode.
    pub fn load_durable(
        &mut self,
        key: &str,
        envelope: &SerializedEnvelope,
    ) -> Result<(), DataError> {
        let env = DataEnvelope::deserialize(envelope, &self.registry)?;
        match self.data.get_mut(key) {
            Some(e) => {
                e.envelope.merge(&env, self.last_now_ms)?;
                e.digest = None;
            }
            None => {
                self.data.insert(key.to_string(), Entry::new(env));
            }
        }
        Ok(())
    }

    fn advance_clock(&mut self, now_ms: u64) {
        let dt = now_ms.saturating_sub(self.last_now_ms);
        if self.unreachable.is_empty() {
            self.all_reachable_clock_ms = self.all_reachable_clock_ms.saturating_add(dt);
        }
        self.last_now_ms = self.last_now_ms.max(now_ms);
    }

    fn send(&mut self, to: &UniqueAddress, message: ReplicatorMessage) {
        self.out.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message,
        });
    }

    fn next_request_id(&mut self) -> u64 {
        let id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        id
    }

    /// Every node gossip and deltas go to: the counted replicas and the WeaklyUp ones.
    fn all_nodes(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.nodes.keys().chain(self.weakly_up.iter())
    }

    /// Marks `key` changed: subscribers hear of it, a durable key is stored.
    fn on_changed(&mut self, key: &str) {
        self.changed.insert(key.to_string());
        if self.settings.is_durable(key) {
            if let Some(e) = self.data.get(key) {
                self.out.events.push_back(ReplicatorEvent::Store {
                    key: key.to_string(),
                    envelope: e.envelope.serialize(),
                });
            }
        }
    }

    /// Merges an envelope from another replica into `key` (or creates the key). Returns
    /// false if it could not (type mismatch, too many keys).
    fn write_local(&mut self, key: &str, envelope: DataEnvelope) -> bool {
        let now = self.last_now_ms;
        let self_address = self.self_node.address.clone();
        match self.data.get_mut(key) {
            Some(e) => {
                let before = e.digest();
                if e.envelope.merge(&envelope, now).is_err() {
                    self.stats.bad_values += 1;
                    return false;
                }
                e.envelope.add_seen(&self_address);
                e.digest = None;
                if e.digest() != before {
                    self.on_changed(key);
                }
                true
            }
            None => {
                if self.data.len() >= self.settings.max_keys {
                    self.stats.keys_refused += 1;
                    return false;
                }
                let mut env = envelope;
                env.cleanup();
                env.add_seen(&self_address);
                self.data.insert(key.to_string(), Entry::new(env));
                self.on_changed(key);
                true
            }
        }
    }

    /// Decodes an envelope from the wire, counting what cannot be.
    fn decode_envelope(&mut self, s: &SerializedEnvelope) -> Option<DataEnvelope> {
        match DataEnvelope::deserialize(s, &self.registry) {
            Ok(e) => Some(e),
            Err(DataError::UnknownType(_)) => {
                self.stats.unknown_types += 1;
                None
            }
            Err(_) => {
                self.stats.bad_values += 1;
                None
            }
        }
    }

    fn notify_subscribers(&mut self) {
        for key in std::mem::take(&mut self.changed) {
            if self.subscriptions.get(&key).copied().unwrap_or(0) == 0 {
                continue;
            }
            match self.data.get(&key).map(|e| &e.envelope.data) {
                Some(EnvelopeData::Value(v)) => {
                    self.out.events.push_back(ReplicatorEvent::Changed {
                        key,
                        value: v.clone_value(),
                    })
                }
                Some(EnvelopeData::Deleted) => {
                    self.out.events.push_back(ReplicatorEvent::Deleted { key })
                }
                None => {}
            }
        }
    }

    fn update_membership(&mut self, view: &MembershipView) {
        let role = self.settings.role.as_deref();
        let with_role = |roles: &BTreeSet<String>| role.is_none_or(|r| roles.contains(r));
        let mut nodes = BTreeMap::new();
        let mut weakly_up = BTreeSet::new();
        for (ua, m) in &view.members {
            if *ua == self.self_node || !with_role(&m.roles) {
                continue;
            }
            match m.status {
                MemberStatus::Up
                | MemberStatus::Leaving
                | MemberStatus::PreparingForShutdown
                | MemberStatus::ReadyForShutdown => {
                    nodes.insert(ua.clone(), false);
                }
                MemberStatus::Exiting => {
                    nodes.insert(ua.clone(), true);
                }
                MemberStatus::WeaklyUp => {
                    weakly_up.insert(ua.clone());
                }
                MemberStatus::Joining | MemberStatus::Down | MemberStatus::Removed => {}
            }
        }
        // A member that is no longer in the membership was removed.
        let members: BTreeSet<UniqueAddress> = view
            .members
            .iter()
            .filter(|(ua, m)| **ua != self.self_node && with_role(&m.roles))
            .map(|(ua, _)| ua.clone())
            .collect();
        for n in self.known.difference(&members) {
            self.removed.insert(n.clone(), self.all_reachable_clock_ms);
            self.deltas.forget_node(n);
        }
        self.known = members;
        self.nodes = nodes;
        self.weakly_up = weakly_up;
        self.unreachable = view
            .unreachable_members()
            .map(|m| m.unique_address.clone())
            .collect();
        self.by_age = view
            .by_age(role)
            .into_iter()
            .map(|m| m.unique_address.clone())
            .filter(|u| *u != self.self_node)
            .collect();
        self.active = view.self_member().is_some_and(|m| {
            with_role(&m.roles)
                && !matches!(
                    m.status,
                    MemberStatus::Joining | MemberStatus::Down | MemberStatus::Removed
                )
        });
    }

    /// True if this node is the pruning leader: the lowest address among the Up replicas
    /// and itself.
    fn is_leader(&self) -> bool {
        self.active
            && self
                .nodes
                .iter()
                .filter(|(_, exiting)| !**exiting)
                .all(|(n, _)| self.self_node.address < n.address)
    }
}

impl ProtocolMachine for Replicator {
    type Message = ReplicatorMessage;
    type Event = ReplicatorEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::DISTRIBUTED_DATA
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: ReplicatorMessage) {
        self.advance_clock(now_ms);
        if self.removed.contains_key(from) {
            return;
        }
        match message {
            ReplicatorMessage::Read { request, key } => {
                let envelope = self.data.get(&key).map(|e| e.envelope.serialize());
                self.send(from, ReplicatorMessage::ReadResult { request, envelope });
            }
            ReplicatorMessage::ReadResult { request, envelope } => {
                self.on_read_result(from, request, envelope)
            }
            ReplicatorMessage::Write {
                request,
                key,
                envelope,
            } => {
                let ok = check_key_id(&key).is_ok()
                    && match self.decode_envelope(&envelope) {
                        Some(env) => self.write_local(&key, env),
                        None => false,
                    };
                if let Some(request) = request {
                    let reply = if ok {
                        ReplicatorMessage::WriteAck { request }
                    } else {
                        ReplicatorMessage::WriteNack { request }
                    };
                    self.send(from, reply);
                }
            }
            ReplicatorMessage::WriteAck { request } => self.on_write_reply(from, request, true),
            ReplicatorMessage::WriteNack { request } => self.on_write_reply(from, request, false),
            ReplicatorMessage::DeltaPropagation { deltas } => self.receive_deltas(from, deltas),
            ReplicatorMessage::DeltaNack { key } => self.receive_delta_nack(from, &key),
            ReplicatorMessage::Status {
                digests,
                chunk,
                total_chunks,
            } => self.receive_status(from, digests, chunk, total_chunks),
            ReplicatorMessage::Gossip { entries, send_back } => {
                self.receive_gossip(from, entries, send_back)
            }
        }
    }

    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, _change: MembershipChange) {
        self.advance_clock(now_ms);
        self.update_membership(view);
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        self.advance_clock(now_ms);
        for t in self.out.timers.expired(now_ms) {
            match t {
                ReplicatorTimer::Gossip => {
                    self.gossip_tick();
                    self.out
                        .timers
                        .set(t, now_ms + self.settings.gossip_interval_ms);
                }
                ReplicatorTimer::DeltaPropagation => {
                    self.delta_propagation_tick();
                    self.out
                        .timers
                        .set(t, now_ms + self.settings.delta_propagation_interval_ms);
                }
                ReplicatorTimer::NotifySubscribers => {
                    self.notify_subscribers();
                    self.out
                        .timers
                        .set(t, now_ms + self.settings.notify_subscribers_interval_ms);
                }
                ReplicatorTimer::Pruning => {
                    self.pruning_tick(now_ms);
                    self.out
                        .timers
                        .set(t, now_ms + self.settings.pruning_interval_ms);
                }
                ReplicatorTimer::Secondaries(id) => self.send_to_secondaries(id),
                ReplicatorTimer::RequestTimeout(id) => self.request_timed_out(id),
            }
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit<ReplicatorMessage>> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<ReplicatorEvent> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.out.poll_timeout()
    }
}

#[cfg(test)]
mod tests;
