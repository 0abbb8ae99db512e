//! The events-by-type queries of [`JournalMachine`]: a query asks every member that
//! hosts the journal for its segments' stream ([`super::stream`]) and answers once, for
//! every segment of the ring, **every** replica (in this node's view) answered for it,
//! merging the pages in offset order. Every replica, not a majority: two replicas may
//! index one write at two stream times (one learned it late), and a reader that read one
//! of them for a page and the other for the next could pass both; reading all sees each
//! copy. So the stream waits while a replica cannot answer (until the ring drops it).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;

use super::message::JournalMessage;
use super::stream::{self, StreamEvent, StreamQuery, MAX_STREAM_LIMIT};
use super::{JournalError, JournalMachine, JournalOutput, MAX_LOG_BYTES};
use crate::address::UniqueAddress;
use crate::kv::ring::SEGMENTS;
use crate::kv::storage::KvStorage;
use crate::protocol::{Lane, Transmit};

/// A query in flight.
#[derive(Debug, Clone)]
pub(super) struct StreamRequest {
    caller: u64,
    limit: u32,
    asked: Vec<UniqueAddress>,
    /// Answers: the segments answered for (ascending), the page, and whether it was cut.
    replies: BTreeMap<UniqueAddress, (Vec<u16>, Vec<StreamEvent>, bool)>,
    failed: BTreeSet<UniqueAddress>,
    pub(super) deadline_ms: u64,
}

impl StreamRequest {
    /// The caller's request id.
    pub(super) fn caller(&self) -> u64 {
        self.caller
    }
}

impl<S: KvStorage> JournalMachine<S> {
    /// Reads the stream of `entity_type`'s events in `slices` after offset `after`
    /// (stream time ms, ordering; (0, 0) for all), up to this node's clock minus the
    /// stream delay, at most `limit` events: answered [`JournalOutput::Events`] in offset
    /// order, or [`JournalError::Unavailable`] if some replica of some segment did not
    /// answer within the request timeout.
    pub fn events_by_type(
        &mut self,
        now_ms: u64,
        request: u64,
        entity_type: String,
        slices: RangeInclusive<u16>,
        after: (u64, u64),
        limit: u32,
    ) {
        let asked: Vec<UniqueAddress> = self.ring.members().to_vec();
        if asked.is_empty() || entity_type.len() > MAX_LOG_BYTES {
            self.finish(
                request,
                Err(JournalError::Unavailable(
                    "no member hosts the journal yet".into(),
                )),
            );
            self.after_input();
            return;
        }
        if self.requests.len() + self.streams.len() >= self.settings.max_in_flight {
            self.finish(
                request,
                Err(JournalError::Unavailable(
                    "too many journal requests in flight on this node".into(),
                )),
            );
            self.after_input();
            return;
        }
        let wire = self.next_wire;
        self.next_wire += 1;
        let limit = limit.clamp(1, MAX_STREAM_LIMIT);
        let message = JournalMessage::StreamRead {
            request: wire,
            entity_type,
            slice_from: *slices.start(),
            slice_to: *slices.end(),
            after_at_ms: after.0,
            after_ordering: after.1,
            horizon_ms: now_ms.saturating_sub(self.settings.stream_delay_ms),
            limit,
        };
        self.streams.insert(
            wire,
            StreamRequest {
                caller: request,
                limit,
                asked: asked.clone(),
                replies: BTreeMap::new(),
                failed: BTreeSet::new(),
                deadline_ms: now_ms.saturating_add(self.settings.request_timeout_ms),
            },
        );
        for m in asked {
            if m == self.self_node {
                let answer = self.answer_stream_read(message.clone());
                let me = self.self_node.clone();
                self.on_stream_reply(&me, answer);
            } else {
                self.held_transmits.push(Transmit {
                    to: m.address.clone(),
                    to_uid: Some(m.uid),
                    lane: Lane::Ordinary,
                    message: message.clone(),
                });
            }
        }
        self.after_input();
    }

