//! Ring changes: when a node becomes a replica of a segment, every other replica of it —
//! before and after the change, and whoever would hold it without that node — sends it
//! the segment's records, and the new replica answers no proposer about that segment
//! until each of those still in the ring has sent its last page (Riak's ownership
//! handoff; the pending rule of the key-value store). Records merge safely in any order
//! (`acceptor::merge_record`), so a duplicated or repeated page changes nothing.
//!
//! A node compares replicas by incarnation: a node that restarted is a new replica and is
//! brought up to date the same way.
//!
//! A previous replica's copy counts towards a majority only if it is complete
//! ([`super::standing`], which its last page states); incomplete copies count only once
//! every previous replica delivered.

use std::collections::{BTreeMap, BTreeSet};

use super::holding::SegmentHolding;
use super::standing::{Marks, Standing};
use super::wait::same_replicas;
pub use super::wait::{
    catches_up, fold, meets_every_majority, Need, Pending, MAX_NEEDS, MAX_NEED_ADDRESSES,
    MAX_PAGE_NEED_ADDRESSES, MAX_STORED_NEED_ADDRESSES,
};
use crate::address::{Address, UniqueAddress};
use crate::kv::ring::{Ring, SEGMENTS};

/// Records in one handoff page, at most.
pub const PAGE_RECORDS: usize = 256;
/// Bytes of keys and values in one handoff page, at most (but at least one record), so
/// that a page fits in one frame of the large lane (2 MiB by default) whenever its
/// records do one by one.
pub const PAGE_BYTES: usize = 1 << 20;
/// A page not acknowledged within this is sent again, ms.
pub const RESEND_MS: u64 = 2_000;
/// Pages in flight from one node at once, at most.
pub const MAX_IN_FLIGHT: usize = 128;
/// Records in the pages in flight from one node at once, at most (but at least one page):
/// 32 full pages. Pages that left out what the new replica holds ([`super::holding`]) are
/// small, so up to [`MAX_IN_FLIGHT`] of those go at once.
pub const MAX_IN_FLIGHT_RECORDS: usize = 32 * PAGE_RECORDS;
/// Bytes of keys and values in the pages in flight from one node at once, at most (but at
/// least one page): 32 full pages.
pub const MAX_IN_FLIGHT_BYTES: usize = 32 * PAGE_BYTES;
/// Records a node reads for its handoff pages in one tick, at most (but at least one
/// page): those of 128 full pages, so that a tick of pages that leave most out stays as
/// short as one of 32 full pages with their reads left out.
pub const MAX_TICK_RECORDS: usize = 128 * PAGE_RECORDS;
/// Runs and logs of the new replicas' holdings ([`super::holding`]) a node keeps in all,
/// at most (about 32 MiB); holdings beyond are ignored and their segments sent whole.
pub const MAX_STORED_HOLDING_RUNS: usize = 1 << 20;

/// (segment, replica) pairs [`Handoffs::misplaced_delivered`] keeps, at most (beyond:
/// forgotten, and sent again after a ring change, as before).
pub const MAX_DELIVERED: usize = 1 << 16;

/// One segment on its way to one new replica.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// The page to send next (or in flight).
    pub page: u32,
    /// The last key of the pages acknowledged.
    pub after: Option<Vec<u8>>,
    /// The page in flight: when it was sent, the key its next page starts after, whether
    /// it is the last.
    pub in_flight: Option<(u64, Option<Vec<u8>>, bool)>,
    /// Records, and bytes of their keys and values, of the page in flight.
    pub in_flight_size: (usize, usize),
    /// What the new replica holds of the segment already, as it said
    /// ([`super::holding`]): records it would not change are left out.
    pub holding: Option<SegmentHolding>,
    /// When this node first could have sent the first page, ms: it waits up to
    /// [`super::holding::WAIT_MS`] from then for the new replica's holding.
    pub ready_ms: Option<u64>,
    /// The segment's last write here ([`super::segment_writes`]) when its first page was
    /// last read: if it is the same when the last page is acknowledged, the new replica
    /// holds everything this node's copy holds ([`Handoffs::misplaced_delivered`]).
    pub read_at: Option<u64>,
}

