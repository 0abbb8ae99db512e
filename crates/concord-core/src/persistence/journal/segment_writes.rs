//! [`SegmentWrites`]: when each segment's records were last written on this node, as a
//! number that only grows, so that a handoff can tell whether the copy it sent is still
//! the copy held: a misplaced copy (a segment held here, replicated elsewhere) delivered
//! whole to a replica is not sent to that replica again while its number stays the same
//! ([`super::handoff::Handoffs::send_misplaced`]).
//!
//! In memory only: a restarted node knows no delivery and sends its misplaced copies once
//! more, as before.

use std::collections::HashMap;

/// See the module docs. Bounded: one number per segment written (at most 65,536).
#[derive(Debug, Default)]
pub struct SegmentWrites {
    /// Writes and removals seen (successful or not), the last one's number.
    seq: u64,
    /// Segment → the number of its last write or removal.
    last: HashMap<u16, u64>,
    /// Every segment counts as written at this number: a commit failed (the storage may
    /// have dropped any of the turn's writes).
    all_at: u64,
}

impl SegmentWrites {
    /// A record of `segment` was written or removed (or the storage refused it).
    pub fn wrote(&mut self, segment: u16) {
        self.seq = self.seq.saturating_add(1);
        self.last.insert(segment, self.seq);
    }

    /// A commit failed: every segment may have changed.
    pub fn all_changed(&mut self) {
        self.seq = self.seq.saturating_add(1);
        self.all_at = self.seq;
    }

    /// The number of `segment`'s last change (0: none since this process started). Equal
    /// numbers at two times mean no record of the segment was written between them.
    pub fn last_write(&self, segment: u16) -> u64 {
        self.last
            .get(&segment)
            .copied()
            .unwrap_or(0)
            .max(self.all_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_changes_only_with_its_own_writes_or_a_failed_commit() {
        let mut w = SegmentWrites::default();
        assert_eq!(w.last_write(7), 0);
        w.wrote(7);
        let seven = w.last_write(7);
        assert!(seven > 0);
        w.wrote(8);
        assert_eq!(w.last_write(7), seven);
        assert_ne!(w.last_write(8), 0);
        w.wrote(7);
        assert!(w.last_write(7) > seven);
        let (seven, eight, nine) = (w.last_write(7), w.last_write(8), w.last_write(9));
        w.all_changed();
        assert!(w.last_write(7) > seven);
        assert!(w.last_write(8) > eight);
        assert!(w.last_write(9) > nine);
    }
}
