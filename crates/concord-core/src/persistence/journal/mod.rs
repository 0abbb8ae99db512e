//! The built-in replicated journal: event logs and durable state replicated on `n` nodes
//! of the key-value store's ring, with **Multi-Paxos per log** so that two writers can
//! never interleave one history (Lamport, "Paxos Made Simple", 2001; the design in
//! docs/PERSISTENCE.md, "The built-in replicated journal").
//!
//! [`JournalMachine`] is one node's sans-IO machine. It is at once
//!
//! - a **proposer** for the logs of entities running on this node. A recovery is phase 1:
//!   it prepares a ballot above any it saw at a majority of the log's replicas, which
//!   fences every older writer; the promises carry the entries (the replay) and the
//!   uncertain tail after the committed prefix, which it proposes again at its ballot so a
//!   crashed writer's half-done write is either completed or superseded, never half
//!   visible. Then each append is phase 2 only: one round trip to a majority. A writer
//!   proposes a slot only after the one before it is chosen; each accept tells the
//!   replicas that every slot before it is chosen (the committed prefix). A refusal
//!   (a higher promise) is [`JournalError::Conflict`]: another writer took over.
//! - an **acceptor** ([`acceptor`]) for the logs whose ring segment it replicates, its
//!   records in storage made durable ([`JournalMachine::commit`]) before any answer
//!   leaves — many logs' accepts share one commit;
//! - a party to **handoff** after ring changes ([`handoff`]);
//! - an index of the chosen writes of event logs by entity type, read by
//!   [`JournalMachine::events_by_type`] ([`stream`]).
//!
//! Snapshots are kept per log by each replica (the newest wins) and read from a majority.
//! A durable-state log is the same log with one slot per revision and only the newest
//! entry kept.

pub mod acceptor;
mod ask;
pub mod chain;
pub mod deletion;
pub mod entry;
pub mod give_up;
pub mod handoff;
mod handoff_records;
mod held;
pub mod held_index;
pub mod holding;
pub mod last_ring;
pub mod learn;
pub mod live_holdings;
pub mod message;
mod misplaced;
pub mod output;
pub mod owed;
mod proposer;
pub mod recent_entries;
mod request;
pub mod segment_writes;
mod serve;
mod settings;
mod slot_runs;
pub mod standing;
pub mod state_cache;
mod stats;
pub mod stream;
mod stream_query;
#[cfg(test)]
mod test_history;
#[cfg(test)]
mod test_storage;
pub mod unable;
pub mod wait;

use std::collections::{BTreeSet, HashMap};

use crate::address::UniqueAddress;
use crate::kv::ring::Ring;
use crate::kv::storage::{KvStorage, StorageError};
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};

pub use acceptor::segment_of_log;
pub use chain::Answer;
pub use entry::{Ballot, Entry, StoredSnapshot};
pub use give_up::GivenUp;
pub use message::JournalMessage;
pub use output::{JournalError, JournalEvent, JournalOutput};
use request::{Op, Request};
pub use settings::JournalSettings;
pub use stats::JournalStats;
pub use unable::UnableReason;

/// Bytes of events one write (one atomic write, or one durable state) may carry, at most:
/// with a snapshot of at most [`MAX_SNAPSHOT_BYTES`] and an uncertain tail of one write,
/// a promise's one-write page still fits in one frame of the large lane (2 MiB by
/// default). Larger writes are refused ([`JournalError::Rejected`]).
pub const MAX_WRITE_BYTES: usize = 512 << 10;
/// Bytes of one snapshot, at most (see [`MAX_WRITE_BYTES`]); a larger one is refused
/// ([`JournalError::Rejected`]) and recovery replays the events instead.
pub const MAX_SNAPSHOT_BYTES: usize = 768 << 10;

/// A digest of a log's replica list (in preference-list order): 64-bit FNV-1a over each
/// member's identity, never 0 (0 on the wire means "not sent").
pub fn replicas_digest<'a>(replicas: impl IntoIterator<Item = &'a UniqueAddress>) -> u64 {
    let mut h = crate::address::Fnv1a::new();
    for r in replicas {
        h.write_unique_address(r);
    }
    h.finish().max(1)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Tick,
    /// The earliest held request is due ([`JournalMachine::retry_held`]).
    Held,
}

