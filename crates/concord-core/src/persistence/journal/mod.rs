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
//! - a party to **handoff** after ring changes ([`handoff`]).
//!
//! Snapshots are kept per log by each replica (the newest wins) and read from a majority.
//! A durable-state log is the same log with one slot per revision and only the newest
//! entry kept.

pub mod acceptor;
pub mod chain;
pub mod entry;
pub mod handoff;
pub mod message;
mod request;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::address::UniqueAddress;
use crate::kv::ring::Ring;
use crate::kv::storage::{KvStorage, StorageError};
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};

pub use acceptor::segment_of_log;
pub use chain::Answer;
pub use entry::{Ballot, Entry, StoredSnapshot};
pub use message::JournalMessage;
use request::{Op, Phase, Request};

/// Settings of the replicated journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalSettings {
    /// Replicas of each log (Dynamo's N; 3).
    pub n: u8,
    /// Tokens per member on the ring (64, as the key-value store).
    pub virtual_nodes: u32,
    /// A request without a majority's answer by then fails as unavailable, ms (5000).
    pub request_timeout_ms: u64,
    /// Only members with this role host logs (`None`: every Up member).
    pub role: Option<String>,
    /// Logs this node remembers being the writer of (a forgotten one prepares again on
    /// its next append), count (100,000).
    pub max_writers: usize,
    /// Commit after every input (the simulator and tests; the runtime commits once per
    /// turn).
    pub auto_commit: bool,
}

impl Default for JournalSettings {
    fn default() -> Self {
        JournalSettings {
            n: 3,
            virtual_nodes: 64,
            request_timeout_ms: 5_000,
            role: None,
            max_writers: 100_000,
            auto_commit: false,
        }
    }
}

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// Another writer holds the log, or the write does not follow its highest number.
    #[error("{0}")]
    Conflict(String),
    /// No majority answered in time; a write's outcome is unknown.
    #[error("{0}")]
    Unavailable(String),
}

/// A request's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalOutput {
    /// This node is the log's writer: the page asked for and the highest number.
    Recovered {
        /// Writes from the page's start, in order.
        page: Vec<Entry>,
        /// The log's highest sequence number (0: empty).
        highest: u64,
    },
    /// Writes read, in order.
    Read(Vec<Entry>),
    /// The write is chosen (on a majority's disks).
    Appended,
    /// The newest snapshot a majority holds.
    Snapshot(Option<StoredSnapshot>),
    /// Saved or deleted on a majority.
    Done,
}

/// The answer to a caller's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalEvent {
    /// The caller's request id.
    pub request: u64,
    /// The result.
    pub result: Result<JournalOutput, JournalError>,
}

/// Counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Writes chosen through this node.
    pub appends: u64,
    /// Recoveries (phase 1) completed.
    pub recoveries: u64,
    /// Refusals: another writer held the log.
    pub conflicts: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Commits that failed.
    pub storage_errors: u64,
    /// Messages refused as malformed.
    pub rejected: u64,
    /// Handoff pages merged.
    pub handoff_pages: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Tick,
}

const TICK_MS: u64 = 100;
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
    storage: S,
    requests: HashMap<u64, Request>,
    next_wire: u64,
    writers: HashMap<String, Writer>,
    last_round: u64,
    handoffs: handoff::Handoffs,
    held_transmits: Vec<Transmit<JournalMessage>>,
    held_events: Vec<JournalEvent>,
    out: Outputs<JournalMessage, JournalEvent, Timer>,
    stats: JournalStats,
}