    /// This node's answer to a stream read: the stream of the segments it replicates and
    /// is not waiting for.
    pub(super) fn answer_stream_read(&mut self, msg: JournalMessage) -> JournalMessage {
        let JournalMessage::StreamRead {
            request,
            entity_type,
            slice_from,
            slice_to,
            after_at_ms,
            after_ordering,
            horizon_ms,
            limit,
        } = msg
        else {
            return JournalMessage::Unable { request: 0 };
        };
        if entity_type.len() > MAX_LOG_BYTES || entity_type.contains('\0') {
            return JournalMessage::Unable { request };
        }
        let segments: Vec<u16> = (0..SEGMENTS)
            .filter(|s| {
                !self.handoffs.is_pending(*s)
                    && self
                        .ring
                        .preference_list(*s, self.settings.n)
                        .contains(&&self.self_node)
            })
            .collect();
        let query = StreamQuery {
            entity_type,
            slices: slice_from..=slice_to,
            after: (after_at_ms, after_ordering),
            horizon_ms,
            limit,
        };
        match stream::read_stream(&mut self.storage, &segments, &query) {
            Ok((events, full)) => JournalMessage::StreamReply {
                request,
                segments,
                events,
                full,
            },
            Err(_) => {
                self.stats.storage_errors += 1;
                JournalMessage::Unable { request }
            }
        }
    }

    /// True if `wire` is a stream query of this node.
    pub(super) fn is_stream(&self, wire: u64) -> bool {
        self.streams.contains_key(&wire)
    }

    /// A member's answer to a stream query.
    pub(super) fn on_stream_reply(&mut self, from: &UniqueAddress, msg: JournalMessage) {
        let Some(wire) = msg.reply_to() else { return };
        let Some(req) = self.streams.get_mut(&wire) else {
            return;
        };
        if !req.asked.contains(from) {
            return;
        }
        match msg {
            JournalMessage::StreamReply {
                mut segments,
                events,
                full,
                ..
            } => {
                segments.sort_unstable();
                req.replies.insert(from.clone(), (segments, events, full));
            }
            _ => {
                req.failed.insert(from.clone());
            }
        }
        let missing = self.uncovered(wire);
        let Some(req) = self.streams.get(&wire) else {
            return;
        };
        if missing.is_empty() {
            let Some(req) = self.streams.remove(&wire) else {
                return;
            };
            let pages = req.replies.into_values().map(|(_, e, f)| (e, f)).collect();
            let events = stream::merge_pages(pages, req.limit as usize);
            self.finish(req.caller, Ok(JournalOutput::Events(events)));
        } else if req.replies.len() + req.failed.len() >= req.asked.len() {
            let caller = req.caller;
            self.streams.remove(&wire);
            self.finish(caller, Err(uncovered_error(&missing)));
        }
    }

    /// The segments of query `wire` not answered by all their replicas.
    fn uncovered(&self, wire: u64) -> Vec<u16> {
        let Some(req) = self.streams.get(&wire) else {
            return Vec::new();
        };
        (0..SEGMENTS)
            .filter(|s| {
                let replicas = self.ring.preference_list(*s, self.settings.n);
                let answered = replicas
                    .iter()
                    .filter(|r| {
                        req.replies
                            .get(**r)
                            .is_some_and(|(segs, ..)| segs.binary_search(s).is_ok())
                    })
                    .count();
                answered < replicas.len()
            })
            .collect()
    }

