//! The acceptor side of [`JournalMachine`]: answers to other nodes' proposers (only as
//! a replica of the log in this node's own view, and not before its handoff), handoff
//! pages in and out, and the members that host logs.

use std::collections::BTreeMap;

use super::handoff::Need;
use super::holding;
use super::message::JournalMessage;
use super::standing::Standing;
use super::unable::UnableReason;
use super::{
    acceptor, handoff, replicas_digest, segment_of_log, JournalMachine, MAX_LOG_BYTES, MISPLACED_MS,
};
use crate::address::UniqueAddress;
use crate::kv::storage::KvStorage;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;
use crate::protocol::{Lane, Transmit};

/// `m` naming `view` (the digest of the log's replica list in this node's view) if it is
/// an answer that states it ([`JournalMessage::replicas_mut`]).
fn with_view(mut m: JournalMessage, view: u64) -> JournalMessage {
    if let Some(replicas) = m.replicas_mut() {
        *replicas = view;
    }
    m
}

/// Records the journal reads per tick, about, to keep segments' holdings in memory before
/// a ring change asks for them (`StateCache::warm_holdings`): 40,000 a second at the 100 ms
/// tick, so a node restarted on a journal of a few hundred thousand records has them read
/// within the seconds it takes to join.
const WARM_RECORDS: usize = 4_096;

/// Segments one `HandoffEmpty` message closes, at most.
const EMPTY_SEGMENTS: usize = 64;

/// Segments closed empty, with their standings, and the needs of those segments.
type EmptyBatch = (Vec<(u16, Standing)>, Vec<(u16, Need)>);

/// A `HandoffEmpty` to `to` closing `segments` with their `needs`.
fn empty_message(to: &UniqueAddress, (segments, needs): EmptyBatch) -> Transmit<JournalMessage> {
    Transmit {
        to: to.address.clone(),
        to_uid: Some(to.uid),
        lane: Lane::Ordinary,
        message: JournalMessage::HandoffEmpty { segments, needs },
    }
}

impl<S: KvStorage> JournalMachine<S> {
    // ---- the acceptor ----

