//! A Dynamo-style replicated key-value store: N/R/W quorums, dotted-version-vector
//! siblings, read repair, hinted handoff, transfers on membership changes and
//! anti-entropy (the original cluster spec's "Implementing a Dynamo-style Distributed
//! Database on top of Akka Cluster"; DeCandia et al., "Dynamo: Amazon's Highly Available
//! Key-value Store", SOSP 2007; Riak KV, its open-source descendant).
//!
//! [`KvMachine`] is the sans-IO machine of one node. It is at once
//!
//! - a **coordinator** ([`coordinator`]): any node takes a client's get and sends it to the
//!   key's preference list on the [`Ring`] — a primary that no member can reach is replaced
//!   by the next member of the ring (a **fallback**) — and answers once R replicas answered,
//!   with the merge of their versions (concurrent versions come back as siblings); then it
//!   sends the merged version to every replica that answered an older one (**read
//!   repair**). A put or delete is coordinated by a target of the key (a node that is not
//!   one forwards it): it applies the write to its local copy with a fresh dot of the key's
//!   local actor and sends the resulting version to the other targets — fallbacks store
//!   theirs as hinted writes — and answers once W acknowledged. A delete writes a
//!   tombstone, removed (**reaped**) once every replica had it and `tombstone-grace` passed;
//! - a **replica** ([`replica`]): it merges the versions coordinators send into its [`ReplicaStore`]
//!   (durable before it acknowledges: outputs are held until [`KvMachine::commit`]);
//! - a party to **anti-entropy** ([`anti_entropy`]): with each peer that replicates the
//!   same segments it compares a three-level hash tree — groups, 64 buckets, keys — and
//!   exchanges the versions that differ. A node that becomes an owner of a segment pulls
//!   it this way before its "not found" counts towards R;
//! - a **handoff** sender ([`handoff`]): every group of keys it holds but does not own —
//!   hinted writes, and its old segments after a join, a leave or a crash moved them — is
//!   sent in pages to the owners, and removed here once all of them stored it.
//!
//! Guarantees (docs/KV_STORE.md): an acknowledged write is on W disks (W primaries; with
//! `sloppy-quorum`, primaries and fallbacks) and is lost only if all of them are; handoff
//! and anti-entropy bring every key back to N replicas. With W + R > N a read from the
//! primaries sees every write acknowledged before it began. Siblings appear only for
//! writes that did not see each other.

pub mod anti_entropy;
mod anti_entropy_state;
mod api;
pub mod coordinator;
pub mod handoff;
mod handoff_state;
pub(crate) mod limits;
pub mod message;
pub mod object;
mod record;
pub mod replica;
mod requests;
pub mod ring;
pub mod settings;
pub mod storage;
pub mod store;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};
use crate::timers::TimerTable;

pub use api::{
    KvError, KvEvent, KvStats, KvStatus, QuorumFailure, ReadOptions, ReadResult, WriteOptions,
};
pub use message::KvMessage;
pub use object::{
    decode_context, encode_context, Dot, ObjectError, Sibling, Versioned, Write, MAX_N,
};
pub use ring::{key_hash, Ring, BUCKETS, SEGMENTS};
pub use settings::{KvSettings, Quorum};
pub use storage::{KvStorage, MemoryStorage, StorageError, Table};
pub use store::ReplicaStore;

use anti_entropy_state::AntiEntropy;
use handoff_state::Handoffs;
use requests::Requests;

/// The machine's timers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum KvTimer {
    /// Request deadlines and due reaps.
    Tick,
    /// Start anti-entropy exchanges.
    AntiEntropy,
    /// Hand off misplaced groups.
    Handoff,
}

/// Period of [`KvTimer::Tick`], ms.
const TICK_MS: u64 = 50;
/// Period of [`KvTimer::Handoff`], ms.
const HANDOFF_MS: u64 = 200;