/// Adds `needs` to what this node's copy of `segment` owes (each once; beyond
/// [`MAX_NEEDS`] folded, [`fold`]); true if that changed.
fn owe(owed: &mut BTreeMap<u16, Vec<Need>>, segment: u16, needs: Vec<Need>) -> bool {
    let o = owed.entry(segment).or_default();
    let before = o.clone();
    for need in needs {
        if !o.contains(&need) {
            o.push(need);
        }
    }
    *o = fold(std::mem::take(o));
    *o != before
}

/// This node's handoffs; see the module docs.
#[derive(Debug, Default)]
pub struct Handoffs {
    /// Segment → what this node waits for before it answers there.
    pub pending: BTreeMap<u16, Pending>,
    /// (segment, new replica) → what is sent.
    pub outgoing: BTreeMap<(u16, UniqueAddress), Outgoing>,
    /// When to ask the replicas waited for again, ms.
    pub next_ask_ms: u64,
    /// When to look for segments held here that this node does not replicate, ms.
    pub next_misplaced_ms: u64,
    /// (segment, replica) pairs those were sent to since the last ring change.
    pub misplaced_sent: BTreeSet<(u16, UniqueAddress)>,
    /// (segment, replica) → the segment's last write here ([`super::segment_writes`]) when
    /// this node's copy went to that replica whole (every page acknowledged, no write in
    /// between): while the number stays, [`Handoffs::send_misplaced`] does not send it
    /// there again after the next ring change. Kept across ring changes for members only,
    /// at most [`MAX_DELIVERED`] pairs.
    pub misplaced_delivered: BTreeMap<(u16, UniqueAddress), u64>,
    /// (segment, replica waited for) pairs this node sent its holding of the segment to
    /// in its current wait ([`super::holding`]; once per wait).
    pub holding_sent: BTreeSet<(u16, UniqueAddress)>,
    /// (segment, replica waited for) pairs asked without this node's holding: the
    /// replicas a wait asks are told it one at a time — the next once the one told before
    /// delivered, or after 2 s — so that the first sends what this node lacks and the
    /// next only what it still lacks then (`super::ask`). Those still not told when the
    /// wait ends are told then (they may still be sending).
    pub holding_deferred: BTreeSet<(u16, UniqueAddress)>,
    /// Segment → when the last replica its wait asks was told this node's holding, ms.
    pub holding_told_ms: BTreeMap<u16, u64>,
    /// (segment, member new to the ring) pairs this node tells what it holds of the
    /// segment at its next ask, unasked: the new member hands it its disk's copy.
    pub holding_offers: BTreeSet<(u16, UniqueAddress)>,
    /// (segment, replica that left the segment's preference list) pairs this node tells
    /// what it holds of the segment, unasked, once it no longer waits there: the departed
    /// replica hands its copy to the segment's replicas ([`Handoffs::send_misplaced`]) —
    /// before it goes, if it left the ring; after every ring change, if it stays a member
    /// (until 2026-12-08 only those that left the ring were told, and a member that left a
    /// list sent the list's replicas whole copies they held already).
    pub departure_offers: BTreeSet<(u16, UniqueAddress)>,
    /// This incarnation has been in a ring (its pending segments since are not its
    /// first ring's).
    pub was_member: bool,
    /// This node's marks per segment, as on disk ([`super::standing`]).
    pub marks: Marks,
    /// The marks changed since they were last stored.
    pub marks_dirty: bool,
    /// The last ring this node was a complete replica in before it started, as its disk
    /// says ([`super::last_ring`]): its replicas count among a segment's previous replicas
    /// in this node's first ring.
    pub last_ring: Option<Ring>,
    /// The ring changed since it was last stored (it is stored once no segment waits).
    pub ring_unsaved: bool,
    /// The last ring with members this incarnation saw.
    pub last_seen: Option<Ring>,
    /// Segment → the unmet needs of a wait this node gave up when it left the segment's
    /// list, or — read from disk after a restart — of the wait it was in (its copy is
    /// incomplete; its last pages carry them), until it completes there; a wait that
    /// begins there takes them over as its debts ([`Pending::debts`]). On disk with the
    /// waits' own needs: [`Handoffs::needs_on_disk`], [`super::owed`].
    pub owed: BTreeMap<u16, Vec<Need>>,
    /// What the disk keeps of the needs ([`Handoffs::needs_on_disk`]) may have changed
    /// since it was last stored, for any segment (a ring change, a give-up).
    pub owed_dirty: bool,
    /// Segments whose needs on disk may have changed since they were last stored (a last
    /// page arrived, a wait ended): only those are computed again.
    pub owed_dirty_segments: BTreeSet<u16>,
    /// The needs on disk as of the last commit ([`super::owed`]).
    pub owed_on_disk: BTreeMap<u16, Vec<Need>>,
    /// Addresses the operator gave up as lost for good ([`super::give_up`]): no wait
    /// counts them, until a node of that address is in the ring again.
    pub given_up: BTreeSet<Address>,
    /// `given_up` changed since it was last stored ([`super::give_up::store`]).
    pub given_up_dirty: bool,
}