    /// Fails the stream queries past their deadline.
    pub(super) fn expire_streams(&mut self, now_ms: u64) {
        let due: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, r)| r.deadline_ms <= now_ms)
            .map(|(w, _)| *w)
            .collect();
        for w in due {
            let missing = self.uncovered(w);
            if let Some(req) = self.streams.remove(&w) {
                self.stats.timeouts += 1;
                self.finish(req.caller, Err(uncovered_error(&missing)));
            }
        }
    }

    /// Tells every replica of `log` that `writes` are chosen, at stream time `now_ms`,
    /// again every [`LEARN_RESEND_MS`] until each replica still in the ring acknowledged.
    pub(super) fn send_learn(
        &mut self,
        now_ms: u64,
        log: &str,
        replicas: &[UniqueAddress],
        writes: Vec<(u64, super::Ballot)>,
    ) {
        if writes.is_empty() || !log.starts_with('e') {
            return;
        }
        for chunk in writes.chunks(MAX_LEARN_WRITES) {
            let id = self.next_wire;
            self.next_wire += 1;
            let mut pending = PendingLearn {
                log: log.to_owned(),
                at_ms: now_ms,
                writes: chunk.to_vec(),
                waiting: replicas.iter().cloned().collect(),
                next_send_ms: now_ms.saturating_add(LEARN_RESEND_MS),
            };
            if pending.waiting.remove(&self.self_node) {
                let (log, writes) = (pending.log.clone(), pending.writes.clone());
                self.learn(now_ms, &log, now_ms, &writes);
            }
            for r in &pending.waiting {
                self.held_transmits.push(pending.transmit(id, r));
            }
            if !pending.waiting.is_empty() {
                if self.learns.len() >= MAX_PENDING_LEARNS {
                    // The oldest learn is given up (the next recovery learns its writes).
                    self.learns.pop_first();
                    self.stats.learns_dropped += 1;
                }
                self.learns.insert(id, pending);
            }
        }
    }

    /// Sends the learns not acknowledged in time again (to replicas still in the ring).
    pub(super) fn learn_tick(&mut self, now_ms: u64) {
        let members: BTreeSet<&UniqueAddress> = self.ring.members().iter().collect();
        let mut resend = Vec::new();
        self.learns.retain(|id, p| {
            p.waiting.retain(|r| members.contains(r));
            if p.next_send_ms <= now_ms {
                p.next_send_ms = now_ms.saturating_add(LEARN_RESEND_MS);
                for r in &p.waiting {
                    resend.push(p.transmit(*id, r));
                }
            }
            !p.waiting.is_empty()
        });
        self.stats.learn_resends += resend.len() as u64;
        self.held_transmits.extend(resend);
    }

    /// A replica applied learn `id`.
    pub(super) fn learn_acknowledged(&mut self, id: u64, from: &UniqueAddress) {
        if let Some(p) = self.learns.get_mut(&id) {
            p.waiting.remove(from);
            if p.waiting.is_empty() {
                self.learns.remove(&id);
            }
        }
    }

    /// Applies a learn from a writer (see [`stream::learn`]) at stream time `at_ms`, but
    /// not earlier than half the stream delay before `now_ms` (a learn that arrives late
    /// is indexed where readers have not passed yet).
    pub(super) fn learn(
        &mut self,
        now_ms: u64,
        log: &str,
        at_ms: u64,
        writes: &[(u64, super::Ballot)],
    ) {
        let at_ms = at_ms.max(now_ms.saturating_sub(self.settings.stream_delay_ms / 2));
        if log.len() > MAX_LOG_BYTES || log.contains('\0') || writes.len() > MAX_LEARN_WRITES {
            self.stats.rejected += 1;
            return;
        }
        if stream::learn(&mut self.storage, log, at_ms, writes).is_err() {
            self.stats.storage_errors += 1;
        }
    }
}

/// A learn not yet acknowledged by every replica.
#[derive(Debug, Clone)]
pub(super) struct PendingLearn {
    log: String,
    at_ms: u64,
    writes: Vec<(u64, super::Ballot)>,
    waiting: BTreeSet<UniqueAddress>,
    next_send_ms: u64,
}

impl PendingLearn {
    fn transmit(&self, id: u64, to: &UniqueAddress) -> Transmit<JournalMessage> {
        Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message: JournalMessage::Learn {
                id,
                log: self.log.clone(),
                at_ms: self.at_ms,
                writes: self.writes.clone(),
            },
        }
    }
}

/// A learn is sent again after this long without an acknowledgement, ms.
pub(super) const LEARN_RESEND_MS: u64 = 1_000;
/// Learns waiting for acknowledgements, at most (more: the oldest is given up).
pub(super) const MAX_PENDING_LEARNS: usize = 100_000;
/// Writes one learn names, at most.
pub(super) const MAX_LEARN_WRITES: usize = 1000;

fn uncovered_error(missing: &[u16]) -> JournalError {
    let shown: Vec<String> = missing.iter().take(8).map(u16::to_string).collect();
    JournalError::Unavailable(format!(
        "events by type: {} ring segments (e.g. {}) were not answered by all their replicas",
        missing.len(),
        shown.join(", ")
    ))
}
