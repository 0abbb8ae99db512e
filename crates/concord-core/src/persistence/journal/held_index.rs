//! [`HeldIndex`]: which segments may hold journal records on this node, kept in memory so
//! that the periodic look for misplaced segments (held here, replicated elsewhere:
//! [`super::handoff::Handoffs::send_misplaced`]) seeks the storage only for the segments it
//! asks about, not for every one of the 65,536 possible key prefixes.
//!
//! Before it, that look did one range seek per segment held (1,024 on a full node) on every
//! node at every ring change and every 5 s: 45–200 ms of a journal host's turn on an LSM
//! tree, on every node at once after a ring change (docs/BENCHMARKS.md, "Rolling upgrade").
//!
//! The index is a **superset**: every successful write of a record sets its segment's bit
//! (the first two bytes of a journal key are its segment, [`super::acceptor::key`]), a
//! removal clears nothing (other records of the segment may remain), and a look that finds
//! a segment empty clears its bit. Until the first full scan the index knows nothing of
//! what the disk held before this process started, so the first look scans every segment
//! once ([`HeldIndex::scanned`]).

/// One bit per possible segment prefix (`u16`), 8 KiB; see the module docs.
#[derive(Debug)]
pub struct HeldIndex {
    bits: Box<[u64; 1024]>,
    scanned: bool,
}

impl Default for HeldIndex {
    fn default() -> Self {
        HeldIndex {
            bits: Box::new([0; 1024]),
            scanned: false,
        }
    }
}

impl HeldIndex {
    /// The segment of a journal record's key (its first two bytes, big-endian); `None` for
    /// a key shorter than that.
    pub fn segment_of_key(key: &[u8]) -> Option<u16> {
        match key {
            [a, b, ..] => Some(u16::from_be_bytes([*a, *b])),
            _ => None,
        }
    }

    /// A record of `segment` was written.
    pub fn wrote(&mut self, segment: u16) {
        self.bits[usize::from(segment / 64)] |= 1 << (segment % 64);
    }

    /// `segment` was found to hold no record.
    pub fn emptied(&mut self, segment: u16) {
        self.bits[usize::from(segment / 64)] &= !(1 << (segment % 64));
    }

    /// True if `segment` may hold records: its bit is set, or no full scan was taken in
    /// yet (then the index does not know).
    pub fn may_hold(&self, segment: u16) -> bool {
        !self.scanned || self.bits[usize::from(segment / 64)] & (1 << (segment % 64)) != 0
    }

    /// True once a full scan of the disk's segments was taken in ([`Self::scanned_all`]).
    pub fn scanned(&self) -> bool {
        self.scanned
    }

    /// A full scan found exactly `held` (in any order): those bits set and no other (the
    /// scan saw every write so far, committed or not).
    pub fn scanned_all(&mut self, held: &[u16]) {
        self.bits.fill(0);
        for &s in held {
            self.wrote(s);
        }
        self.scanned = true;
    }

    /// The segments whose bit is set, ascending.
    pub fn segments(&self) -> Vec<u16> {
        let mut out = Vec::new();
        for (w, &word) in self.bits.iter().enumerate() {
            let mut rest = word;
            while rest != 0 {
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                // w < 1024 and bit < 64: the product fits a u16.
                if let Ok(s) = u16::try_from(w * 64 + bit as usize) {
                    out.push(s);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_set_by_writes_and_cleared_by_an_empty_look() {
        let mut h = HeldIndex::default();
        assert!(h.segments().is_empty());
        for s in [0, 63, 64, 1023, 65_535, 64] {
            h.wrote(s);
        }
        assert_eq!(h.segments(), vec![0, 63, 64, 1023, 65_535]);
        h.emptied(64);
        h.emptied(7); // never set: nothing changes
        assert_eq!(h.segments(), vec![0, 63, 1023, 65_535]);
        assert!(!h.scanned());
        assert!(h.may_hold(64), "unknown before a scan");
        h.scanned_all(&[5, 63]);
        assert!(!h.may_hold(64) && !h.may_hold(6));
        assert!(
            h.may_hold(5) && !h.may_hold(65_535),
            "exactly what the scan found"
        );
        assert!(h.scanned());
        assert_eq!(h.segments(), vec![5, 63]);
    }

    #[test]
    fn a_key_names_its_segment_by_its_first_two_bytes() {
        assert_eq!(HeldIndex::segment_of_key(&[0x03, 0xff, b'x']), Some(1023));
        assert_eq!(HeldIndex::segment_of_key(&[0x01, 0x00]), Some(256));
        assert_eq!(HeldIndex::segment_of_key(&[0x01]), None);
        assert_eq!(HeldIndex::segment_of_key(&[]), None);
    }
}