impl Handoffs {
    /// True if this node does not answer about `segment` yet.
    pub fn is_pending(&self, segment: u16) -> bool {
        self.pending.get(&segment).is_some_and(|p| !p.answers)
    }

    /// True if this node waits for copies of `segment` (answering meanwhile or not).
    pub fn is_waiting(&self, segment: u16) -> bool {
        self.pending.contains_key(&segment)
    }

    /// True if this node must not hand `segment` over yet: it became a replica of it in a
    /// ring change and waits for it, so what it holds may lack writes that others must not
    /// miss. (In its first ring it hands over what its disk holds; a replica that stays
    /// hands over its copy as it stood before the change.)
    pub fn holds_back(&self, segment: u16) -> bool {
        self.pending
            .get(&segment)
            .is_some_and(|p| !p.first_ring && !p.staying)
    }

    /// True if this node's copy of `segment` may lack writes chosen before: it waits for it
    /// after a ring change.
    pub fn is_incomplete(&self, segment: u16) -> bool {
        self.pending.get(&segment).is_some_and(|p| !p.first_ring)
    }

    /// Where this node stands for `segment`, as its handoff pages say.
    pub fn standing(&self, segment: u16) -> Standing {
        if self.is_incomplete(segment) {
            Standing::Incomplete
        } else {
            self.marks.standing(segment)
        }
    }

    pub(super) fn completed(&mut self, segment: u16) {
        if self.owed.remove(&segment).is_some() {
            self.owed_dirty_segments.insert(segment);
        }
        self.marks_dirty |= self.marks.completed(segment);
    }

    /// What a last page of `segment` from this node carries: the unmet needs of its
    /// incomplete copy (none if complete), at most [`MAX_NEEDS`] with at most
    /// [`MAX_PAGE_NEED_ADDRESSES`] addresses in all, those beyond folded ([`fold`]).
    pub fn needs_of(&self, segment: u16) -> Vec<Need> {
        if self.standing(segment) == Standing::Complete {
            return Vec::new();
        }
        let mut needs = match self.pending.get(&segment) {
            Some(p) => p.unmet_needs(),
            None => Vec::new(),
        };
        for n in self.owed.get(&segment).into_iter().flatten() {
            if !needs.contains(n) {
                needs.push(n.clone());
            }
        }
        fold(needs)
    }

    /// The needs this node's disk keeps ([`super::owed`]): for every segment where its copy
    /// is incomplete, what its last pages carry ([`Handoffs::needs_of`]: its wait's unmet
    /// needs and those owed); where it is complete, those owed as they stand.
    ///
    /// Its own wait is among them from the turn it begins, before any page of that turn
    /// leaves: a node restarted before that wait ended inherits it, and so waits for the
    /// replicas that held the segment even when its first ring after the restart holds
    /// none of them and no ring of its own is on disk ([`super::last_ring`] is stored only
    /// once nothing waits) — for instance when every member it sees is as new as it is,
    /// their copies as empty as its own.
    pub fn needs_on_disk(&self) -> BTreeMap<u16, Vec<Need>> {
        let segments: BTreeSet<u16> = self
            .owed
            .keys()
            .chain(self.pending.keys())
            .copied()
            .collect();
        self.needs_on_disk_of(segments)
    }