const TICK_MS: u64 = 100;
/// Period of the look for segments held here that this node does not replicate, ms.
const MISPLACED_MS: u64 = 5_000;
/// A round lost to replicas that could not answer yet is sent again after
/// [`RETRY_FIRST_MS`], doubled at each hold up to this long, ms (within the request's
/// deadline): a view of the ring that lags by a gossip round costs a few ms, a handoff of
/// seconds a round every 100 ms.
const RETRY_MS: u64 = 100;
/// The first wait of a held round, ms.
const RETRY_FIRST_MS: u64 = 10;
/// Phase-1 attempts before a recovery gives up (each above the highest refusal).
const MAX_PREPARES: u32 = 5;
/// Longest log name accepted from the network, bytes.
const MAX_LOG_BYTES: usize = 1024;

/// A log this node writes.
#[derive(Clone, Copy, Debug)]
struct Writer {
    ballot: Ballot,
    next_seq: u64,
}

/// The journal machine of one node; see the module docs.
pub struct JournalMachine<S: KvStorage> {
    settings: JournalSettings,
    self_node: UniqueAddress,
    ring: Ring,
    storage: state_cache::StateCache<S>,
    requests: HashMap<u64, Request>,
    /// Requests waiting to be sent again, with the time they are due, ms.
    held_requests: Vec<(u64, Request)>,
    streams: HashMap<u64, stream_query::StreamRequest>,
    learns: learn::Learns,
    next_wire: u64,
    writers: HashMap<String, Writer>,
    last_round: u64,
    handoffs: handoff::Handoffs,
    held_transmits: Vec<Transmit<JournalMessage>>,
    held_events: Vec<JournalEvent>,
    /// Commits so far (a request notes the turn its own replica answered in).
    turns: u64,
    out: Outputs<JournalMessage, JournalEvent, Timer>,
    stats: JournalStats,
}

impl<S: KvStorage> JournalMachine<S> {
    /// The machine of `self_node` over `storage`, timers from `now_ms`.
    pub fn new(
        settings: JournalSettings,
        self_node: UniqueAddress,
        mut storage: S,
        now_ms: u64,
    ) -> Self {
        let mut out = Outputs::new();
        out.timers.set(Timer::Tick, now_ms + TICK_MS);
        let mut stats = JournalStats::default();
        // Unreadable marks claim nothing: this node then counts for no handoff until it
        // completes one.
        let marks = standing::Marks::load(&mut storage).unwrap_or_else(|_| {
            stats.storage_errors += 1;
            standing::Marks::default()
        });
        // An unreadable last ring says nothing: the first ring's guess stands alone.
        let last_ring = last_ring::load(&mut storage)
            .unwrap_or_else(|_| {
                stats.storage_errors += 1;
                None
            })
            .map(|members| last_ring::ring_of(members, settings.virtual_nodes));
        // Unreadable needs are forgotten (counted as a storage error): this node's
        // incomplete copies then carry none, and a wait it was in before it stopped is not
        // taken up again — its marks still say incomplete, so its copies count only as
        // incomplete ones (as before the needs were kept).
        let owed = owed::load(&mut storage).unwrap_or_else(|_| {
            stats.storage_errors += 1;
            std::collections::BTreeMap::new()
        });
        // Unreadable addresses given up are forgotten: waits count them again until the
        // operator gives them up again.
        let given_up = give_up::load(&mut storage).unwrap_or_else(|_| {
            stats.storage_errors += 1;
            BTreeSet::new()
        });
        JournalMachine {
            ring: Ring::new(std::iter::empty(), settings.virtual_nodes),
            settings,
            self_node,
            storage: state_cache::StateCache::new(storage, state_cache::DEFAULT_CAPACITY),
            requests: HashMap::new(),
            held_requests: Vec::new(),
            streams: HashMap::new(),
            learns: learn::Learns::default(),
            next_wire: 1,
            writers: HashMap::new(),
            last_round: 0,
            handoffs: handoff::Handoffs {
                marks,
                last_ring,
                owed_on_disk: owed.clone(),
                owed,
                given_up,
                ..handoff::Handoffs::default()
            },
            held_transmits: Vec::new(),
            held_events: Vec::new(),
            turns: 0,
            out,
            stats,
        }
    }

