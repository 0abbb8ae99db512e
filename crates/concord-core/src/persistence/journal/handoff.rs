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

use super::standing::{Marks, Standing};
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
/// Pages in flight from one node at once.
pub const MAX_IN_FLIGHT: usize = 32;

/// One segment on its way to one new replica.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// The page to send next (or in flight).
    pub page: u32,
    /// The last key of the pages acknowledged.
    pub after: Option<Vec<u8>>,
    /// The page in flight: when it was sent, its last key, whether it is the last.
    pub in_flight: Option<(u64, Option<Vec<u8>>, bool)>,
}

/// Of `n` replicas, how many a set must hold to share one with every majority of them:
/// `n − (n / 2 + 1) + 1`, i.e. ⌈n / 2⌉ (0 of 0, 1 of 1 or 2, 2 of 3).
pub fn meets_every_majority(n: usize) -> usize {
    n - n / 2
}

/// Needs one last page may carry, at most (more: the page is refused as bad input); the
/// addresses in one need's sets, at most.
pub const MAX_NEEDS: usize = 64;

/// A wait an incomplete copy still owes: of the segment's `previous` replicas (by
/// address), `required` must have delivered complete copies, or every one of them a copy;
/// `delivered` and `partial` already delivered to the copy's holder (complete, and maybe
/// incomplete). A last page of an incomplete copy carries its holder's unmet needs, and
/// the new replica that merges it takes them over: what the copy lacks must still come
/// from there (simulator seeds 3647 and 3810: a replica that left a segment's list while
/// it still waited for the replicas holding the last writes handed its copy on, and the
/// next replica counted it as if nothing were missing).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Need {
    /// The replicas whose copies were awaited (addresses).
    pub previous: BTreeSet<Address>,
    /// How many of them must deliver complete copies.
    pub required: usize,
    /// Those that delivered complete copies.
    pub delivered: BTreeSet<Address>,
    /// Those that delivered copies that may be incomplete.
    pub partial: BTreeSet<Address>,
}

impl Need {
    /// Met, counting also the copies `received` by the node that holds the need now.
    pub fn met(&self, received: &BTreeMap<Address, Standing>) -> bool {
        let complete = |a: &&Address| {
            self.delivered.contains(*a) || received.get(*a) == Some(&Standing::Complete)
        };
        self.previous.iter().filter(complete).count() >= self.required
            || self.previous.iter().all(|a| {
                self.delivered.contains(a) || self.partial.contains(a) || received.contains_key(a)
            })
    }

    /// Within the bounds a page may carry ([`MAX_NEEDS`] addresses per set, `required` at
    /// most the previous replicas).
    pub fn is_bounded(&self) -> bool {
        self.previous.len() <= MAX_NEEDS
            && self.delivered.len() <= MAX_NEEDS
            && self.partial.len() <= MAX_NEEDS
            && self.required <= self.previous.len()
    }
}

/// A segment this node became a replica of and does not answer about yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// Replicas in the ring whose last page it waits for.
    pub from: BTreeSet<UniqueAddress>,
    /// The addresses of the segment's previous replicas (by address: a restarted node
    /// brings its disk back).
    pub previous: BTreeSet<Address>,
    /// Those of them that delivered a complete copy (this node's own disk counts if it is
    /// one).
    pub delivered: BTreeSet<Address>,
    /// Those of them that delivered a copy that may be incomplete.
    pub partial: BTreeSet<Address>,
    /// How many of them must have delivered: enough to meet every majority of them
    /// ([`meets_every_majority`]), so that every write chosen before is among what this
    /// node merged.
    pub required: usize,
    /// Pending since this node's first ring (it just started: what its disk holds is all
    /// it knows, and it hands that over while it waits); otherwise it hands nothing over
    /// until it is complete itself.
    pub first_ring: bool,
    /// Every copy received (this node's own included), by address, standing so.
    pub received: BTreeMap<Address, Standing>,
    /// Needs taken over from incomplete copies merged here ([`Need`]); each must be met too.
    pub inherited: Vec<Need>,
}

