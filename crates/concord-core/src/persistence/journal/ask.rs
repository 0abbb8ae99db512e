//! A waiting replica's asks ([`JournalMachine::ask_handoffs`]): `HandoffWanted` to every
//! replica it waits for, with what it holds of those segments ([`super::holding`]) so
//! that they leave that out, and the holdings it offers unasked (to members new to the
//! ring, and to members that left it).
//!
//! **One sender at a time.** A wait usually needs copies from several replicas (a new
//! replica: a majority of the segment's previous ones; a restarted one: its own disk and
//! one more), and they mostly hold the same records. Told the same holding at once, each
//! sends every record the waiting replica lacks — the same records, two or three times
//! over: at each leave of the rolling upgrade, a replica new to a segment took two full
//! copies of it (docs/BENCHMARKS.md, "Rolling upgrade"). So a wait tells its holding to
//! one replica it waits for; the others are asked without it, and each holds its first
//! page back for a holding ([`super::holding::WAIT_MS`]); when the one told delivered
//! its last page, the next is told what this node holds *then* — its copy included — and
//! sends only what that lacks. The next is told after [`NEXT_TELL_MS`] anyway (the one
//! told may be slow, or wait itself before it hands anything over), and replicas that an
//! inherited need awaits again are told at once, as every replica was before. The copies merged are the same as before (a holding only
//! leaves out records whose merge would change nothing), so the waits, standings and
//! needs are unchanged; a replica told late that already began a whole copy leaves out
//! the rest from then on. A replica still not told when the wait ends is told then (it may
//! still be sending).

use std::collections::{BTreeMap, BTreeSet};

use super::holding::SegmentHolding;
use super::message::JournalMessage;
use super::JournalMachine;
use crate::address::UniqueAddress;
use crate::kv::storage::KvStorage;
use crate::protocol::{Lane, Transmit};

/// How long the replica told a waiting node's holding last may take before the next one
/// it waits for is told too, ms: the one told may be slow, or wait itself before it hands
/// anything over (a replica new to the segment too). Below [`super::holding::WAIT_MS`],
/// which the others hold their first page back for.
const NEXT_TELL_MS: u64 = 2_000;

/// Bytes of holdings one `HandoffWanted` carries, about, at most (it fits in a frame of
/// the ordinary lane).
const HOLDING_MESSAGE_BYTES: usize = 128 * 1024;

/// A `HandoffWanted` telling `to` what this node holds of the segments of `held`.
fn holding_message(to: &UniqueAddress, held: Vec<SegmentHolding>) -> Transmit<JournalMessage> {
    Transmit {
        to: to.address.clone(),
        to_uid: Some(to.uid),
        lane: Lane::Ordinary,
        message: JournalMessage::HandoffWanted {
            segments: held.iter().map(|h| h.segment).collect(),
            held,
        },
    }
}