    /// [`Handoffs::needs_on_disk`] for `segments` only (those with none left out).
    pub fn needs_on_disk_of(
        &self,
        segments: impl IntoIterator<Item = u16>,
    ) -> BTreeMap<u16, Vec<Need>> {
        segments
            .into_iter()
            .filter_map(|s| {
                let needs = if self.standing(s) == Standing::Incomplete {
                    self.needs_of(s)
                } else {
                    self.owed.get(&s).cloned().unwrap_or_default()
                };
                (!needs.is_empty()).then_some((s, needs))
            })
            .collect()
    }

    /// Recomputes pending segments and handoffs after the ring went from `old` to `new`.
    ///
    /// A new replica waits for every replica involved that is still in the ring, and for
    /// a majority of the segment's previous replicas: if a majority of them left the ring
    /// at once (two of three nodes crashed, or were downed on the other side of a
    /// partition), the segment stays unavailable until enough of them come back with their
    /// disks — rather than answering without writes only they hold.
    ///
    /// A ring that emptied in between (every member left this node's view: a node that was
    /// still joining when the others were downed) is no break: the change counts from the
    /// last ring this incarnation saw, whose replicas hold the records.
    pub fn ring_changed(&mut self, old: &Ring, new: &Ring, me: &UniqueAddress, n: u8, vnodes: u32) {
        let seen = if new.members().is_empty() {
            None
        } else {
            self.last_seen.replace(new.clone())
        };
        let old = match &seen {
            Some(seen) if old.members().is_empty() => seen,
            _ => old,
        };
        let members: BTreeSet<&UniqueAddress> = new.members().iter().collect();
        let remembered = self.given_up.len();
        self.given_up
            .retain(|a| !members.iter().any(|m| m.address == *a));
        self.given_up_dirty |= self.given_up.len() != remembered;
        let (owed, owed_dirty) = (&mut self.owed, &mut self.owed_dirty);
        let mut done = Vec::new();
        self.pending.retain(|s, p| {
            p.from.retain(|a| members.contains(a));
            if p.done() {
                // All it still awaited was a replica's last page that left the ring: its
                // copy is complete (counted so by the wait this change may start).
                done.push(*s);
                return false;
            }
            let new_l = new.preference_list(*s, n);
            if new_l.contains(&me) {
                // Its list changes again before it caught up: the arithmetic that let it
                // answer meanwhile was for the earlier change only.
                if p.answers && !same_replicas(&old.preference_list(*s, n), &new_l) {
                    p.answers = false;
                }
                return true;
            }
            // It leaves the list still waiting: its copy owes what it waited for.
            *owed_dirty |= owe(owed, *s, p.unmet_needs());
            false
        });
        for s in done {
            self.completed(s);
        }
        self.outgoing.retain(|(_, to), _| members.contains(to));
        self.holding_offers.retain(|(_, to)| members.contains(to));
        self.holding_deferred.retain(|(_, to)| members.contains(to));
        // Those back in the segment's list, or whose segment this node no longer
        // replicates, are no longer owed.
        self.departure_offers.retain(|(s, to)| {
            let l = new.preference_list(*s, n);
            !l.contains(&to) && l.contains(&me)
        });
        self.misplaced_sent.clear();
        self.misplaced_delivered
            .retain(|(_, to), _| members.contains(to));
        self.next_misplaced_ms = 0;
        let first_ring = !self.was_member;
        if new.members().contains(me) {
            self.was_member = true;
        }
        let mut without: BTreeMap<UniqueAddress, Ring> = BTreeMap::new();
        // Members new to the ring hand this node what their disks hold of the segments
        // they share with it (their first ring: see below); it tells them what it holds
        // there, so that they leave that out ([`super::holding`]).
        let joined: Vec<&UniqueAddress> = if first_ring {
            Vec::new()
        } else {
            new.members()
                .iter()
                .filter(|m| *m != me && !old.members().contains(m))
                .collect()
        };
        let without_me = (!joined.is_empty())
            .then(|| Ring::new(new.members().iter().filter(|m| *m != me).cloned(), vnodes));
        for s in 0..SEGMENTS {
            let old_l = old.preference_list(s, n);
            let new_l = new.preference_list(s, n);
            if let Some(rest) = &without_me {
                if new_l.contains(&me) {
                    let rest_l = rest.preference_list(s, n);
                    for x in &joined {
                        if new_l.contains(x) || rest_l.contains(x) {
                            self.holding_offers.insert((s, (*x).clone()));
                        }
                    }
                }
            }
            // Replicas that left the list (and the ring, or not) hand this node their
            // copies (`send_misplaced`); it tells them what it holds there.
            if new_l.contains(&me) {
                for x in old_l.iter().filter(|x| **x != me && !new_l.contains(x)) {
                    self.departure_offers.insert((s, (*x).clone()));
                }
            }
            // A replica that stays, in a segment that lost a majority of its replicas at
            // once, cannot answer for it alone either: it waits for them too. In a list that
            // shrank, it waits for the copies of the others that stay, answering meanwhile
            // where that is safe ([`catches_up`]).
            let staying = old_l.iter().filter(|a| members.contains(*a)).count();
            let lost_majority = staying < old_l.len() / 2 + 1;
            let shrank = catches_up(&old_l, &new_l);
            if old_l.contains(&me)
                && new_l.contains(&me)
                && (lost_majority || shrank.is_some())
                && !self.pending.contains_key(&s)
            {
                let previous: BTreeSet<Address> = old_l.iter().map(|a| a.address.clone()).collect();
                let mut p = Pending {
                    from: old_l
                        .iter()
                        .filter(|a| *a != &me && members.contains(*a))
                        .map(|a| (*a).clone())
                        .collect(),
                    required: meets_every_majority(previous.len()),
                    previous,
                    first_ring: false,
                    staying: true,
                    answers: !lost_majority && shrank == Some(true),
                    ..Pending::default()
                };
                // Its copy stands for the old list, but lacks what only the departed held:
                // incomplete for anyone who counts it after this change, until it is done.
                p.count(&me.address, self.standing(s));
                if let Some(o) = self.owed.remove(&s) {
                    p.owe(&me.address, &o);
                    self.owed_dirty = true;
                }
                p.forget(&self.given_up);
                // Met at once only by its own complete copy of a list of two (it stays, the
                // other left): every write chosen there needed both, and every write chosen
                // before was on both once they caught up — nothing to wait for.
                if !p.done() {
                    // Owed from now on, and on disk: its pages carry this need (which names
                    // its own copy delivered: complete for the old list) even once the
                    // wait's own need is met while it still waits for a last page — the
                    // receiver credits its copy by it — and after a restart its copy,
                    // marked incomplete, still says so.
                    self.owed_dirty |= owe(&mut self.owed, s, p.unmet_needs());
                    self.pending.insert(s, p);
                    self.marks_dirty |= self.marks.joined(s);
                }
            }
            // A replica that leaves a list that shrank, or that was short of `n` (it shrank
            // before, and those left may still catch up from one another), hands its copy
            // to the replicas that stay: their waits may count on it, and it is the last
            // chance (a node that leaves the cluster waits for this before it goes).
            if old_l.contains(&me)
                && !new_l.contains(&me)
                && (new_l.len() < old_l.len() || old_l.len() < usize::from(n))
            {
                for r in new_l.iter().filter(|r| old_l.contains(r)) {
                    self.outgoing.entry((s, (*r).clone())).or_default();
                }
            }
            for x in new_l.iter().filter(|x| !old_l.contains(x)) {
                let x: &UniqueAddress = x;
                let rest = without.entry(x.clone()).or_insert_with(|| {
                    Ring::new(new.members().iter().filter(|m| *m != x).cloned(), vnodes)
                });
                let rest_l = rest.preference_list(s, n);
                let involved = |a: &UniqueAddress| {
                    old_l.contains(&a) || new_l.contains(&a) || rest_l.contains(&a)
                };
                if x == me {
                    let from: BTreeSet<UniqueAddress> = new
                        .members()
                        .iter()
                        .filter(|a| *a != me && involved(a))
                        .cloned()
                        .collect();
                    let reference = if old_l.is_empty() { &rest_l } else { &old_l };
                    let mut previous: BTreeSet<Address> =
                        reference.iter().map(|a| a.address.clone()).collect();
                    if first_ring {
                        // Who replicated it before this node stopped, as its disk says.
                        if let Some(last) = &self.last_ring {
                            let last_l = last.preference_list(s, n);
                            previous.extend(last_l.iter().map(|a| a.address.clone()));
                        }
                    }
                    let mut p = Pending {
                        from,
                        required: meets_every_majority(previous.len()),
                        previous,
                        first_ring,
                        ..Pending::default()
                    };
                    // A restarted node's own disk, by address.
                    p.count(&me.address, self.marks.standing(s));
                    if let Some(o) = self.owed.remove(&s) {
                        p.owe(&me.address, &o);
                        self.owed_dirty = true;
                    }
                    p.forget(&self.given_up);
                    if !p.done() {
                        // A new replica lacks what was chosen before it came (a
                        // restarted one's disk says what it held).
                        if !first_ring {
                            self.marks_dirty |= self.marks.joined(s);
                        }
                        // An earlier wait (its previous replicas) still stands.
                        match self.pending.get_mut(&s) {
                            Some(q) => {
                                q.from.extend(p.from);
                                q.owe(&me.address, &p.debts);
                            }
                            None => {
                                self.pending.insert(s, p);
                            }
                        }
                    }
                } else if involved(me) {
                    // From the first page again; what the new replica said it holds (it
                    // may have asked before this node saw the change) still holds.
                    let o = self.outgoing.entry((s, x.clone())).or_default();
                    *o = Outgoing {
                        holding: o.holding.take(),
                        ..Outgoing::default()
                    };
                }
            }
            if new_l.contains(&me) && !self.pending.contains_key(&s) {
                self.completed(s);
            }
        }
        // The waits this change began, ended or changed go to disk with its commit.
        self.owed_dirty = true;
        // Ask at once (with what this node holds), so that its senders can leave that out.
        self.next_ask_ms = 0;
    }