    /// Counters.
    pub fn stats(&self) -> &JournalStats {
        &self.stats
    }

    /// Reads of logs' state records answered from memory ([`state_cache::StateCache`]).
    pub fn state_cache_hits(&self) -> u64 {
        self.storage.hits()
    }

    /// Reads of entries answered from the entries written lately
    /// ([`recent_entries::RecentEntries`]).
    pub fn entry_cache_hits(&self) -> u64 {
        self.storage.entry_hits()
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Requests in flight (held ones included).
    pub fn in_flight(&self) -> usize {
        self.requests.len() + self.held_requests.len() + self.streams.len()
    }

    /// Segments this node does not answer about until their handoff arrives.
    pub fn pending_segments(&self) -> usize {
        self.handoffs.pending.len()
    }

    /// What this node waits for, per segment (for tools and tests).
    pub fn pending(&self) -> &std::collections::BTreeMap<u16, handoff::Pending> {
        &self.handoffs.pending
    }

    /// Where this node stands for `segment` ([`standing`]), as its handoff pages say.
    pub fn standing(&self, segment: u16) -> standing::Standing {
        self.handoffs.standing(segment)
    }

    /// Segments this node replicates in its view of the ring whose copy here is not
    /// complete (see [`standing`]: a new replica still waiting for its handoff, or one that
    /// has not caught up); 0 once every handoff into this node ended, and possibly before
    /// ([`Self::pending_segments`] counts the waits: a restarted node's disk may stand
    /// complete while it waits). Looks at all [`crate::kv::ring::SEGMENTS`] (1,024).
    pub fn incomplete_segments(&self) -> usize {
        (0..crate::kv::ring::SEGMENTS)
            .filter(|&s| {
                self.handoffs.standing(s) == standing::Standing::Incomplete
                    && self
                        .ring
                        .preference_list(s, self.settings.n)
                        .contains(&&self.self_node)
            })
            .count()
    }

    /// Learn messages waiting for acknowledgements.
    pub fn pending_learns(&self) -> usize {
        self.learns.pending()
    }

    /// Segments whose holdings are kept in memory ([`live_holdings::LiveHoldings`]; of
    /// [`crate::kv::ring::SEGMENTS`]).
    pub fn holdings_kept(&self) -> usize {
        self.storage.holdings_kept()
    }

    /// Segment handoffs this node still sends.
    pub fn outgoing_handoffs(&self) -> usize {
        self.handoffs.outgoing.len()
    }

    /// True once this node replicates no segment in its view of the ring (it left it, or
    /// never was in it), has looked for the segments it holds since the last ring change,
    /// and has handed every copy it sends over: what a node that leaves the cluster waits
    /// for (bounded by coordinated shutdown's `cluster-exiting` phase) before it goes, so
    /// that replicas left in a shrunk list get its copy.
    pub fn handed_over(&self) -> bool {
        !self.ring.members().contains(&self.self_node)
            && self.handoffs.outgoing.is_empty()
            && (self.ring.is_empty() || self.handoffs.next_misplaced_ms > 0)
    }

    /// The replicas of `log`.
    pub fn replicas(&self, log: &str) -> Vec<UniqueAddress> {
        self.ring
            .preference_list(segment_of_log(log), self.settings.n)
            .into_iter()
            .cloned()
            .collect()
    }

    // ---- requests ----

    /// Makes this node the writer of `log` and reads its writes from `from` (at most
    /// `max_events` events): answered [`JournalOutput::Recovered`].
    pub fn recover(&mut self, now_ms: u64, request: u64, log: String, from: u64, max_events: u32) {
        let op = Op::Recover {
            from,
            max_events,
            snapshot: false,
        };
        self.start(now_ms, request, log, op);
        self.after_input();
    }

    /// [`Self::recover`] from the newest snapshot, in one round: the promises carry each
    /// replica's snapshot, and the page starts after the newest of them (or at 1 if there
    /// is none); answered [`JournalOutput::Recovered`] with that snapshot.
    pub fn recover_from_snapshot(
        &mut self,
        now_ms: u64,
        request: u64,
        log: String,
        max_events: u32,
    ) {
        let op = Op::Recover {
            from: 1,
            max_events,
            snapshot: true,
        };
        self.start(now_ms, request, log, op);
        self.after_input();
    }

    /// Appends `events` from `first_seq` to `log`: answered [`JournalOutput::Appended`], or
    /// [`JournalError::Conflict`] if `first_seq` is not the highest + 1 or another writer
    /// took over. `compact` keeps only this write (durable state).
    pub fn append(&mut self, now_ms: u64, request: u64, log: String, write: Entry, compact: bool) {
        if !write.is_valid() {
            self.finish(
                request,
                Err(JournalError::Conflict(format!(
                    "a write of {} events from {} is not a valid write",
                    write.events.len(),
                    write.first_seq
                ))),
            );
        } else if write.payload_bytes() > MAX_WRITE_BYTES {
            self.finish(
                request,
                Err(JournalError::Rejected(format!(
                    "a write of {} bytes of events (the replicated journal takes at most {MAX_WRITE_BYTES})",
                    write.payload_bytes()
                ))),
            );
        } else {
            self.start(now_ms, request, log, Op::Append { write, compact });
        }
        self.after_input();
    }

    /// Reads the writes of `log` from `from` up to `to` (at most `max_events` events):
    /// answered [`JournalOutput::Read`].
    pub fn read(
        &mut self,
        now_ms: u64,
        request: u64,
        log: String,
        from: u64,
        to: u64,
        max_events: u32,
    ) {
        self.start(
            now_ms,
            request,
            log,
            Op::Read {
                from,
                to,
                max_events,
            },
        );
        self.after_input();
    }

    /// Saves a snapshot of `log` on a majority: answered [`JournalOutput::Done`].
    pub fn save_snapshot(
        &mut self,
        now_ms: u64,
        request: u64,
        log: String,
        snapshot: StoredSnapshot,
    ) {
        if snapshot.payload.len() > MAX_SNAPSHOT_BYTES {
            self.finish(
                request,
                Err(JournalError::Rejected(format!(
                    "a snapshot of {} bytes (the replicated journal takes at most {MAX_SNAPSHOT_BYTES})",
                    snapshot.payload.len()
                ))),
            );
        } else {
            self.start(now_ms, request, log, Op::SaveSnapshot(snapshot));
        }
        self.after_input();
    }

    /// Loads the newest snapshot of `log`: answered [`JournalOutput::Snapshot`].
    pub fn load_snapshot(&mut self, now_ms: u64, request: u64, log: String) {
        self.start(now_ms, request, log, Op::LoadSnapshot);
        self.after_input();
    }

    /// Deletes the committed writes of `log` ending at or before `to`: answered
    /// [`JournalOutput::Done`].
    pub fn delete_to(&mut self, now_ms: u64, request: u64, log: String, to: u64) {
        self.start(now_ms, request, log, Op::Delete(to));
        self.after_input();
    }

    /// Makes the storage's changes durable and releases the answers held until then (an
    /// acceptor's replies, handoff pages and acknowledgements: what says "on disk"; a
    /// proposer's requests and learns leave at once, so the remote replicas' disks work
    /// while this one's does); if
    /// the commit fails, every answer of the turn is withdrawn and every request in flight
    /// fails (their state here is not on disk).
    pub fn commit(&mut self) {
        self.turns = self.turns.wrapping_add(1);
        // The turn's learns leave (they state what is chosen, whatever this commit does).
        self.flush_learns();
        let owed_written = self.write_handoff_records();
        match self.storage.commit() {
            Ok(()) => {
                if let Some(written) = owed_written {
                    self.handoffs.needs_committed(written);
                }
                self.out.transmits.extend(self.held_transmits.drain(..));
                self.out.events.extend(self.held_events.drain(..));
            }
            Err(StorageError(e)) => {
                self.stats.storage_errors += 1;
                // The records written in the failed transaction are written again.
                self.handoffs.rewrite_records();
                self.held_transmits.clear();
                self.writers.clear();
                let failed: Vec<u64> = self
                    .held_events
                    .drain(..)
                    .map(|e| e.request)
                    .chain(self.requests.drain().map(|(_, r)| r.caller))
                    .chain(self.held_requests.drain(..).map(|(_, r)| r.caller))
                    .chain(self.streams.drain().map(|(_, r)| r.caller()))
                    .collect();
                for request in failed {
                    self.out.events.push_back(JournalEvent {
                        request,
                        result: Err(JournalError::Unavailable(format!("journal storage: {e}"))),
                    });
                }
            }
        }
    }

    fn after_input(&mut self) {
        if self.settings.auto_commit {
            self.commit();
        }
    }

    fn finish(&mut self, request: u64, result: Result<JournalOutput, JournalError>) {
        self.held_events.push(JournalEvent { request, result });
    }

    /// Answers a won round of request `caller` (whose own replica last answered in turn
    /// `local_turn`): at once if every answer it counted is on its replica's
    /// disk — the other replicas answer only after their commit, and this node's own
    /// answer is durable once the turn it was given in has been committed — otherwise at
    /// this turn's commit. So an append is answered without waiting for the commit of the
    /// turn its majority completed in (that commit holds this node's learn of the write,
    /// which states nothing a recovery cannot find again).
    fn finish_round(
        &mut self,
        caller: u64,
        local_turn: Option<u64>,
        result: Result<JournalOutput, JournalError>,
    ) {
        let event = JournalEvent {
            request: caller,
            result,
        };
        if local_turn == Some(self.turns) {
            self.held_events.push(event);
        } else {
            self.stats.answered_before_commit += 1;
            self.out.events.push_back(event);
        }
    }
}

impl<S: KvStorage> ProtocolMachine for JournalMachine<S> {
    type Message = JournalMessage;
    type Event = JournalEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::JOURNAL
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: JournalMessage) {
        if let Some(wire) = message.reply_to() {
            if self.is_stream(wire) {
                self.on_stream_reply(from, message);
            } else {
                self.on_reply(now_ms, from, message);
            }
        } else if let Some(answer) = self.answer(now_ms, from, message) {
            self.held_transmits.push(Transmit {
                to: from.address.clone(),
                to_uid: Some(from.uid),
                lane: Lane::Ordinary,
                message: answer,
            });
        }
        self.after_input();
    }