    /// The acceptor's answer to a request (`None` for a message that is not one).
    pub(super) fn answer(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        msg: JournalMessage,
    ) -> Option<JournalMessage> {
        match msg {
            JournalMessage::Learn { id, logs } => {
                // A malformed learn is acknowledged too: sending it again changes nothing.
                self.apply_learns(now_ms, &logs);
                return Some(JournalMessage::LearnAck { id });
            }
            JournalMessage::LearnAck { id } => {
                self.learn_acknowledged(id, from);
                return None;
            }
            JournalMessage::StreamRead { .. } => return Some(self.answer_stream_read(msg)),
            JournalMessage::GiveUp { lost } => {
                self.on_give_up(&from.address, lost);
                return None;
            }
            _ => {}
        }
        let mut view = 0;
        if let Some((request, log)) = msg.request_log() {
            // Only a replica in this node's own view answers, and not before its handoff.
            let segment = segment_of_log(log);
            let replicas = self.ring.preference_list(segment, self.settings.n);
            let refusal = if log.len() > MAX_LOG_BYTES || log.contains('\0') {
                Some(UnableReason::BadRequest)
            } else if !replicas.contains(&&self.self_node) {
                Some(UnableReason::NotAReplica)
            } else if self.handoffs.is_pending(segment) {
                Some(UnableReason::Synchronising)
            } else {
                None
            };
            if let Some(reason) = refusal {
                return Some(self.unable(request, reason));
            }
            view = replicas_digest(replicas);
        }
        let st = &mut self.storage;
        let result = match msg {
            JournalMessage::Prepare {
                request,
                log,
                ballot,
                from: f,
                max_events,
                snapshot,
            } => acceptor::prepare(st, request, &log, ballot, f, max_events as usize, snapshot)
                .map_err(|e| (request, e)),
            JournalMessage::Accept {
                request,
                log,
                ballot,
                committed,
                compact,
                writes,
            } => acceptor::accept_and_learn(
                st,
                request,
                &log,
                ballot,
                committed,
                compact,
                &writes,
                Some(now_ms),
            )
            .map_err(|e| (request, e)),
            JournalMessage::Read {
                request,
                log,
                from: f,
                max_events,
            } => {
                acceptor::read(st, request, &log, f, max_events as usize).map_err(|e| (request, e))
            }
            JournalMessage::SaveSnapshot {
                request,
                log,
                snapshot,
            } => acceptor::save_snapshot(st, &log, &snapshot)
                .map(|()| JournalMessage::Done {
                    request,
                    replicas: 0,
                })
                .map_err(|e| (request, e)),
            JournalMessage::LoadSnapshot { request, log } => acceptor::load_snapshot(st, &log)
                .map(|snapshot| JournalMessage::SnapshotReply {
                    request,
                    snapshot,
                    replicas: 0,
                })
                .map_err(|e| (request, e)),
            JournalMessage::Delete { request, log, to } => st
                .delete_to(&log, to)
                .map(|()| JournalMessage::Done {
                    request,
                    replicas: 0,
                })
                .map_err(|e| (request, e)),
            JournalMessage::Handoff {
                segment,
                page,
                records,
                last,
                standing,
                needs,
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
                    self.handoffs.received_last(segment, from, standing, &needs);
                }
                return Some(JournalMessage::HandoffAck { segment, page });
            }
            JournalMessage::HandoffAck { segment, page } => {
                if let Some(o) = self.handoffs.acknowledged(segment, from, page) {
                    let last_write = self.storage.last_write(segment);
                    self.handoffs.delivered(segment, from, &o, last_write);
                }
                return None;
            }
            JournalMessage::HandoffWanted { segments, held } => {
                for s in segments {
                    self.handoffs.outgoing.entry((s, from.clone())).or_default();
                }
                let ignored = self.handoffs.take_holdings(from, held);
                self.stats.holdings_ignored = self.stats.holdings_ignored.saturating_add(ignored);
                return None;
            }
            JournalMessage::HandoffEmpty { segments, needs } => {
                for (s, standing) in &segments {
                    let of: Vec<Need> = needs
                        .iter()
                        .filter(|(n, _)| n == s)
                        .map(|(_, need)| need.clone())
                        .collect();
                    self.handoffs.received_last(*s, from, *standing, &of);
                }
                let segments = segments.into_iter().map(|(s, _)| s).collect();
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
            Ok(JournalMessage::Unable { request, reason }) => self.unable(request, reason),
            Ok(m) => with_view(m, view),
            Err((request, _)) => {
                self.stats.storage_errors += 1;
                self.unable(request, UnableReason::Storage)
            }
        })
    }

    /// An `Unable` answer to `request`, counted by reason.
    pub(super) fn unable(&mut self, request: u64, reason: UnableReason) -> JournalMessage {
        self.stats.count_unable(reason);
        JournalMessage::Unable { request, reason }
    }

    pub(super) fn handoff_tick(&mut self, now_ms: u64) {
        // Holdings read ahead of the ring changes that ask for them, a little each tick.
        if self.storage.warm_holdings(WARM_RECORDS).is_err() {
            self.stats.storage_errors += 1;
        }
        if now_ms >= self.handoffs.next_misplaced_ms && !self.ring.is_empty() {
            self.handoffs.next_misplaced_ms = now_ms + MISPLACED_MS;
            // Only segments not replicated here and not yet sent to every replica in this
            // ring are looked up on the disk (`HeldIndex`).
            let (ring, me, n) = (&self.ring, &self.self_node, self.settings.n);
            let sent = &self.handoffs.misplaced_sent;
            let looked = self.storage.held_segments_where(|s| {
                let list = ring.preference_list(s, n);
                !list.contains(&me) && list.iter().any(|r| !sent.contains(&(s, (*r).clone())))
            });
            match looked {
                Ok(held) => {
                    let storage = &self.storage;
                    self.handoffs
                        .send_misplaced(&held, ring, me, n, |s| storage.last_write(s));
                }
                Err(_) => self.stats.storage_errors += 1,
            }
        }
        // A departed member owed a holding that this node may now tell: at once (it holds
        // its first pages back for it).
        let pending = &self.handoffs.pending;
        if self
            .handoffs
            .departure_offers
            .iter()
            .any(|(s, _)| pending.get(s).is_none_or(|p| p.from.is_empty()))
        {
            self.handoffs.next_ask_ms = now_ms;
        }
        if now_ms >= self.handoffs.next_ask_ms {
            self.handoffs.next_ask_ms = now_ms + handoff::RESEND_MS;
            if !self.ask_handoffs(now_ms) {
                return;
            }
        }
        // Pages in flight, their records and bytes: a page that left out nearly everything
        // (the new replica held it) is small, so many more of those go at once.
        let (mut in_flight, mut in_flight_records, mut in_flight_bytes) = self
            .handoffs
            .outgoing
            .values()
            .filter(|o| {
                o.in_flight
                    .as_ref()
                    .is_some_and(|(t, ..)| now_ms < t + handoff::RESEND_MS)
            })
            .fold((0usize, 0usize, 0usize), |(n, r, b), o| {
                (
                    n + 1,
                    r.saturating_add(o.in_flight_size.0),
                    b.saturating_add(o.in_flight_size.1),
                )
            });
        let keys: Vec<(u16, UniqueAddress)> = self.handoffs.outgoing.keys().cloned().collect();
        // Segments with no record here close in one message per new replica.
        let mut empty: BTreeMap<UniqueAddress, Vec<(u16, Standing, Vec<Need>)>> = BTreeMap::new();
        for (segment, to) in &keys {
            // A node that became a replica in a ring change and still waits has nothing
            // complete to give; a node in its first ring gives what its disk holds, and a
            // replica that stays its copy as it stood before the change.
            if self.handoffs.holds_back(*segment) {
                continue;
            }
            let Some(o) = self.handoffs.outgoing.get_mut(&(*segment, to.clone())) else {
                continue;
            };
            // Looked at once: a segment found to hold records keeps them (`ready_ms` set).
            if o.page != 0
                || o.ready_ms.is_some()
                || o.in_flight
                    .as_ref()
                    .is_some_and(|(t, ..)| now_ms < t + handoff::RESEND_MS)
            {
                continue;
            }
            // A segment the index knows holds nothing here is empty without a seek.
            let records = if self.storage.may_hold(*segment) {
                acceptor::segment_records(&mut self.storage, *segment, None, 1)
            } else {
                Ok(Vec::new())
            };
            match records {
                Ok(r) if r.is_empty() => {
                    o.in_flight = Some((now_ms, None, true));
                    let standing = self.handoffs.standing(*segment);
                    let needs = self.handoffs.needs_of(*segment);
                    empty
                        .entry(to.clone())
                        .or_default()
                        .push((*segment, standing, needs));
                }
                Ok(_) => {
                    o.ready_ms = Some(now_ms);
                }
                Err(_) => {
                    self.stats.storage_errors += 1;
                    return;
                }
            }
        }
        // At most EMPTY_SEGMENTS segments, and needs of at most MAX_PAGE_NEED_ADDRESSES
        // addresses (one segment's may reach it alone), per message: it fits in a frame.
        for (to, segments) in empty {
            let mut batch = EmptyBatch::default();
            let mut addresses = 0usize;
            for (s, standing, needs) in segments {
                let more: usize = needs.iter().map(Need::addresses).sum();
                if batch.0.len() >= EMPTY_SEGMENTS
                    || (!batch.0.is_empty()
                        && addresses.saturating_add(more) > handoff::MAX_PAGE_NEED_ADDRESSES)
                {
                    self.held_transmits
                        .push(empty_message(&to, std::mem::take(&mut batch)));
                    addresses = 0;
                }
                batch.0.push((s, standing));
                batch.1.extend(needs.into_iter().map(|n| (s, n)));
                addresses = addresses.saturating_add(more);
            }
            if !batch.0.is_empty() {
                self.held_transmits.push(empty_message(&to, batch));
            }
        }
        let departed = !self.ring.members().contains(&self.self_node);
        let mut read_this_tick = 0usize;
        for (segment, to) in keys {
            if in_flight >= handoff::MAX_IN_FLIGHT
                || in_flight_records >= handoff::MAX_IN_FLIGHT_RECORDS
                || in_flight_bytes >= handoff::MAX_IN_FLIGHT_BYTES
                || read_this_tick >= handoff::MAX_TICK_RECORDS
            {
                return;
            }
            if self.handoffs.holds_back(segment) {
                continue;
            }
            let Some(o) = self.handoffs.outgoing.get_mut(&(segment, to.clone())) else {
                continue;
            };
            if o.in_flight
                .as_ref()
                .is_some_and(|(t, ..)| now_ms < t + handoff::RESEND_MS)
            {
                continue;
            }
            // The first page waits a moment for what the new replica holds (it asks as
            // soon as its wait begins); a node that left the ring waits longer, for
            // replicas that tell it once their own waits ended.
            if o.page == 0 && o.holding.is_none() {
                let ready = *o.ready_ms.get_or_insert(now_ms);
                let wait = if departed {
                    holding::DEPARTED_WAIT_MS
                } else {
                    holding::WAIT_MS
                };
                if now_ms < ready.saturating_add(wait) {
                    continue;
                }
            }
            let (page, after) = (o.page, o.after.clone());
            // What the page read (records sent, left out after a read, or read to keep
            // the segment's holding in memory).
            let mut records_read = 0usize;
            let read = match &o.holding {
                Some(h) => self
                    .storage
                    .handoff_page_lacking(
                        segment,
                        after.as_deref(),
                        handoff::PAGE_RECORDS,
                        handoff::PAGE_BYTES,
                        h,
                    )
                    .map(|(page, n)| {
                        records_read = n;
                        page
                    }),
                None => acceptor::handoff_page(
                    &mut self.storage,
                    segment,
                    after.as_deref(),
                    handoff::PAGE_RECORDS,
                    handoff::PAGE_BYTES,
                )
                .map(|(records, last)| {
                    records_read = records.len();
                    acceptor::HandoffPage {
                        resume: records.last().map(|(k, _)| k.clone()).or(after),
                        records,
                        last,
                        skipped: 0,
                    }
                }),
            };
            let Ok(acceptor::HandoffPage {
                records,
                resume: last_key,
                last,
                skipped,
            }) = read
            else {
                self.stats.storage_errors += 1;
                return;
            };
            self.stats.handoff_records_sent += records.len() as u64;
            if departed
                || !self
                    .ring
                    .preference_list(segment, self.settings.n)
                    .contains(&&self.self_node)
            {
                self.stats.handoff_misplaced_records_sent += records.len() as u64;
            }
            self.stats.handoff_records_skipped += skipped;
            read_this_tick = read_this_tick.saturating_add(records_read);
            let bytes = records
                .iter()
                .fold(0usize, |b, (k, v)| b.saturating_add(k.len() + v.len()));
            if let Some(o) = self.handoffs.outgoing.get_mut(&(segment, to.clone())) {
                if page == 0 {
                    o.read_at = Some(self.storage.last_write(segment));
                }
                o.in_flight = Some((now_ms, last_key, last));
                o.in_flight_size = (records.len(), bytes);
            }
            in_flight += 1;
            in_flight_records = in_flight_records.saturating_add(records.len());
            in_flight_bytes = in_flight_bytes.saturating_add(bytes);
            self.held_transmits.push(Transmit {
                to: to.address.clone(),
                to_uid: Some(to.uid),
                lane: Lane::Large,
                message: JournalMessage::Handoff {
                    segment,
                    page,
                    records,
                    last,
                    standing: self.handoffs.standing(segment),
                    needs: if last {
                        self.handoffs.needs_of(segment)
                    } else {
                        Vec::new()
                    },
                },
            });
        }
    }

    pub(super) fn hosting_members(&self, view: &MembershipView) -> Vec<UniqueAddress> {
        view.members
            .values()
            .filter(|m| m.status == MemberStatus::Up)
            .filter(|m| self.settings.role.as_deref().is_none_or(|r| m.has_role(r)))
            .map(|m| m.unique_address.clone())
            .collect()
    }
}