/// The key-value store machine of one node; see the module docs.
pub struct KvMachine<S: KvStorage> {
    settings: KvSettings,
    self_node: UniqueAddress,
    view: MembershipView,
    ring: Ring,
    store: ReplicaStore<S>,
    requests: Requests,
    ae: AntiEntropy,
    handoffs: Handoffs,
    /// Outputs held until the writes before them are committed.
    held_transmits: Vec<Transmit<KvMessage>>,
    held_events: Vec<KvEvent>,
    /// Transmits, events and timers for the host.
    out: Outputs<KvMessage, KvEvent, KvTimer>,
    stats: KvStats,
}

impl<S: KvStorage> KvMachine<S> {
    /// The machine of `self_node` over `storage`; `seed` names a new store's replica (its
    /// random id) and seeds nothing else; timers start at `now_ms`.
    ///
    /// # Errors
    /// The storage failed or holds corrupt records.
    pub fn new(
        settings: KvSettings,
        self_node: UniqueAddress,
        storage: S,
        seed: u64,
        now_ms: u64,
    ) -> Result<Self, StorageError> {
        let store = ReplicaStore::open(storage, seed)?;
        let mut timers = TimerTable::new();
        timers.set(KvTimer::Tick, now_ms + TICK_MS);
        timers.set(
            KvTimer::AntiEntropy,
            now_ms + settings.anti_entropy_interval_ms,
        );
        timers.set(KvTimer::Handoff, now_ms + HANDOFF_MS);
        Ok(KvMachine {
            view: MembershipView::empty(self_node.clone()),
            ring: Ring::new(std::iter::empty(), settings.virtual_nodes),
            store,
            requests: Requests::default(),
            ae: AntiEntropy::default(),
            handoffs: Handoffs::default(),
            held_transmits: Vec::new(),
            held_events: Vec::new(),
            out: Outputs {
                timers,
                ..Outputs::new()
            },
            stats: KvStats::default(),
            settings,
            self_node,
        })
    }

    /// The settings.
    pub fn settings(&self) -> &KvSettings {
        &self.settings
    }

    /// This node.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// The counters.
    pub fn stats(&self) -> &KvStats {
        &self.stats
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The local replicas (for tools and tests).
    pub fn store(&mut self) -> &mut ReplicaStore<S> {
        &mut self.store
    }

    /// The local replicas, read-only.
    pub fn store_ref(&self) -> &ReplicaStore<S> {
        &self.store
    }

    /// Keys held here in groups this node does not own: what handoff still has to move.
    /// Zero while no member hosts data (there is nowhere to move them).
    pub fn misplaced_keys(&self) -> u64 {
        if self.ring.is_empty() {
            return 0;
        }
        self.store
            .groups()
            .filter(|((s, n), _, _)| !self.ring.owns(&self.self_node, *s, *n))
            .map(|(_, _, c)| c)
            .sum()
    }

    /// Segments this node owns and has not synchronised with every co-owner yet.
    pub fn pending_segments(&self) -> usize {
        self.ae.pending_segments()
    }

    /// The status snapshot of `GET /kv-status`.
    pub fn status(&self) -> KvStatus {
        KvStatus {
            n: self.settings.n,
            ownership: self.ring.ownership(self.settings.n).into_iter().collect(),
            keys: self.store.key_count(),
            misplaced_keys: self.misplaced_keys(),
            pending_segments: self.pending_segments(),
            handoffs_in_progress: self.handoffs.in_progress(),
            exchanges_in_progress: self.ae.in_progress(),
            requests_in_progress: self.requests.len(),
        }
    }

    // ---- plumbing ----

    /// Queues `message` for `to` (held until the next commit).
    fn send(&mut self, to: &UniqueAddress, message: KvMessage) {
        self.held_transmits.push(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message,
        });
    }

    /// Queues an event for the runtime (held until the next commit).
    fn emit(&mut self, event: KvEvent) {
        self.held_events.push(event);
    }

