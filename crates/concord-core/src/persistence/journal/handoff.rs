//! Ring changes: when a node becomes a replica of a segment, every other replica of it —
//! before and after the change, and whoever would hold it without that node — sends it
//! the segment's records, and the new replica answers no proposer about that segment
//! until each of those still in the ring has sent its last page (Riak's ownership
//! handoff; the pending rule of the key-value store). Records merge safely in any order
//! (`acceptor::merge_record`), so a duplicated or repeated page changes nothing.
//!
//! A node compares replicas by incarnation: a node that restarted is a new replica and is
//! brought up to date the same way.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::{Address, UniqueAddress};
use crate::kv::ring::{Ring, SEGMENTS};

/// Records in one handoff page.
pub const PAGE_RECORDS: usize = 256;
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

/// A segment this node became a replica of and does not answer about yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// Replicas in the ring whose last page it waits for.
    pub from: BTreeSet<UniqueAddress>,
    /// The addresses of the segment's previous replicas (by address: a restarted node
    /// brings its disk back).
    pub previous: BTreeSet<Address>,
    /// Those of them that delivered (this node's own disk counts).
    pub delivered: BTreeSet<Address>,
    /// How many of them must have delivered: enough to meet every majority of them
    /// ([`meets_every_majority`]), so that every write chosen before is among what this
    /// node merged.
    pub required: usize,
    /// Pending since this node's first ring (it just started: what its disk holds is all
    /// it knows, and it hands that over while it waits); otherwise it hands nothing over
    /// until it is complete itself.
    pub first_ring: bool,
}

impl Pending {
    /// Everything awaited arrived.
    pub fn done(&self) -> bool {
        self.from.is_empty() && self.delivered.len() >= self.required
    }
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

    /// Recomputes pending segments and handoffs after the ring went from `old` to `new`.
    ///
    /// A new replica waits for every replica involved that is still in the ring, and for
    /// a majority of the segment's previous replicas: if a majority of them left the ring
    /// at once (two of three nodes crashed, or were downed on the other side of a
    /// partition), the segment stays unavailable until enough of them come back with their
    /// disks — rather than answering without writes only they hold.
    pub fn ring_changed(&mut self, old: &Ring, new: &Ring, me: &UniqueAddress, n: u8, vnodes: u32) {
        let members: BTreeSet<&UniqueAddress> = new.members().iter().collect();
        self.pending.retain(|s, p| {
            p.from.retain(|a| members.contains(a));
            new.preference_list(*s, n).contains(&me) && !p.done()
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
                self.pending.insert(
                    s,
                    Pending {
                        from: old_l
                            .iter()
                            .filter(|a| *a != &me && members.contains(*a))
                            .map(|a| (*a).clone())
                            .collect(),
                        required: meets_every_majority(previous.len()),
                        delivered: [me.address.clone()].into_iter().collect(),
                        previous,
                        first_ring: false,
                    },
                );
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
                    let previous: BTreeSet<Address> =
                        reference.iter().map(|a| a.address.clone()).collect();
                    let mut delivered = BTreeSet::new();
                    if previous.contains(&me.address) {
                        delivered.insert(me.address.clone());
                    }
                    let p = Pending {
                        from,
                        required: meets_every_majority(previous.len()),
                        previous,
                        delivered,
                        first_ring,
                    };
                    if !p.done() {
                        // An earlier wait (its previous replicas) still stands.
                        match self.pending.get_mut(&s) {
                            Some(q) => q.from.extend(p.from),
                            None => {
                                self.pending.insert(s, p);
                            }
                        }
                    }
                } else if involved(me) {
                    self.outgoing.insert((s, x.clone()), Outgoing::default());
                }
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

    /// `from` sent the last page of `segment`.
    pub fn received_last(&mut self, segment: u16, from: &UniqueAddress) {
        if let Some(p) = self.pending.get_mut(&segment) {
            p.from.remove(from);
            if p.previous.contains(&from.address) {
                p.delivered.insert(from.address.clone());
            }
            if p.done() {
                self.pending.remove(&segment);
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
            at_d.received_last(s, &from);
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
                    h.received_last(seg, f);
                }
                assert!(
                    h.is_pending(seg),
                    "still short of a majority of the old replicas"
                );
                h.received_last(seg, &node(4, 44));
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
}