impl Pending {
    /// Everything awaited arrived: enough complete copies to meet every majority of the
    /// previous replicas, or every previous replica's copy, complete or not (then this
    /// node holds everything any of them holds).
    /// Every need taken over from an incomplete copy must be met as well.
    pub fn done(&self) -> bool {
        self.from.is_empty()
            && (self.delivered.len() >= self.required
                || self
                    .previous
                    .iter()
                    .all(|a| self.delivered.contains(a) || self.partial.contains(a)))
            && self.inherited.iter().all(|n| n.met(&self.received))
    }

    /// This wait's own need and the unmet needs it took over.
    pub fn unmet_needs(&self) -> Vec<Need> {
        let own = Need {
            previous: self.previous.clone(),
            required: self.required,
            delivered: self.delivered.clone(),
            partial: self.partial.clone(),
        };
        let mut needs: Vec<Need> = Vec::new();
        if !own.met(&BTreeMap::new()) {
            needs.push(own);
        }
        for n in &self.inherited {
            if !n.met(&self.received) {
                needs.push(Need {
                    delivered: with_received(&n.delivered, &n.previous, &self.received, true),
                    partial: with_received(&n.partial, &n.previous, &self.received, false),
                    ..n.clone()
                });
            }
        }
        needs
    }

    /// Takes over `needs` (from an incomplete copy merged here), each once.
    fn inherit(&mut self, needs: &[Need]) {
        for n in needs {
            if !n.met(&self.received) && !self.inherited.contains(n) {
                self.inherited.push(n.clone());
            }
        }
    }

    /// Counts `from`'s copy by where it stands.
    fn count(&mut self, from: &Address, standing: Standing) {
        let had = self.received.get(from).copied();
        if had != Some(Standing::Complete) {
            self.received.insert(from.clone(), standing);
        }
        if !self.previous.contains(from) {
            return;
        }
        match standing {
            Standing::Complete => self.delivered.insert(from.clone()),
            Standing::Incomplete => self.partial.insert(from.clone()),
        };
    }
}

/// `set` with the members of `previous` that `received` holds (complete ones only if
/// `complete`, else every one not complete).
fn with_received(
    set: &BTreeSet<Address>,
    previous: &BTreeSet<Address>,
    received: &BTreeMap<Address, Standing>,
    complete: bool,
) -> BTreeSet<Address> {
    let mut out = set.clone();
    for a in previous {
        match received.get(a) {
            Some(Standing::Complete) if complete => {
                out.insert(a.clone());
            }
            Some(Standing::Incomplete) if !complete => {
                out.insert(a.clone());
            }
            _ => {}
        }
    }
    out
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
    /// list (its copy is incomplete; its last pages carry them), until it completes there.
    pub owed: BTreeMap<u16, Vec<Need>>,
}

impl Handoffs {
    /// True if this node does not answer about `segment` yet.
    pub fn is_pending(&self, segment: u16) -> bool {
        self.pending.contains_key(&segment)
    }

    /// True if this node must not hand `segment` over yet: it waits for it after a ring
    /// change, so what it holds may lack writes that others must not miss.
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

    fn completed(&mut self, segment: u16) {
        self.owed.remove(&segment);
        self.marks_dirty |= self.marks.completed(segment);
    }