impl<S: KvStorage> JournalMachine<S> {
    /// Asks every replica this node waits for, again (it is called every
    /// [`super::handoff::RESEND_MS`], and at once after a ring change or a last page that
    /// lets the next replica be told), and tells holdings as the module docs say. False
    /// if the storage failed (the tick stops there).
    pub(super) fn ask_handoffs(&mut self, now_ms: u64) -> bool {
        // Told replicas that delivered (or left the wait) are done with.
        let pending = &self.handoffs.pending;
        self.handoffs
            .holding_sent
            .retain(|(s, to)| pending.get(s).is_some_and(|p| p.from.contains(to)));
        // Ask every replica this node waits for, again and again until it delivered: its
        // view of the ring may have changed differently. Each segment's holding goes to
        // one of them at a time.
        let mut wanted: BTreeMap<UniqueAddress, Vec<u16>> = BTreeMap::new();
        let mut tell: BTreeSet<(u16, UniqueAddress)> = BTreeSet::new();
        let told_ms = &mut self.handoffs.holding_told_ms;
        told_ms.retain(|s, _| pending.contains_key(s));
        for (s, p) in &self.handoffs.pending {
            let me = &self.self_node;
            let from: Vec<&UniqueAddress> = p.from.iter().filter(|f| *f != me).collect();
            // Also those an inherited need still waits for (told at once: they delivered
            // a copy before).
            let missing: Vec<&UniqueAddress> = self
                .ring
                .members()
                .iter()
                .filter(|m| *m != me && !p.from.contains(m) && p.awaits(&m.address))
                .collect();
            for f in from.iter().chain(&missing) {
                wanted.entry((*f).clone()).or_default().push(*s);
            }
            for f in missing {
                tell.insert((*s, f.clone()));
            }
            // The next replica waited for is told once none told is still sending, or
            // once the last one told has had NEXT_TELL_MS (it may itself wait).
            let sent = &self.handoffs.holding_sent;
            let sending = from.iter().any(|f| sent.contains(&(*s, (*f).clone())));
            let due = told_ms
                .get(s)
                .is_none_or(|t| now_ms >= t.saturating_add(NEXT_TELL_MS));
            if !sending || due {
                if let Some(next) = from.iter().find(|f| !sent.contains(&(*s, (**f).clone()))) {
                    tell.insert((*s, (*next).clone()));
                    told_ms.insert(*s, now_ms);
                }
            }
        }
        // Holdings offered to members new to the ring (they hand this node their disks'
        // copies), once; and to members that left the ring (they hand this node their
        // copies before they go), once this node waits there for no member of the ring:
        // what it then holds includes what the replicas that stay handed it. (A wait that
        // needs the departed copies themselves is told at once.) Offers are told at once.
        let mut offered: BTreeMap<UniqueAddress, Vec<u16>> = BTreeMap::new();
        for (s, to) in std::mem::take(&mut self.handoffs.holding_offers) {
            tell.insert((s, to.clone()));
            offered.entry(to).or_default().push(s);
        }
        let departure_offers = std::mem::take(&mut self.handoffs.departure_offers);
        for (s, to) in departure_offers {
            if pending.get(&s).is_some_and(|p| !p.from.is_empty()) {
                self.handoffs.departure_offers.insert((s, to));
            } else {
                tell.insert((s, to.clone()));
                offered.entry(to).or_default().push(s);
            }
        }
        for (to, segments) in offered {
            let w = wanted.entry(to).or_default();
            w.extend(segments);
            w.sort_unstable();
            w.dedup();
        }
        // Replicas asked without the holding and not asked any more (their wait ended,
        // or they left it without delivering): told now, without asking again. Those
        // asked again are told, or deferred again, below.
        let mut late: BTreeMap<UniqueAddress, Vec<u16>> = BTreeMap::new();
        for (s, to) in std::mem::take(&mut self.handoffs.holding_deferred) {
            if !wanted.get(&to).is_some_and(|w| w.contains(&s)) {
                late.entry(to).or_default().push(s);
            }
        }
        let mut summaries: BTreeMap<u16, Option<SegmentHolding>> = BTreeMap::new();
        for (to, segments) in &wanted {
            let mut held = Vec::new();
            for &s in segments {
                if self.handoffs.holding_sent.contains(&(s, to.clone())) {
                    continue;
                }
                if !tell.contains(&(s, to.clone())) {
                    self.handoffs.holding_deferred.insert((s, to.clone()));
                    continue;
                }
                let Some(summary) = self.summary(&mut summaries, s) else {
                    return false;
                };
                if let Some(h) = summary {
                    self.handoffs.holding_sent.insert((s, to.clone()));
                    held.push(h);
                }
            }
            self.out.transmits.push_back(Transmit {
                to: to.address.clone(),
                to_uid: Some(to.uid),
                lane: Lane::Ordinary,
                message: JournalMessage::HandoffWanted {
                    segments: segments.clone(),
                    held: Vec::new(),
                },
            });
            self.tell_holdings(to, held);
        }
        for (to, segments) in late {
            let mut held = Vec::new();
            for s in segments {
                let Some(summary) = self.summary(&mut summaries, s) else {
                    return false;
                };
                held.extend(summary);
            }
            self.tell_holdings(&to, held);
        }
        true
    }

    /// This node's holding of segment `s` (from memory once read: `LiveHoldings`), read
    /// once per ask; `None` if the storage failed (counted).
    fn summary(
        &mut self,
        summaries: &mut BTreeMap<u16, Option<SegmentHolding>>,
        s: u16,
    ) -> Option<Option<SegmentHolding>> {
        if let Some(h) = summaries.get(&s) {
            return Some(h.clone());
        }
        match self.storage.holding(s) {
            Ok(h) => {
                summaries.insert(s, h.clone());
                Some(h)
            }
            Err(_) => {
                self.stats.storage_errors += 1;
                None
            }
        }
    }

    /// Tells `to` the holdings `held`, in messages of at most [`HOLDING_MESSAGE_BYTES`]
    /// (one segment's holding is at most `holding::MAX_BYTES`), held until the turn's
    /// commit like every answer that says what is on disk: a holding read from writes of a
    /// turn whose commit fails would make a sender leave out what this node does not hold.
    fn tell_holdings(&mut self, to: &UniqueAddress, held: Vec<SegmentHolding>) {
        let mut batch: Vec<SegmentHolding> = Vec::new();
        let mut bytes = 0usize;
        for h in held {
            if !batch.is_empty() && bytes.saturating_add(h.size()) > HOLDING_MESSAGE_BYTES {
                self.held_transmits
                    .push(holding_message(to, std::mem::take(&mut batch)));
                bytes = 0;
            }
            bytes = bytes.saturating_add(h.size());
            batch.push(h);
        }
        if !batch.is_empty() {
            self.held_transmits.push(holding_message(to, batch));
        }
    }
}