    /// True if `node` is a member this node talks to (in the view, not Removed).
    fn is_member(&self, node: &UniqueAddress) -> bool {
        self.view.is_member(node)
    }

    /// True if `node` is this node or a member no one sees unreachable.
    fn is_reachable(&self, node: &UniqueAddress) -> bool {
        *node == self.self_node || (self.is_member(node) && self.view.is_reachable(node))
    }

    /// Makes the writes of the inputs handled since the last commit durable, then releases
    /// the messages and answers held back meanwhile. If the storage fails, acknowledgements
    /// become refusals (the writes may be lost) and other outputs that depended on them are
    /// dropped.
    pub fn commit(&mut self, _now_ms: u64) {
        if self.held_transmits.is_empty() && self.held_events.is_empty() {
            // Nothing depends on the writes yet; they are committed with the next batch
            // (or now, to keep the window short).
            if let Err(e) = self.store.commit() {
                self.storage_failed(&e);
            }
            return;
        }
        match self.store.commit() {
            Ok(()) => {
                self.out.transmits.extend(self.held_transmits.drain(..));
                self.out.events.extend(self.held_events.drain(..));
            }
            Err(e) => {
                self.storage_failed(&e);
                let why = format!("storage failure: {e}");
                for mut t in std::mem::take(&mut self.held_transmits) {
                    match &mut t.message {
                        KvMessage::PutReply { result, .. }
                        | KvMessage::HandoffAck { result, .. }
                            if result.is_ok() =>
                        {
                            *result = Err(why.clone());
                        }
                        KvMessage::AeObjects { .. }
                        | KvMessage::AeWanted { .. }
                        | KvMessage::Handoff { .. }
                        | KvMessage::Repair { .. } => continue,
                        _ => {}
                    }
                    self.out.transmits.push_back(t);
                }
                for mut ev in std::mem::take(&mut self.held_events) {
                    if let KvEvent::WriteDone { result, .. } = &mut ev {
                        if result.is_ok() {
                            *result = Err(KvError::Storage(e.0.clone()));
                        }
                    }
                    self.out.events.push_back(ev);
                }
            }
        }
    }

    fn storage_failed(&mut self, e: &StorageError) {
        self.stats.storage_errors += 1;
        tracing::error!(error = %e, "key-value store: storage failure");
    }

    /// After each input: commit when the settings ask for it.
    fn after_input(&mut self, now_ms: u64) {
        if self.settings.auto_commit {
            self.commit(now_ms);
        }
    }

    /// The members that host data: Up, with the role if one is set.
    fn hosting_members(&self, view: &MembershipView) -> Vec<UniqueAddress> {
        view.members
            .values()
            .filter(|m| m.status == MemberStatus::Up)
            .filter(|m| self.settings.role.as_deref().is_none_or(|r| m.has_role(r)))
            .map(|m| m.unique_address.clone())
            .collect()
    }

    // ---- client requests ----

    /// Writes `value` to `key` — `context` is the clock of the client's last read of it
    /// (`None`: a blind write, kept next to any existing version as a sibling). Answered by
    /// [`KvEvent::WriteDone`] with `request`.
    pub fn put(
        &mut self,
        now_ms: u64,
        request: u64,
        key: String,
        value: Vec<u8>,
        context: Option<crate::ddata::VersionVector>,
        options: WriteOptions,
    ) {
        self.coordinate_write(now_ms, request, key, Some(value), context, options);
        self.after_input(now_ms);
    }

    /// Deletes `key` (writes a tombstone superseding what `context` has seen; without a
    /// context the key is read first, with the default R, and its merged clock is used).
    /// Answered by [`KvEvent::WriteDone`] ([`KvError::NotFound`] if there was nothing).
    pub fn delete(
        &mut self,
        now_ms: u64,
        request: u64,
        key: String,
        context: Option<crate::ddata::VersionVector>,
        options: WriteOptions,
    ) {
        match context {
            Some(c) => self.coordinate_write(now_ms, request, key, None, Some(c), options),
            None => self.coordinate_delete_after_read(now_ms, request, key, options),
        }
        self.after_input(now_ms);
    }

