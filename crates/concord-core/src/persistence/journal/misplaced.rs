//! Misplaced copies: segments held here that this node does not replicate (it left their
//! preference lists in a ring change, or left the ring). After a ring change, or a whole
//! cluster's restart, such a copy may be the only one, so it goes to the segment's
//! replicas once per ring ([`Handoffs::send_misplaced`]) — unless it already went to that
//! replica whole and nothing of it was written here since ([`Handoffs::delivered`],
//! [`super::segment_writes`]): a replica's records only grow (`super::holding`), so it
//! still holds all of it.

use super::handoff::{Handoffs, Outgoing, MAX_DELIVERED};
use crate::address::UniqueAddress;
use crate::kv::ring::Ring;

impl Handoffs {
    /// Sends the records of segments held here but not replicated here (after a ring
    /// change, or a whole cluster's restart, they may be the only copies) to their
    /// replicas, once per ring — but not to a replica this copy already went to whole,
    /// unchanged since (`last_write`: [`super::segment_writes`]; see
    /// [`Handoffs::misplaced_delivered`]). Without that, every ring change of a rolling
    /// upgrade sent every misplaced copy whole again: 55–66 % of the records handed over
    /// (docs/BENCHMARKS.md).
    pub fn send_misplaced(
        &mut self,
        held: &[u16],
        ring: &Ring,
        me: &UniqueAddress,
        n: u8,
        last_write: impl Fn(u16) -> u64,
    ) {
        for &s in held {
            let list = ring.preference_list(s, n);
            if list.contains(&me) {
                continue;
            }
            for r in list {
                let key = (s, r.clone());
                if !self.misplaced_sent.insert(key.clone()) {
                    continue;
                }
                if self.misplaced_delivered.get(&key) == Some(&last_write(s)) {
                    continue;
                }
                self.outgoing.entry(key).or_default();
            }
        }
    }

    /// `to` acknowledged the last page of `segment`, whose handoff `o` read its first
    /// page at `o.read_at`; the segment's last write here is `last_write` now. If none
    /// came between, `to` holds this node's whole copy: remembered
    /// ([`Handoffs::misplaced_delivered`]).
    pub fn delivered(&mut self, segment: u16, to: &UniqueAddress, o: &Outgoing, last_write: u64) {
        let key = (segment, to.clone());
        if o.read_at == Some(last_write) {
            if self.misplaced_delivered.len() < MAX_DELIVERED
                || self.misplaced_delivered.contains_key(&key)
            {
                self.misplaced_delivered.insert(key, last_write);
            }
        } else {
            self.misplaced_delivered.remove(&key);
        }
    }
}