    /// `from` sent the last page of `segment`, standing so, its copy owing `needs`.
    pub fn received_last(
        &mut self,
        segment: u16,
        from: &UniqueAddress,
        standing: Standing,
        needs: &[Need],
    ) {
        // It delivered: it needs no holding any more. The next replica waited for is
        // told what this node now holds, at once.
        self.holding_deferred.remove(&(segment, from.clone()));
        if self.holding_deferred.iter().any(|(s, _)| *s == segment) {
            self.next_ask_ms = 0;
        }
        if let Some(p) = self.pending.get_mut(&segment) {
            self.owed_dirty_segments.insert(segment);
            p.from.remove(from);
            p.count(&from.address, standing);
            p.inherit(&from.address, needs);
            p.forget(&self.given_up);
            if p.done() {
                self.pending.remove(&segment);
                self.completed(segment);
            }
        }
    }

    /// Keeps what `from` says it holds of some segments ([`super::holding`]) for the
    /// handoffs to it (made if missing); the number ignored: malformed, or beyond
    /// [`MAX_STORED_HOLDING_RUNS`] kept in all (those segments go whole).
    pub fn take_holdings(&mut self, from: &UniqueAddress, held: Vec<SegmentHolding>) -> u64 {
        let cost = |h: &SegmentHolding| h.runs().saturating_add(h.logs.len());
        let mut stored: usize = self
            .outgoing
            .values()
            .filter_map(|o| o.holding.as_ref())
            .map(cost)
            .sum();
        let mut ignored = 0;
        for h in held {
            if h.segment >= SEGMENTS
                || !h.is_valid()
                || stored.saturating_add(cost(&h)) > MAX_STORED_HOLDING_RUNS
            {
                ignored += 1;
                continue;
            }
            stored = stored.saturating_add(cost(&h));
            let o = self.outgoing.entry((h.segment, from.clone())).or_default();
            if let Some(old) = o.holding.replace(h) {
                stored = stored.saturating_sub(cost(&old));
            }
        }
        ignored
    }

    /// `to` acknowledged page `page` of `segment`; the handoff, removed, if that was its
    /// last page.
    pub fn acknowledged(
        &mut self,
        segment: u16,
        to: &UniqueAddress,
        page: u32,
    ) -> Option<Outgoing> {
        let key = (segment, to.clone());
        let o = self.outgoing.get_mut(&key)?;
        if o.page != page {
            return None;
        }
        if let Some((_, last_key, last)) = o.in_flight.take() {
            if last {
                return self.outgoing.remove(&key);
            }
            o.after = last_key;
            o.page = o.page.saturating_add(1);
        }
        None
    }
}

#[cfg(test)]
#[path = "handoff_tests.rs"]
mod tests;
