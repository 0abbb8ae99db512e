//! Holdings told unasked ([`super::holding`]): a node tells a member new to the ring, and a
//! member that left it, what it holds of the segments that member is about to hand it (a
//! new member hands its disk's copy in its first ring; a departed one hands its copies to
//! the segments' replicas before it goes), so that the member leaves that out.
//!
//! Summarizing a segment reads its records, so a ring change that makes a node offer
//! holdings for hundreds of segments would hold its journal for hundreds of milliseconds at
//! once — on every node at the same moment. Offers are therefore summarized a few at a time:
//! at most [`MAX_TICK_SUMMARY_SLOTS`] slots a tick, the rest at the next ticks. Senders in
//! their first ring, and departed ones, hold their first pages back long enough for that
//! ([`super::holding::OFFER_WAIT_MS`]).

use std::collections::BTreeMap;

use super::holding::{self, SegmentHolding};
use super::message::JournalMessage;
use super::JournalMachine;
use crate::address::UniqueAddress;
use crate::kv::storage::KvStorage;
use crate::protocol::{Lane, Transmit};

/// Slots (entries and marks, one record each) a node summarizes for its offers in one
/// tick, about, at most (but at least one segment): about 10 ms of reads on a busy 2-core
/// machine.
pub const MAX_TICK_SUMMARY_SLOTS: usize = 2_048;

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

/// The records a summary read, about: its slots, and one per log (its state record).
fn slots(h: &Option<SegmentHolding>) -> usize {
    match h {
        Some(h) => h
            .logs
            .iter()
            .map(|l| {
                let entries: u64 = l.entries.iter().map(|r| r.count).sum();
                let marks: u64 = l.marks.iter().map(|r| r.count).sum();
                usize::try_from(entries.saturating_add(marks).saturating_add(1))
                    .unwrap_or(usize::MAX)
            })
            .fold(0usize, usize::saturating_add),
        // Too large to send: it read at least this much.
        None => holding::MAX_RUNS,
    }
}

impl<S: KvStorage> JournalMachine<S> {
    /// Tells `to` what this node holds of the segments of `held`, in messages of at most
    /// [`HOLDING_MESSAGE_BYTES`] (one segment's holding is at most [`holding::MAX_BYTES`]),
    /// held until the turn's commit like every answer that says what is on disk: a holding
    /// read from writes of a turn whose commit fails would make a sender leave out what
    /// this node does not hold.
    pub(super) fn send_holdings(&mut self, to: &UniqueAddress, held: Vec<SegmentHolding>) {
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

    /// Sends the offers due ([`super::handoff::Handoffs::holding_offers`], and those of
    /// [`super::handoff::Handoffs::departure_offers`] whose segment this node waits for no
    /// member of the ring in: what it then holds includes what the replicas that stay
    /// handed it; a wait that needs the departed copies themselves tells at once),
    /// summarizing at most [`MAX_TICK_SUMMARY_SLOTS`] slots; the rest stay for the next
    /// tick.
    pub(super) fn send_offers(&mut self) {
        let pending = &self.handoffs.pending;
        let waits = |s: u16| pending.get(&s).is_some_and(|p| !p.from.is_empty());
        // (segment, to, whether it is a departure offer), by segment.
        let mut due: Vec<(u16, UniqueAddress, bool)> = self
            .handoffs
            .holding_offers
            .iter()
            .map(|(s, to)| (*s, to.clone(), false))
            .chain(
                self.handoffs
                    .departure_offers
                    .iter()
                    .filter(|(s, _)| !waits(*s))
                    .map(|(s, to)| (*s, to.clone(), true)),
            )
            .collect();
        if due.is_empty() {
            return;
        }
        due.sort_unstable_by_key(|(s, ..)| *s);
        let mut budget = MAX_TICK_SUMMARY_SLOTS;
        let mut summaries: BTreeMap<u16, Option<SegmentHolding>> = BTreeMap::new();
        let mut offered: BTreeMap<UniqueAddress, Vec<SegmentHolding>> = BTreeMap::new();
        for (s, to, departure) in due {
            if let std::collections::btree_map::Entry::Vacant(e) = summaries.entry(s) {
                if budget == 0 {
                    // The next tick's.
                    continue;
                }
                let Ok(h) = holding::summarize(&mut self.storage, s) else {
                    self.stats.storage_errors += 1;
                    return;
                };
                budget = budget.saturating_sub(slots(&h));
                e.insert(h);
            }
            let key = (s, to);
            if departure {
                self.handoffs.departure_offers.remove(&key);
            } else {
                self.handoffs.holding_offers.remove(&key);
            }
            if let Some(Some(h)) = summaries.get(&s) {
                offered.entry(key.1).or_default().push(h.clone());
            }
        }
        for (to, held) in offered {
            self.send_holdings(&to, held);
        }
    }
}