    /// What a last page of `segment` from this node carries: the unmet needs of its
    /// incomplete copy (none if complete).
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
        needs.truncate(MAX_NEEDS);
        needs
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
        let owed = &mut self.owed;
        self.pending.retain(|s, p| {
            p.from.retain(|a| members.contains(a));
            if p.done() {
                return false;
            }
            if new.preference_list(*s, n).contains(&me) {
                return true;
            }
            // It leaves the list still waiting: its copy owes what it waited for.
            let o = owed.entry(*s).or_default();
            for need in p.unmet_needs() {
                if !o.contains(&need) {
                    o.push(need);
                }
            }
            false
        });
        self.outgoing.retain(|(_, to), _| members.contains(to));
        self.misplaced_sent.clear();
        self.next_misplaced_ms = 0;
        let first_ring = !self.was_member;
        if new.members().contains(me) {
            self.was_member = true;
        }
        let mut without: BTreeMap<UniqueAddress, Ring> = BTreeMap::new();
        for s in 0..SEGMENTS {
            let old_l = old.preference_list(s, n);
            let new_l = new.preference_list(s, n);
            // A replica that stays, in a segment that lost a majority of its replicas at
            // once, cannot answer for it alone either: it waits for them too.
            let staying = old_l.iter().filter(|a| members.contains(*a)).count();
            if old_l.contains(&me)
                && new_l.contains(&me)
                && staying < old_l.len() / 2 + 1
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
                    ..Pending::default()
                };
                // Its copy stands for the old list, but lacks what only the departed held:
                // incomplete for anyone who counts it after this change, until it is done.
                p.count(&me.address, self.standing(s));
                if let Some(o) = self.owed.remove(&s) {
                    p.inherit(&o);
                }
                self.pending.insert(s, p);
                self.marks_dirty |= self.marks.joined(s);
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
                        p.inherit(&o);
                    }
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
                                q.inherit(&p.inherited);
                            }
                            None => {
                                self.pending.insert(s, p);
                            }
                        }
                    }
                } else if involved(me) {
                    self.outgoing.insert((s, x.clone()), Outgoing::default());
                }
            }
            if new_l.contains(&me) && !self.pending.contains_key(&s) {
                self.completed(s);
            }
        }
    }

    /// Sends the records of segments held here but not replicated here (after a ring
    /// change, or a whole cluster's restart, they may be the only copies) to their
    /// replicas, once per ring.
    pub fn send_misplaced(&mut self, held: &[u16], ring: &Ring, me: &UniqueAddress, n: u8) {
        for &s in held {
            let list = ring.preference_list(s, n);
            if list.contains(&me) {
                continue;
            }
            for r in list {
                let key = (s, r.clone());
                if self.misplaced_sent.insert(key.clone()) {
                    self.outgoing.entry(key).or_default();
                }
            }
        }
    }

    /// `from` sent the last page of `segment`, standing so, its copy owing `needs`.
    pub fn received_last(
        &mut self,
        segment: u16,
        from: &UniqueAddress,
        standing: Standing,
        needs: &[Need],
    ) {
        if let Some(p) = self.pending.get_mut(&segment) {
            p.from.remove(from);
            p.count(&from.address, standing);
            p.inherit(needs);
            if p.done() {
                self.pending.remove(&segment);
                self.completed(segment);
            }
        }
    }

    /// `to` acknowledged page `page` of `segment`.
    pub fn acknowledged(&mut self, segment: u16, to: &UniqueAddress, page: u32) {
        let key = (segment, to.clone());
        let Some(o) = self.outgoing.get_mut(&key) else {
            return;
        };
        if o.page != page {
            return;
        }
        if let Some((_, last_key, last)) = o.in_flight.take() {
            if last {
                self.outgoing.remove(&key);
                return;
            }
            o.after = last_key;
            o.page = o.page.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(port: u16, uid: u64) -> UniqueAddress {
        UniqueAddress {
            address: Address::new("sys", "h", port),
            uid,
        }
    }

    #[test]
    fn a_joining_replica_waits_for_the_others_and_they_send_to_it() {
        let (a, b, c, d) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4));
        let old = Ring::new([a.clone(), b.clone(), c.clone()], 16);
        let new = Ring::new([a.clone(), b.clone(), c.clone(), d.clone()], 16);
        let mut at_d = Handoffs::default();
        at_d.ring_changed(&old, &new, &d, 3, 16);
        let mut at_a = Handoffs::default();
        at_a.ring_changed(&old, &new, &a, 3, 16);
        let gained: Vec<u16> = (0..SEGMENTS)
            .filter(|s| new.preference_list(*s, 3).contains(&&d))
            .collect();
        assert!(!gained.is_empty());
        for s in &gained {
            assert!(at_d.is_pending(*s), "segment {s}");
            assert!(at_a.outgoing.contains_key(&(*s, d.clone())), "a sends {s}");
        }
        assert_eq!(at_d.pending.len(), gained.len());
        // The last page from each sender clears it.
        let s = gained[0];
        for from in at_d.pending[&s].from.clone() {
            at_d.received_last(s, &from, Standing::Complete, &[]);
        }
        assert!(!at_d.is_pending(s));
        // Two of a segment's three replicas gone at once: its new replicas wait for them.
        let e = node(5, 5);
        let five = Ring::new([a.clone(), b.clone(), c.clone(), d.clone(), e.clone()], 16);
        let seg = (0..SEGMENTS)
            .find(|s| {
                let l = five.preference_list(*s, 3);
                l.contains(&&d) && l.contains(&&e) && !l.contains(&&a)
            })
            .expect("a segment on d and e");
        let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
        for me in [&a, &b, &c] {
            let mut h = Handoffs::default();
            h.ring_changed(&five, &three, me, 3, 16);
            if !five.preference_list(seg, 3).contains(&me) {
                assert!(h.is_pending(seg), "{me:?} must not answer for {seg}");
                let from = h.pending[&seg].from.clone();
                for f in &from {
                    h.received_last(seg, f, Standing::Complete, &[]);
                }
                assert!(
                    h.is_pending(seg),
                    "still short of a majority of the old replicas"
                );
                h.received_last(seg, &node(4, 44), Standing::Complete, &[]);
                assert!(!h.is_pending(seg), "d came back with its disk");
            }
        }
        // A restarted node (new uid) is a new replica too.
        let a2 = node(1, 9);
        let back = Ring::new([a2.clone(), b.clone(), c.clone(), d.clone()], 16);
        let mut at_b = Handoffs::default();
        at_b.ring_changed(&new, &back, &b, 3, 16);
        assert!(at_b.outgoing.keys().any(|(_, to)| *to == a2));
    }

    fn pending(previous: &[&UniqueAddress]) -> Pending {
        let previous: BTreeSet<Address> = previous.iter().map(|a| a.address.clone()).collect();
        Pending {
            required: meets_every_majority(previous.len()),
            previous,
            ..Pending::default()
        }
    }

    #[test]
    fn incomplete_copies_count_only_when_every_previous_replica_delivered() {
        let (a, b, n) = (node(1, 1), node(2, 2), node(3, 3));
        // A new replica that still waits for its own handoff is not one of the previous
        // replicas that meet every majority (simulator seed 355): b complete, n not, a
        // gone with writes only it and a departed node held.
        let mut p = pending(&[&a, &b, &n]);
        p.count(&b.address, Standing::Complete);
        p.count(&n.address, Standing::Incomplete);
        assert!(!p.done(), "n's copy does not stand for a's");
        p.count(&a.address, Standing::Complete);
        assert!(p.done());
        // Every previous replica's copy, complete or not: all that any of them holds.
        let mut p = pending(&[&a, &b, &n]);
        p.count(&a.address, Standing::Incomplete);
        p.count(&b.address, Standing::Incomplete);
        assert!(!p.done(), "n has not answered");
        p.count(&n.address, Standing::Incomplete);
        assert!(p.done());
        // A node outside the previous replicas counts for nothing.
        let mut p = pending(&[&a, &b]);
        p.count(&n.address, Standing::Complete);
        assert!(!p.done());
    }

    #[test]
    fn a_ring_that_emptied_in_between_counts_from_the_last_ring_seen() {
        // Simulator seed 1108: d was still joining (its view: a, b, c Up, itself not) when
        // a, b and c were downed; its view emptied, then it formed a ring alone.
        let (a, b, c, d) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4));
        let empty = Ring::new(std::iter::empty(), 16);
        let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
        let alone = Ring::new([d.clone()], 16);
        let mut h = Handoffs::default();
        h.ring_changed(&empty, &three, &d, 3, 16);
        assert!(h.pending.is_empty(), "not a member: nothing to wait for");
        h.ring_changed(&three, &empty, &d, 3, 16);
        h.ring_changed(&empty, &alone, &d, 3, 16);
        assert_eq!(h.pending.len(), usize::from(SEGMENTS), "d waits everywhere");
        let s = 0;
        let p = &h.pending[&s];
        let previous: BTreeSet<Address> = three
            .preference_list(s, 3)
            .iter()
            .map(|x| x.address.clone())
            .collect();
        assert_eq!(p.previous, previous);
        assert_eq!(p.required, 2);
        // Two of them come back with their disks (new incarnations) and hand over.
        let mut back = three
            .preference_list(s, 3)
            .into_iter()
            .map(|x| UniqueAddress {
                address: x.address.clone(),
                uid: x.uid + 100,
            });
        let (x, y) = (back.next().unwrap(), back.next().unwrap());
        h.received_last(s, &x, Standing::Complete, &[]);
        assert!(h.is_pending(s));
        h.received_last(s, &y, Standing::Complete, &[]);
        assert!(!h.is_pending(s));
        // A node that never saw a ring and forms one alone is a new cluster's first node.
        let mut fresh = Handoffs::default();
        fresh.ring_changed(&empty, &alone, &d, 3, 16);
        assert!(fresh.pending.is_empty());
    }

    #[test]
    fn a_copy_handed_on_while_it_waited_carries_its_need_to_the_next_replica() {
        // Simulator seeds 3647 and 3810: d became a replica of s and waited for two of
        // a, b, c; only a delivered before b and c were downed; then e and f joined and d
        // left the list of s, handing its copy on to e, which counted it as enough.
        let (a, b, c, d) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4));
        let (e, f) = (node(5, 5), node(6, 6));
        let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
        let four = Ring::new([a.clone(), b.clone(), c.clone(), d.clone()], 16);
        let two = Ring::new([a.clone(), d.clone()], 16);
        let grown = Ring::new([a.clone(), d.clone(), e.clone(), f.clone()], 16);
        let s = (0..SEGMENTS)
            .find(|s| {
                four.preference_list(*s, 3).contains(&&d)
                    && !grown.preference_list(*s, 3).contains(&&d)
                    && grown.preference_list(*s, 3).contains(&&e)
            })
            .expect("a segment d gains, then leaves to e");
        let mut at_d = Handoffs {
            was_member: true,
            ..Handoffs::default()
        };
        at_d.ring_changed(&three, &four, &d, 3, 16);
        at_d.received_last(s, &a, Standing::Complete, &[]);
        assert!(at_d.is_pending(s));
        at_d.ring_changed(&four, &two, &d, 3, 16);
        assert!(at_d.is_pending(s), "one of a, b, c is not enough");
        at_d.ring_changed(&two, &grown, &d, 3, 16);
        assert!(!at_d.is_pending(s));
        assert_eq!(at_d.standing(s), Standing::Incomplete);
        let owed = at_d.needs_of(s);
        let abc: BTreeSet<Address> = [&a, &b, &c].iter().map(|x| x.address.clone()).collect();
        assert_eq!(owed.len(), 1);
        assert_eq!(owed[0].previous, abc);
        assert_eq!(owed[0].required, 2);
        assert_eq!(owed[0].delivered, [a.address.clone()].into());
        // e waits for a and d (the list it joins), takes d's need over with d's copy, and
        // is not done until b or c is back.
        let mut at_e = Handoffs {
            was_member: true,
            ..Handoffs::default()
        };
        at_e.ring_changed(&two, &grown, &e, 3, 16);
        assert!(at_e.is_pending(s));
        at_e.received_last(s, &a, Standing::Complete, &[]);
        at_e.received_last(s, &d, Standing::Incomplete, &owed);
        // And for f if f is involved (a brand-new node: an incomplete copy).
        at_e.received_last(s, &f, Standing::Incomplete, &[]);
        assert!(at_e.pending[&s].from.is_empty());
        assert!(at_e.is_pending(s), "d's copy lacks what only b and c held");
        assert_eq!(at_e.needs_of(s), owed, "e's copy owes it in turn");
        at_e.received_last(s, &node(2, 22), Standing::Complete, &[]);
        assert!(!at_e.is_pending(s));
        assert_eq!(at_e.standing(s), Standing::Complete);
        assert!(at_e.needs_of(s).is_empty());
        // A need is met by every one of its replicas' copies as well (a cluster's first
        // ring, where no copy is complete).
        let need = &owed[0];
        let mut got = BTreeMap::new();
        got.insert(b.address.clone(), Standing::Incomplete);
        assert!(!need.met(&got));
        got.insert(c.address.clone(), Standing::Incomplete);
        assert!(need.met(&got));
    }

    #[test]
    fn marks_follow_the_ring_and_the_handoffs() {
        let (a, b, c, d) = (node(1, 1), node(2, 2), node(3, 3), node(4, 4));
        let empty = Ring::new(std::iter::empty(), 16);
        let alone = Ring::new([a.clone()], 16);
        let mut h = Handoffs::default();
        // The first node of a new cluster waits for nobody: complete everywhere.
        h.ring_changed(&empty, &alone, &a, 3, 16);
        assert!(h.pending.is_empty());
        assert!(h.marks_dirty);
        assert!((0..SEGMENTS).all(|s| h.standing(s) == Standing::Complete));
        // A brand-new node is incomplete until it completes, there and where it holds
        // nothing.
        let three = Ring::new([a.clone(), b.clone(), c.clone()], 16);
        let four = Ring::new([a.clone(), b.clone(), c.clone(), d.clone()], 16);
        let mut at_d = Handoffs::default();
        at_d.ring_changed(&three, &four, &d, 3, 16);
        let s = *at_d.pending.keys().next().expect("d waits");
        assert_eq!(at_d.standing(s), Standing::Incomplete);
        let other = (0..SEGMENTS)
            .find(|s| !four.preference_list(*s, 3).contains(&&d))
            .expect("a segment d does not replicate");
        assert_eq!(at_d.standing(other), Standing::Incomplete);
        for f in [&a, &b, &c] {
            at_d.received_last(s, f, Standing::Complete, &[]);
        }
        assert!(!at_d.is_pending(s));
        assert_eq!(at_d.standing(s), Standing::Complete);
        // Restarted (its marks from disk), it is not mistaken for a new node there.
        let d2 = node(4, 44);
        let back = Ring::new([a.clone(), b.clone(), c.clone(), d2.clone()], 16);
        let mut again = Handoffs {
            marks: at_d.marks.clone(),
            ..Handoffs::default()
        };
        again.ring_changed(&three, &back, &d2, 3, 16);
        assert!(again.is_pending(s), "a new incarnation waits");
        assert_eq!(again.standing(s), Standing::Complete);
        // A complete replica that becomes a new replica again (after it left the list)
        // holds a stale copy until that handoff ends, also after it leaves the list.
        let mut h = Handoffs::default();
        h.ring_changed(&empty, &alone, &a, 3, 16);
        h.ring_changed(&alone, &four, &a, 3, 16);
        let left = (0..SEGMENTS)
            .find(|s| !four.preference_list(*s, 3).contains(&&a))
            .expect("a segment a left");
        assert_eq!(h.standing(left), Standing::Complete, "as it left it");
        h.ring_changed(&four, &three, &a, 3, 16);
        assert!(h.is_pending(left));
        assert_eq!(h.standing(left), Standing::Incomplete);
        h.ring_changed(&three, &four, &a, 3, 16);
        assert!(!h.is_pending(left));
        assert_eq!(h.standing(left), Standing::Incomplete, "it never caught up");
    }
}