    /// Reads `key`; answered by [`KvEvent::ReadDone`] with `request`.
    pub fn get(&mut self, now_ms: u64, request: u64, key: String, options: ReadOptions) {
        self.coordinate_read(now_ms, request, key, options);
        self.after_input(now_ms);
    }

    // ---- membership ----

    fn on_membership(&mut self, now_ms: u64, view: &MembershipView) {
        self.view = view.clone();
        let hosting = self.hosting_members(view);
        if hosting.as_slice() != self.ring.members() {
            let old = std::mem::replace(
                &mut self.ring,
                Ring::new(hosting, self.settings.virtual_nodes),
            );
            self.ae
                .ring_changed(&old, &self.ring, &self.self_node, self.settings.n);
            // New owners pull at once.
            self.out.timers.set(KvTimer::AntiEntropy, now_ms);
            self.out.timers.set(KvTimer::Handoff, now_ms);
        }
        let members: BTreeSet<UniqueAddress> = self
            .view
            .members
            .iter()
            .filter(|(_, m)| m.status != MemberStatus::Removed)
            .map(|(u, _)| u.clone())
            .collect();
        self.ae.forget_non_members(&members);
    }
}

impl<S: KvStorage> ProtocolMachine for KvMachine<S> {
    type Message = KvMessage;
    type Event = KvEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::KEY_VALUE
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: KvMessage) {
        // Only members take part; the membership check runs before anything is read.
        if !self.is_member(from) {
            self.stats.invalid_messages += 1;
            return;
        }
        match message {
            KvMessage::PutReply { request, result } => {
                self.write_replied(now_ms, from, request, result)
            }
            KvMessage::ForwardReply { request, result } => {
                self.forward_replied(from, request, result)
            }
            KvMessage::GetReply {
                request,
                result,
                complete,
            } => self.read_replied(now_ms, from, request, result, complete),
            KvMessage::AeGroups { session, groups } => {
                self.ae_groups(now_ms, from, session, groups)
            }
            KvMessage::AeBuckets {
                session,
                groups,
                truncated,
            } => self.ae_buckets(now_ms, from, session, groups, truncated),
            KvMessage::AeKeys { session, buckets } => self.ae_keys(now_ms, from, session, buckets),
            KvMessage::AeObjects {
                session,
                objects,
                want,
            } => self.ae_objects(now_ms, from, session, objects, want),
            KvMessage::AeWanted { session, objects } => {
                self.ae_wanted(now_ms, from, session, objects)
            }
            KvMessage::HandoffAck { session, result } => {
                self.handoff_acked(now_ms, from, session, result)
            }
            other => self.replica_message(now_ms, from, other),
        }
        self.after_input(now_ms);
    }

    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, _change: MembershipChange) {
        self.on_membership(now_ms, view);
        self.after_input(now_ms);
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        for t in self.out.timers.expired(now_ms) {
            match t {
                KvTimer::Tick => {
                    self.expire_requests(now_ms);
                    self.run_due_reaps(now_ms);
                    self.out.timers.set(KvTimer::Tick, now_ms + TICK_MS);
                }
                KvTimer::AntiEntropy => {
                    let next = self.anti_entropy_tick(now_ms);
                    self.out.timers.set(KvTimer::AntiEntropy, next);
                }
                KvTimer::Handoff => {
                    self.handoff_tick(now_ms);
                    self.out.timers.set(KvTimer::Handoff, now_ms + HANDOFF_MS);
                }
            }
        }
        self.after_input(now_ms);
    }

    fn poll_transmit(&mut self) -> Option<Transmit<KvMessage>> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<KvEvent> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.out.poll_timeout()
    }
}
