//! [`RetentionCriteria`]: when an entity saves a snapshot and what it deletes then (Akka's
//! `RetentionCriteria.snapshotEvery(numberOfEvents, keepNSnapshots)`).

use serde::{Deserialize, Serialize};

/// Snapshot every `snapshot_every` events and keep the newest `keep_snapshots`; with
/// `delete_events` also delete the events every kept snapshot already covers. Off when
/// `snapshot_every` is 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionCriteria {
    /// Events between snapshots (0: no snapshots).
    pub snapshot_every: u64,
    /// Snapshots kept (≥ 1 when snapshots are on).
    pub keep_snapshots: u32,
    /// Delete events below the oldest kept snapshot.
    pub delete_events: bool,
}

impl RetentionCriteria {
    /// No snapshots.
    pub const DISABLED: RetentionCriteria = RetentionCriteria {
        snapshot_every: 0,
        keep_snapshots: 1,
        delete_events: false,
    };

    /// True if a snapshot is due after a write took the sequence number from `previous`
    /// to `last`: some multiple of `snapshot_every` lies in `previous + 1 ..= last`. An
    /// atomic write of several events is snapshotted after all of them, at `last`.
    pub fn snapshot_due(&self, previous: u64, last: u64) -> bool {
        let n = self.snapshot_every;
        n != 0 && last > previous && last / n > previous / n
    }

    /// After a snapshot at `snapshot_seq_nr`: snapshots at or below the returned sequence
    /// number are deleted (and, with `delete_events`, events too), keeping the newest
    /// `keep_snapshots` (the snapshots within the last `keep_snapshots × snapshot_every`
    /// events). `None` when nothing is old enough.
    pub fn delete_up_to(&self, snapshot_seq_nr: u64) -> Option<u64> {
        if self.snapshot_every == 0 {
            return None;
        }
        let span = self
            .snapshot_every
            .saturating_mul(u64::from(self.keep_snapshots.max(1)));
        match snapshot_seq_nr.saturating_sub(span) {
            0 => None,
            bound => Some(bound),
        }
    }
}

impl Default for RetentionCriteria {
    fn default() -> Self {
        Self::DISABLED
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn every(n: u64, keep: u32) -> RetentionCriteria {
        RetentionCriteria {
            snapshot_every: n,
            keep_snapshots: keep,
            delete_events: false,
        }
    }

    #[test]
    fn snapshots_come_at_multiples_and_after_a_whole_group() {
        let r = every(100, 2);
        assert!(!r.snapshot_due(0, 99));
        assert!(r.snapshot_due(99, 100));
        assert!(
            r.snapshot_due(98, 102),
            "a group crossing 100 snapshots after it"
        );
        assert!(!r.snapshot_due(100, 199));
        assert!(!RetentionCriteria::DISABLED.snapshot_due(0, 1_000_000));
        assert_eq!(r.delete_up_to(200), None);
        assert_eq!(r.delete_up_to(300), Some(100));
        assert_eq!(r.delete_up_to(302), Some(102));
    }

    proptest! {
        /// Taking events in writes of any sizes, exactly one snapshot is due per crossed
        /// multiple-group, and the snapshots kept after a deletion are always the newest
        /// `keep` (their sequence numbers above the bound).
        #[test]
        fn snapshot_and_delete_keep_the_newest(n in 1u64..50, keep in 1u32..5, sizes in proptest::collection::vec(1u64..20, 1..200)) {
            let r = every(n, keep);
            let mut seq = 0u64;
            let mut snapshots: Vec<u64> = Vec::new();
            for s in sizes {
                let last = seq + s;
                if r.snapshot_due(seq, last) {
                    snapshots.push(last);
                    if let Some(bound) = r.delete_up_to(last) {
                        snapshots.retain(|x| *x > bound);
                    }
                }
                prop_assert_eq!(r.snapshot_due(seq, last), (seq + 1..=last).any(|x| x % n == 0));
                seq = last;
            }
            prop_assert!(snapshots.len() <= keep as usize + 1, "{snapshots:?}");
            if let Some(newest) = snapshots.last() {
                prop_assert_eq!(*newest, *snapshots.iter().max().unwrap());
            }
        }
    }
}
