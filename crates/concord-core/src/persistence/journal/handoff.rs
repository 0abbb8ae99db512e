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

use crate::address::UniqueAddress;
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

/// This node's handoffs; see the module docs.
#[derive(Debug, Default)]
pub struct Handoffs {
    /// Segment → replicas whose last page this node waits for before it answers there.
    pub pending: BTreeMap<u16, BTreeSet<UniqueAddress>>,
    /// (segment, new replica) → what is sent.
    pub outgoing: BTreeMap<(u16, UniqueAddress), Outgoing>,
    /// When to ask the replicas waited for again, ms.
    pub next_ask_ms: u64,
}

impl Handoffs {
    /// True if this node does not answer about `segment` yet.
    pub fn is_pending(&self, segment: u16) -> bool {
        self.pending.contains_key(&segment)
    }

    /// Recomputes pending segments and handoffs after the ring went from `old` to `new`.
    pub fn ring_changed(&mut self, old: &Ring, new: &Ring, me: &UniqueAddress, n: u8, vnodes: u32) {
        let members: BTreeSet<&UniqueAddress> = new.members().iter().collect();
        self.pending.retain(|_, from| {
            from.retain(|a| members.contains(a));
            !from.is_empty()
        });
        self.outgoing.retain(|(_, to), _| members.contains(to));
        let mut without: BTreeMap<UniqueAddress, Ring> = BTreeMap::new();
        for s in 0..SEGMENTS {
            let old_l = old.preference_list(s, n);
            let new_l = new.preference_list(s, n);
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
                    if !from.is_empty() {
                        self.pending.entry(s).or_default().extend(from);
                    }
                } else if involved(me) {
                    self.outgoing.insert((s, x.clone()), Outgoing::default());
                }
            }
        }
    }

    /// `from` sent the last page of `segment`.
    pub fn received_last(&mut self, segment: u16, from: &UniqueAddress) {
        if let Some(set) = self.pending.get_mut(&segment) {
            set.remove(from);
            if set.is_empty() {
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
    use crate::address::Address;

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
        for from in at_d.pending[&s].clone() {
            at_d.received_last(s, &from);
        }
        assert!(!at_d.is_pending(s));
        // A restarted node (new uid) is a new replica too.
        let a2 = node(1, 9);
        let back = Ring::new([a2.clone(), b.clone(), c.clone(), d.clone()], 16);
        let mut at_b = Handoffs::default();
        at_b.ring_changed(&new, &back, &b, 3, 16);
        assert!(at_b.outgoing.keys().any(|(_, to)| *to == a2));
    }
}