    fn handle_membership(
        &mut self,
        _now_ms: u64,
        view: &MembershipView,
        _change: MembershipChange,
    ) {
        let hosting: BTreeSet<UniqueAddress> = self.hosting_members(view).into_iter().collect();
        let current: BTreeSet<UniqueAddress> = self.ring.members().iter().cloned().collect();
        if hosting != current {
            let new = Ring::new(hosting, self.settings.virtual_nodes);
            self.handoffs.ring_changed(
                &self.ring,
                &new,
                &self.self_node,
                self.settings.n,
                self.settings.virtual_nodes,
            );
            self.ring = new;
            self.handoffs.ring_unsaved = true;
        }
        self.after_input();
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        for t in self.out.timers.expired(now_ms) {
            match t {
                Timer::Tick => {
                    self.expire(now_ms);
                    self.retry_held(now_ms);
                    self.expire_streams(now_ms);
                    self.learn_tick(now_ms);
                    self.handoff_tick(now_ms);
                    self.out.timers.set(Timer::Tick, now_ms + TICK_MS);
                }
                Timer::Held => self.retry_held(now_ms),
            }
        }
        self.after_input();
    }

    fn poll_transmit(&mut self) -> Option<Transmit<JournalMessage>> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<JournalEvent> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.out.poll_timeout()
    }
}

#[cfg(test)]
mod tests;
