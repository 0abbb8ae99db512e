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
use super::unable::UnableReason;
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
        let refused = if entity_type.len() > MAX_LOG_BYTES || entity_type.contains('\0') {
            Some(format!(
                "an entity type of {} bytes (or with a NUL) has no events",
                entity_type.len()
            ))
        } else if asked.is_empty() {
            Some("no member hosts the journal yet".to_owned())
        } else {
            None
        };
        if let Some(reason) = refused {
            self.finish(request, Err(JournalError::Unavailable(reason)));
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
                self.out.transmits.push_back(Transmit {
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
            return self.unable(0, UnableReason::BadRequest);
        };
        if entity_type.len() > MAX_LOG_BYTES || entity_type.contains('\0') {
            return self.unable(request, UnableReason::BadRequest);
        }
        let segments: Vec<u16> = (0..SEGMENTS)
            .filter(|s| {
                !self.handoffs.is_waiting(*s)
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
        let answers = stream::segment_set(&segments);
        match stream::read_stream(&mut self.storage, &answers, &query) {
            Ok((events, full)) => JournalMessage::StreamReply {
                request,
                segments,
                events,
                full,
            },
            Err(_) => {
                self.stats.storage_errors += 1;
                self.unable(request, UnableReason::Storage)
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
}

fn uncovered_error(missing: &[u16]) -> JournalError {
    let shown: Vec<String> = missing.iter().take(8).map(u16::to_string).collect();
    JournalError::Unavailable(format!(
        "events by type: {} ring segments (e.g. {}) were not answered by all their replicas",
        missing.len(),
        shown.join(", ")
    ))
}
