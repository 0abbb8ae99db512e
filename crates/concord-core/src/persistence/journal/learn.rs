//! The learns of [`JournalMachine`] (see [`super::stream`]): once this node's writer knows
//! writes are chosen it applies the learn to its own replica at once and queues it for the
//! other replicas; at the turn's commit the queue leaves as **one** [`JournalMessage::Learn`]
//! per replica (many logs' writes in one message), which is sent again every
//! [`LEARN_RESEND_MS`] until that replica acknowledges it or leaves the ring.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::entry::Ballot;
use super::message::JournalMessage;
use super::{stream, JournalMachine, MAX_LOG_BYTES};
use crate::address::UniqueAddress;
use crate::kv::storage::KvStorage;
use crate::protocol::{Lane, Transmit};

/// A learn is sent again after this long without an acknowledgement, ms.
pub(super) const LEARN_RESEND_MS: u64 = 1_000;
/// Learn messages waiting for acknowledgements, at most (more: the oldest is given up).
pub(super) const MAX_PENDING_LEARNS: usize = 10_000;
/// Writes one learn message names, at most.
pub const MAX_LEARN_WRITES: usize = 1000;

/// The chosen writes of one log, learned at one stream time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearnedLog {
    /// The log.
    pub log: String,
    /// The stream time, ms since the Unix epoch.
    pub at_ms: u64,
    /// (first sequence number, ballot accepted at) of each chosen write.
    pub writes: Vec<(u64, Ballot)>,
}

/// A learn message not yet acknowledged.
#[derive(Debug, Clone)]
pub(super) struct PendingLearn {
    to: UniqueAddress,
    logs: Vec<LearnedLog>,
    /// When it was (last) sent, ms; `None` until the next tick sees it.
    sent_ms: Option<u64>,
}

impl PendingLearn {
    fn transmit(&self, id: u64) -> Transmit<JournalMessage> {
        Transmit {
            to: self.to.address.clone(),
            to_uid: Some(self.to.uid),
            lane: Lane::Ordinary,
            message: JournalMessage::Learn {
                id,
                logs: self.logs.clone(),
            },
        }
    }
}

/// Learns queued for the turn's commit, and learn messages waiting for acknowledgements.
#[derive(Debug, Default)]
pub(super) struct Learns {
    outbox: BTreeMap<UniqueAddress, Vec<LearnedLog>>,
    pending: BTreeMap<u64, PendingLearn>,
}

impl Learns {
    /// Learn messages waiting for acknowledgements.
    pub(super) fn pending(&self) -> usize {
        self.pending.len()
    }
}

impl<S: KvStorage> JournalMachine<S> {
    /// Tells every replica of `log` that `writes` are chosen, at stream time `now_ms`: this
    /// node's own replica at once, the others at the turn's commit.
    pub(super) fn send_learn(
        &mut self,
        now_ms: u64,
        log: &str,
        replicas: &[UniqueAddress],
        writes: Vec<(u64, Ballot)>,
    ) {
        if writes.is_empty() || !log.starts_with('e') {
            return;
        }
        for chunk in writes.chunks(MAX_LEARN_WRITES) {
            let learned = LearnedLog {
                log: log.to_owned(),
                at_ms: now_ms,
                writes: chunk.to_vec(),
            };
            for r in replicas {
                if *r == self.self_node {
                    self.apply_learn(now_ms, &learned);
                } else {
                    self.learns
                        .outbox
                        .entry(r.clone())
                        .or_default()
                        .push(learned.clone());
                }
            }
        }
    }

    /// Sends the queued learns, one message per replica (of at most
    /// [`MAX_LEARN_WRITES`] writes).
    pub(super) fn flush_learns(&mut self) {
        for (to, logs) in std::mem::take(&mut self.learns.outbox) {
            let mut batch: Vec<LearnedLog> = Vec::new();
            let mut writes = 0;
            for l in logs {
                if writes + l.writes.len() > MAX_LEARN_WRITES && !batch.is_empty() {
                    self.send_learn_message(to.clone(), std::mem::take(&mut batch));
                    writes = 0;
                }
                writes += l.writes.len();
                batch.push(l);
            }
            if !batch.is_empty() {
                self.send_learn_message(to, batch);
            }
        }
    }

    fn send_learn_message(&mut self, to: UniqueAddress, logs: Vec<LearnedLog>) {
        let id = self.next_wire;
        self.next_wire += 1;
        let pending = PendingLearn {
            to,
            logs,
            sent_ms: None,
        };
        self.out.transmits.push_back(pending.transmit(id));
        if self.learns.pending.len() >= MAX_PENDING_LEARNS {
            // The oldest is given up (the log's next recovery learns its writes again).
            self.learns.pending.pop_first();
            self.stats.learns_dropped += 1;
        }
        self.learns.pending.insert(id, pending);
    }

    /// Sends the learn messages not acknowledged in time again (to replicas still in the
    /// ring; the others are given up).
    pub(super) fn learn_tick(&mut self, now_ms: u64) {
        let members = self.ring.members();
        let mut resend = Vec::new();
        self.learns.pending.retain(|id, p| {
            if !members.contains(&p.to) {
                return false;
            }
            match p.sent_ms {
                None => p.sent_ms = Some(now_ms),
                Some(t) if now_ms >= t.saturating_add(LEARN_RESEND_MS) => {
                    p.sent_ms = Some(now_ms);
                    resend.push(p.transmit(*id));
                }
                Some(_) => {}
            }
            true
        });
        self.stats.learn_resends += resend.len() as u64;
        self.out.transmits.extend(resend);
    }

    /// A replica applied learn message `id`.
    pub(super) fn learn_acknowledged(&mut self, id: u64, from: &UniqueAddress) {
        if self.learns.pending.get(&id).is_some_and(|p| p.to == *from) {
            self.learns.pending.remove(&id);
        }
    }

    /// Applies a learn message from a writer; `false` if it is malformed (too many writes,
    /// a bad log name: nothing applied).
    pub(super) fn apply_learns(&mut self, now_ms: u64, logs: &[LearnedLog]) -> bool {
        let writes: usize = logs.iter().map(|l| l.writes.len()).sum();
        if writes > MAX_LEARN_WRITES
            || logs
                .iter()
                .any(|l| l.log.len() > MAX_LOG_BYTES || l.log.contains('\0'))
        {
            self.stats.rejected += 1;
            return false;
        }
        for l in logs {
            self.apply_learn(now_ms, l);
        }
        true
    }

    /// Applies one log's learn (see [`stream::learn`]) at its stream time, but not earlier
    /// than half the stream delay before `now_ms` (a learn that arrives late is indexed
    /// where readers have not passed yet).
    fn apply_learn(&mut self, now_ms: u64, l: &LearnedLog) {
        let at_ms = l
            .at_ms
            .max(now_ms.saturating_sub(self.settings.stream_delay_ms / 2));
        if stream::learn(&mut self.storage, &l.log, at_ms, &l.writes).is_err() {
            self.stats.storage_errors += 1;
        }
    }
}