impl<S: KvStorage> JournalMachine<S> {
    /// The machine of `self_node` over `storage`, timers from `now_ms`.
    pub fn new(
        settings: JournalSettings,
        self_node: UniqueAddress,
        storage: S,
        now_ms: u64,
    ) -> Self {
        let mut out = Outputs::new();
        out.timers.set(Timer::Tick, now_ms + TICK_MS);
        JournalMachine {
            ring: Ring::new(std::iter::empty(), settings.virtual_nodes),
            settings,
            self_node,
            storage,
            requests: HashMap::new(),
            next_wire: 1,
            writers: HashMap::new(),
            last_round: 0,
            handoffs: handoff::Handoffs::default(),
            held_transmits: Vec::new(),
            held_events: Vec::new(),
            out,
            stats: JournalStats::default(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> &JournalStats {
        &self.stats
    }

    /// The storage (for tools and tests).
    pub fn storage(&mut self) -> &mut S {
        &mut self.storage
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.requests.len()
    }

    /// Segments this node does not answer about until their handoff arrives.
    pub fn pending_segments(&self) -> usize {
        self.handoffs.pending.len()
    }

    /// Segment handoffs this node still sends.
    pub fn outgoing_handoffs(&self) -> usize {
        self.handoffs.outgoing.len()
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
        self.start(now_ms, request, log, Op::Recover { from, max_events });
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
        self.start(now_ms, request, log, Op::SaveSnapshot(snapshot));
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

    /// Makes the storage's changes durable and releases the answers held until then; if
    /// the commit fails, every answer of the turn is withdrawn and every request in flight
    /// fails (their state here is not on disk).
    pub fn commit(&mut self) {
        match self.storage.commit() {
            Ok(()) => {
                self.out.transmits.extend(self.held_transmits.drain(..));
                self.out.events.extend(self.held_events.drain(..));
            }
            Err(StorageError(e)) => {
                self.stats.storage_errors += 1;
                self.held_transmits.clear();
                self.writers.clear();
                let failed: Vec<u64> = self
                    .held_events
                    .drain(..)
                    .map(|e| e.request)
                    .chain(self.requests.drain().map(|(_, r)| r.caller))
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

    fn next_ballot(&mut self, now_ms: u64, above: Ballot) -> Ballot {
        let round = now_ms
            .max(self.last_round.saturating_add(1))
            .max(above.round.saturating_add(1));
        self.last_round = round;
        Ballot {
            round,
            node: self.self_node.uid,
        }
    }

    fn start(&mut self, now_ms: u64, caller: u64, log: String, op: Op) {
        let replicas = self.replicas(&log);
        if replicas.is_empty() {
            self.finish(
                caller,
                Err(JournalError::Unavailable(
                    "no member hosts the journal yet".into(),
                )),
            );
            return;
        }
        let mut req = Request {
            caller,
            log,
            op,
            phase: Phase::Single,
            replicas,
            answers: Default::default(),
            snapshots: Default::default(),
            refused: Default::default(),
            deadline_ms: now_ms.saturating_add(self.settings.request_timeout_ms),
        };
        match req.op.clone() {
            Op::Append { write, compact } => match self.writers.get(&req.log).copied() {
                Some(w) if w.next_seq == write.first_seq => {
                    let highest = write.last_seq();
                    req.phase = Phase::Accepting {
                        ballot: w.ballot,
                        highest,
                        page: Vec::new(),
                    };
                    let msg = |request, log: &str| JournalMessage::Accept {
                        request,
                        log: log.to_owned(),
                        ballot: w.ballot,
                        committed: write.first_seq - 1,
                        compact,
                        writes: vec![write.clone()],
                    };
                    self.send_round(now_ms, req, msg);
                }
                Some(w) => {
                    self.stats.conflicts += 1;
                    self.finish(
                        caller,
                        Err(conflict_next(&req.log, w.next_seq, write.first_seq)),
                    );
                }
                None => self.prepare(now_ms, req, Ballot::ZERO, 1),
            },
            Op::Recover { .. } => self.prepare(now_ms, req, Ballot::ZERO, 1),
            Op::Read {
                from, max_events, ..
            } => self.send_round(now_ms, req, |request, log| JournalMessage::Read {
                request,
                log: log.to_owned(),
                from,
                max_events,
            }),
            Op::SaveSnapshot(snapshot) => {
                self.send_round(now_ms, req, |request, log| JournalMessage::SaveSnapshot {
                    request,
                    log: log.to_owned(),
                    snapshot: snapshot.clone(),
                })
            }
            Op::LoadSnapshot => {
                self.send_round(now_ms, req, |request, log| JournalMessage::LoadSnapshot {
                    request,
                    log: log.to_owned(),
                })
            }
            Op::Delete(to) => self.send_round(now_ms, req, |request, log| JournalMessage::Delete {
                request,
                log: log.to_owned(),
                to,
            }),
        }
    }

    fn prepare(&mut self, now_ms: u64, mut req: Request, above: Ballot, attempt: u32) {
        let ballot = self.next_ballot(now_ms, above);
        req.phase = Phase::Preparing { ballot, attempt };
        let (from, max_events) = match &req.op {
            Op::Recover { from, max_events } => (*from, *max_events),
            Op::Append { write, .. } => (write.first_seq, 1),
            _ => (1, 1),
        };
        self.send_round(now_ms, req, |request, log| JournalMessage::Prepare {
            request,
            log: log.to_owned(),
            ballot,
            from,
            max_events,
        });
    }

    /// Sends one round of `req` (a fresh wire id: late answers of an earlier round are
    /// ignored) to every replica; this node's own answer is taken at once.
    fn send_round(
        &mut self,
        now_ms: u64,
        mut req: Request,
        message: impl Fn(u64, &str) -> JournalMessage,
    ) {
        req.next_round();
        let wire = self.next_wire;
        self.next_wire += 1;
        let replicas = req.replicas.clone();
        let log = req.log.clone();
        self.requests.insert(wire, req);
        for r in replicas {
            let msg = message(wire, &log);
            if r == self.self_node {
                if let Some(answer) = self.answer(&r, msg) {
                    let me = self.self_node.clone();
                    self.on_reply(now_ms, &me, answer);
                }
            } else {
                let lane = if matches!(&msg, JournalMessage::Accept { writes, .. } if writes.iter().map(Entry::payload_bytes).sum::<usize>() > 256 * 1024)
                {
                    Lane::Large
                } else {
                    Lane::Ordinary
                };
                self.held_transmits.push(Transmit {
                    to: r.address.clone(),
                    to_uid: Some(r.uid),
                    lane,
                    message: msg,
                });
            }
        }
    }

    // ---- answers to this node's requests ----

    fn on_reply(&mut self, now_ms: u64, from: &UniqueAddress, msg: JournalMessage) {
        let Some(wire) = msg.reply_to() else { return };
        let Some(mut req) = self.requests.remove(&wire) else {
            return;
        };
        if !req.replicas.contains(from) {
            self.requests.insert(wire, req);
            return;
        }
        match msg {
            JournalMessage::Promise {
                committed,
                page,
                covered_to,
                tail,
                ..
            } => {
                req.answers.insert(
                    from.clone(),
                    Answer {
                        page,
                        covered_to,
                        committed,
                        tail,
                        promise: true,
                    },
                );
            }
            JournalMessage::ReadReply {
                page, covered_to, ..
            } => {
                req.answers.insert(
                    from.clone(),
                    Answer {
                        page,
                        covered_to,
                        ..Answer::default()
                    },
                );
            }
            JournalMessage::Accepted { .. } | JournalMessage::Done { .. } => {
                req.answers.insert(from.clone(), Answer::default());
            }
            JournalMessage::SnapshotReply { snapshot, .. } => {
                req.snapshots.insert(from.clone(), snapshot);
            }
            JournalMessage::Nack { promised, .. } => {
                req.refused.insert(from.clone(), Some(promised));
            }
            _ => {
                req.refused.insert(from.clone(), None);
            }
        }
        if req.answered() >= req.quorum() {
            self.round_won(now_ms, req);
        } else if req.lost() {
            self.round_lost(now_ms, req);
        } else {
            self.requests.insert(wire, req);
        }
    }

    fn round_won(&mut self, now_ms: u64, req: Request) {
        match (&req.phase, &req.op) {
            (Phase::Preparing { ballot, .. }, _) => {
                let ballot = *ballot;
                self.promised(now_ms, req, ballot);
            }
            (
                Phase::Accepting {
                    ballot,
                    highest,
                    page,
                    ..
                },
                op,
            ) => {
                self.remember_writer(&req.log, *ballot, highest.saturating_add(1));
                let out = match op {
                    Op::Recover { .. } => {
                        self.stats.recoveries += 1;
                        JournalOutput::Recovered {
                            page: page.clone(),
                            highest: *highest,
                        }
                    }
                    _ => {
                        self.stats.appends += 1;
                        JournalOutput::Appended
                    }
                };
                self.finish(req.caller, Ok(out));
            }
            (
                Phase::Single,
                Op::Read {
                    from,
                    to,
                    max_events,
                },
            ) => {
                let answers: Vec<Answer> = req.answers.into_values().collect();
                let until = to.saturating_add(1);
                let (page, _) = chain::walk(&answers, *from, *from, until, *max_events as usize);
                self.finish(req.caller, Ok(JournalOutput::Read(page)));
            }
            (Phase::Single, Op::LoadSnapshot) => {
                let best = req
                    .snapshots
                    .into_values()
                    .flatten()
                    .max_by_key(|s| s.seq_nr);
                self.finish(req.caller, Ok(JournalOutput::Snapshot(best)));
            }
            (Phase::Single, _) => self.finish(req.caller, Ok(JournalOutput::Done)),
        }
    }

    /// A majority promised `ballot`: propose the uncertain tail again (and an append's
    /// write after it).
    fn promised(&mut self, now_ms: u64, mut req: Request, ballot: Ballot) {
        let answers: Vec<Answer> = std::mem::take(&mut req.answers).into_values().collect();
        let rec = chain::recovered(&answers);
        let (writes, highest, page, compact) = match &req.op {
            Op::Recover { from, max_events } => {
                let page = chain::recovery_page(&answers, &rec, *from, *max_events as usize);
                (rec.tail.clone(), rec.highest, page, false)
            }
            Op::Append { write, compact } => {
                if rec.highest.checked_add(1) != Some(write.first_seq) {
                    self.remember_writer(&req.log, ballot, rec.highest.saturating_add(1));
                    self.stats.conflicts += 1;
                    self.finish(
                        req.caller,
                        Err(conflict_next(
                            &req.log,
                            rec.highest.saturating_add(1),
                            write.first_seq,
                        )),
                    );
                    return;
                }
                let mut w = rec.tail.clone();
                w.push(write.clone());
                (w, write.last_seq(), Vec::new(), *compact)
            }
            _ => return,
        };
        if writes.is_empty() {
            self.remember_writer(&req.log, ballot, highest.saturating_add(1));
            self.stats.recoveries += 1;
            self.finish(req.caller, Ok(JournalOutput::Recovered { page, highest }));
            return;
        }
        let committed = rec.committed;
        req.phase = Phase::Accepting {
            ballot,
            highest,
            page,
        };
        self.send_round(now_ms, req, |request, log| JournalMessage::Accept {
            request,
            log: log.to_owned(),
            ballot,
            committed,
            compact,
            writes: writes.clone(),
        });
    }

    fn round_lost(&mut self, now_ms: u64, req: Request) {
        let refusal = req.highest_refusal();
        let nacked = req.refused.values().any(Option::is_some);
        match req.phase {
            Phase::Preparing { attempt, .. } if nacked && attempt < MAX_PREPARES => {
                self.prepare(now_ms, req, refusal, attempt + 1);
            }
            Phase::Preparing { .. } | Phase::Accepting { .. } if nacked => {
                self.writers.remove(&req.log);
                self.stats.conflicts += 1;
                self.finish(
                    req.caller,
                    Err(JournalError::Conflict(format!(
                        "{}: another writer holds it (a replica promised ballot {}.{})",
                        req.log, refusal.round, refusal.node
                    ))),
                );
            }
            _ => {
                if matches!(req.phase, Phase::Accepting { .. }) {
                    self.writers.remove(&req.log);
                }
                self.finish(
                    req.caller,
                    Err(JournalError::Unavailable(format!(
                        "{}: a majority of its replicas could not answer",
                        req.log
                    ))),
                );
            }
        }
    }

    fn remember_writer(&mut self, log: &str, ballot: Ballot, next_seq: u64) {
        if self.writers.len() >= self.settings.max_writers && !self.writers.contains_key(log) {
            // Forget one: it prepares again on its next append.
            if let Some(k) = self.writers.keys().next().cloned() {
                self.writers.remove(&k);
            }
        }
        self.writers
            .insert(log.to_owned(), Writer { ballot, next_seq });
    }

    fn expire(&mut self, now_ms: u64) {
        let due: Vec<u64> = self
            .requests
            .iter()
            .filter(|(_, r)| r.deadline_ms <= now_ms)
            .map(|(w, _)| *w)
            .collect();
        for w in due {
            if let Some(req) = self.requests.remove(&w) {
                self.stats.timeouts += 1;
                if matches!(req.phase, Phase::Accepting { .. }) {
                    self.writers.remove(&req.log);
                }
                let names: Vec<String> =
                    req.replicas.iter().map(|r| r.address.to_string()).collect();
                self.finish(
                    req.caller,
                    Err(JournalError::Unavailable(format!(
                        "{}: no majority of its replicas [{}] answered within {} ms",
                        req.log,
                        names.join(", "),
                        self.settings.request_timeout_ms
                    ))),
                );
            }
        }
    }

    // ---- the acceptor ----

    /// The acceptor's answer to a request (`None` for a message that is not one).
    fn answer(&mut self, from: &UniqueAddress, msg: JournalMessage) -> Option<JournalMessage> {
        let gate = |m: &Self, request: u64, log: &str| -> Option<JournalMessage> {
            if log.len() > MAX_LOG_BYTES || log.contains('\0') {
                return Some(JournalMessage::Unable { request });
            }
            m.handoffs
                .is_pending(segment_of_log(log))
                .then_some(JournalMessage::Unable { request })
        };
        let result = match msg {
            JournalMessage::Prepare {
                request,
                log,
                ballot,
                from: f,
                max_events,
            } => {
                if let Some(refuse) = gate(self, request, &log) {
                    return Some(refuse);
                }
                let st = &mut self.storage;
                acceptor::prepare(st, request, &log, ballot, f, max_events as usize)
                    .map_err(|e| (request, e))
            }
            JournalMessage::Accept {
                request,
                log,
                ballot,
                committed,
                compact,
                writes,
            } => {
                if let Some(refuse) = gate(self, request, &log) {
                    return Some(refuse);
                }
                let st = &mut self.storage;
                acceptor::accept(st, request, &log, ballot, committed, compact, &writes)
                    .map_err(|e| (request, e))
            }
            JournalMessage::Read {
                request,
                log,
                from: f,
                max_events,
            } => {
                if let Some(refuse) = gate(self, request, &log) {
                    return Some(refuse);
                }
                let st = &mut self.storage;
                acceptor::read(st, request, &log, f, max_events as usize).map_err(|e| (request, e))
            }
            JournalMessage::SaveSnapshot {
                request,
                log,
                snapshot,
            } => {
                if let Some(refuse) = gate(self, request, &log) {
                    return Some(refuse);
                }
                let st = &mut self.storage;
                acceptor::save_snapshot(st, &log, &snapshot)
                    .map(|()| JournalMessage::Done { request })
                    .map_err(|e| (request, e))
            }
            JournalMessage::LoadSnapshot { request, log } => {
                if let Some(refuse) = gate(self, request, &log) {
                    return Some(refuse);
                }
                let st = &mut self.storage;
                acceptor::load_snapshot(st, &log)
                    .map(|snapshot| JournalMessage::SnapshotReply { request, snapshot })
                    .map_err(|e| (request, e))
            }
            JournalMessage::Delete { request, log, to } => {
                if let Some(refuse) = gate(self, request, &log) {
                    return Some(refuse);
                }
                let st = &mut self.storage;
                acceptor::delete_to(st, &log, to)
                    .map(|()| JournalMessage::Done { request })
                    .map_err(|e| (request, e))
            }
            JournalMessage::Handoff {
                segment,
                page,
                records,
                last,
            } => {
                for (k, v) in &records {
                    match acceptor::merge_record(&mut self.storage, k, v) {
                        Ok(true) => {}
                        Ok(false) => self.stats.rejected += 1,
                        Err(_) => {
                            self.stats.storage_errors += 1;
                            return None;
                        }
                    }
                }
                self.stats.handoff_pages += 1;
                if last {
                    self.handoffs.received_last(segment, from);
                }
                return Some(JournalMessage::HandoffAck { segment, page });
            }
            JournalMessage::HandoffAck { segment, page } => {
                self.handoffs.acknowledged(segment, from, page);
                return None;
            }
            JournalMessage::HandoffWanted { segments } => {
                for s in segments {
                    self.handoffs.outgoing.entry((s, from.clone())).or_default();
                }
                return None;
            }
            JournalMessage::HandoffEmpty { segments } => {
                for s in &segments {
                    self.handoffs.received_last(*s, from);
                }
                return Some(JournalMessage::HandoffEmptyAck { segments });
            }
            JournalMessage::HandoffEmptyAck { segments } => {
                for s in segments {
                    self.handoffs.acknowledged(s, from, 0);
                }
                return None;
            }
            _ => return None,
        };
        Some(match result {
            Ok(m) => m,
            Err((request, _)) => {
                self.stats.storage_errors += 1;
                JournalMessage::Unable { request }
            }
        })
    }

    fn handoff_tick(&mut self, now_ms: u64) {
        // Ask every replica this node waits for, again and again until it delivered: its
        // view of the ring may have changed differently.
        if now_ms >= self.handoffs.next_ask_ms {
            self.handoffs.next_ask_ms = now_ms + handoff::RESEND_MS;
            let mut wanted: BTreeMap<UniqueAddress, Vec<u16>> = BTreeMap::new();
            for (s, from) in &self.handoffs.pending {
                for f in from {
                    wanted.entry(f.clone()).or_default().push(*s);
                }
            }
            for (to, segments) in wanted {
                self.held_transmits.push(Transmit {
                    to: to.address.clone(),
                    to_uid: Some(to.uid),
                    lane: Lane::Ordinary,
                    message: JournalMessage::HandoffWanted { segments },
                });
            }
        }
        let mut in_flight = self
            .handoffs
            .outgoing
            .values()
            .filter(|o| {
                o.in_flight
                    .as_ref()
                    .is_some_and(|(t, ..)| now_ms < t + handoff::RESEND_MS)
            })
            .count();
        let keys: Vec<(u16, UniqueAddress)> = self.handoffs.outgoing.keys().cloned().collect();
        // Segments with no record here close in one message per new replica.
        let mut empty: BTreeMap<UniqueAddress, Vec<u16>> = BTreeMap::new();
        for (segment, to) in &keys {
            let Some(o) = self.handoffs.outgoing.get_mut(&(*segment, to.clone())) else {
                continue;
            };
            if o.page != 0
                || o.in_flight
                    .as_ref()
                    .is_some_and(|(t, ..)| now_ms < t + handoff::RESEND_MS)
            {
                continue;
            }
            match acceptor::segment_records(&mut self.storage, *segment, None, 1) {
                Ok(r) if r.is_empty() => {
                    o.in_flight = Some((now_ms, None, true));
                    empty.entry(to.clone()).or_default().push(*segment);
                }
                Ok(_) => {}
                Err(_) => {
                    self.stats.storage_errors += 1;
                    return;
                }
            }
        }
        for (to, segments) in empty {
            self.held_transmits.push(Transmit {
                to: to.address.clone(),
                to_uid: Some(to.uid),
                lane: Lane::Ordinary,
                message: JournalMessage::HandoffEmpty { segments },
            });
        }
        for (segment, to) in keys {
            if in_flight >= handoff::MAX_IN_FLIGHT {
                return;
            }
            let Some(o) = self.handoffs.outgoing.get(&(segment, to.clone())) else {
                continue;
            };
            if o.in_flight
                .as_ref()
                .is_some_and(|(t, ..)| now_ms < t + handoff::RESEND_MS)
            {
                continue;
            }
            let (page, after) = (o.page, o.after.clone());
            let Ok(records) = acceptor::segment_records(
                &mut self.storage,
                segment,
                after.as_deref(),
                handoff::PAGE_RECORDS,
            ) else {
                self.stats.storage_errors += 1;
                return;
            };
            let last = records.len() < handoff::PAGE_RECORDS;
            let last_key = records.last().map(|(k, _)| k.clone()).or(after);
            if let Some(o) = self.handoffs.outgoing.get_mut(&(segment, to.clone())) {
                o.in_flight = Some((now_ms, last_key, last));
            }
            in_flight += 1;
            self.held_transmits.push(Transmit {
                to: to.address.clone(),
                to_uid: Some(to.uid),
                lane: Lane::Large,
                message: JournalMessage::Handoff {
                    segment,
                    page,
                    records,
                    last,
                },
            });
        }
    }

    fn hosting_members(&self, view: &MembershipView) -> Vec<UniqueAddress> {
        view.members
            .values()
            .filter(|m| m.status == MemberStatus::Up)
            .filter(|m| self.settings.role.as_deref().is_none_or(|r| m.has_role(r)))
            .map(|m| m.unique_address.clone())
            .collect()
    }
}

fn conflict_next(log: &str, next: u64, first: u64) -> JournalError {
    JournalError::Conflict(format!(
        "{log}: the next sequence number is {next}, the write starts at {first} (another writer wrote)"
    ))
}

impl<S: KvStorage> ProtocolMachine for JournalMachine<S> {
    type Message = JournalMessage;
    type Event = JournalEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::JOURNAL
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: JournalMessage) {
        if message.reply_to().is_some() {
            self.on_reply(now_ms, from, message);
        } else if let Some(answer) = self.answer(from, message) {
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
        }
        self.after_input();
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        for t in self.out.timers.expired(now_ms) {
            match t {
                Timer::Tick => {
                    self.expire(now_ms);
                    self.handoff_tick(now_ms);
                    self.out.timers.set(Timer::Tick, now_ms + TICK_MS);
                }
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
