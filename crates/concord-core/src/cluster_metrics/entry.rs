//! [`MetricsEntry`]: one node's metrics as the gossip carries them — the node's uid, the
//! version of its entry and its smoothed values quantised to codes ([`super::quantise`]),
//! about 25 bytes on the wire with Concord's 11 metrics — and [`MetricsState`], every node's
//! latest entry as one node holds them.
//!
//! Merging keeps, per node, the entry with the highest version (ties, which only a faulty
//! node could make, go to the greater codes), so it is commutative, associative and
//! idempotent: a join of per-node maxima, as Akka's `MetricsGossip` merge.

use std::collections::BTreeMap;

use super::node_metrics::{MAX_METRICS_PER_NODE, MAX_METRIC_ID};
use super::quantise::MAX_CODE;

/// One node's metrics on the wire.
///
/// Field order matters: for one node, entries are ordered by `(sequence, codes)`, which is
/// what a merge keeps the greatest of.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MetricsEntry {
    /// The node's uid (the random 64-bit number of its incarnation): the receiver finds the
    /// member by it, and refuses an entry whose uid is no member's.
    pub uid: u64,
    /// The entry's version, from 1; see [`super::NodeMetrics::sequence`].
    pub sequence: u64,
    /// Metric number ([`super::names::id`]) → code ([`super::quantise::Scale::code`]),
    /// ascending numbers, each at most once.
    pub codes: Vec<(u8, u32)>,
}

/// A `(uid, version)` pair: what a full digest lists for each entry its sender holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntryVersion {
    /// The node's uid.
    pub uid: u64,
    /// The version held.
    pub sequence: u64,
}

/// Why an entry read from the network was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEntry {
    /// Version 0 (versions count from 1).
    #[error("version 0")]
    NoSequence,
    /// More metrics than [`MAX_METRICS_PER_NODE`].
    #[error("{0} metrics (at most {MAX_METRICS_PER_NODE})")]
    TooMany(usize),
    /// Metric numbers not ascending, repeated, or above [`MAX_METRIC_ID`].
    #[error("metric numbers out of order or above {MAX_METRIC_ID}")]
    BadIds,
    /// A code above [`MAX_CODE`].
    #[error("a code of {0} (at most {MAX_CODE})")]
    BadCode(u32),
}

impl MetricsEntry {
    /// Its `(uid, version)`.
    pub fn version(&self) -> EntryVersion {
        EntryVersion {
            uid: self.uid,
            sequence: self.sequence,
        }
    }

    /// Checks an entry read from the network.
    ///
    /// # Errors
    /// [`InvalidEntry`]: version 0, too many metrics, metric numbers out of order or too
    /// high, or a code too large.
    pub fn validate(&self) -> Result<(), InvalidEntry> {
        if self.sequence == 0 {
            return Err(InvalidEntry::NoSequence);
        }
        if self.codes.len() > MAX_METRICS_PER_NODE {
            return Err(InvalidEntry::TooMany(self.codes.len()));
        }
        let ascending = self.codes.windows(2).all(|w| w[0].0 < w[1].0);
        if !ascending || self.codes.iter().any(|(id, _)| *id > MAX_METRIC_ID) {
            return Err(InvalidEntry::BadIds);
        }
        match self.codes.iter().find(|(_, c)| *c > MAX_CODE) {
            Some((_, c)) => Err(InvalidEntry::BadCode(*c)),
            None => Ok(()),
        }
    }
}

/// Node uid → its latest [`MetricsEntry`]. The collector keeps only members' entries in it,
/// so its size is bounded by the membership's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetricsState {
    entries: BTreeMap<u64, MetricsEntry>,
}

impl MetricsState {
    /// No entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `entry` if it is newer than the one held for its node (see the module docs);
    /// returns whether it was kept.
    pub fn merge_entry(&mut self, entry: MetricsEntry) -> bool {
        match self.entries.get(&entry.uid) {
            Some(held) if *held >= entry => false,
            _ => {
                self.entries.insert(entry.uid, entry);
                true
            }
        }
    }

    /// Merges every entry of `other`; returns how many were newer.
    pub fn merge(&mut self, other: &MetricsState) -> usize {
        other
            .entries
            .values()
            .filter(|e| self.merge_entry((*e).clone()))
            .count()
    }

    /// True if this state holds `version` of its node or a later one.
    pub fn has(&self, version: EntryVersion) -> bool {
        self.sequence_of(version.uid) >= Some(version.sequence)
    }

    /// The version held of node `uid`.
    pub fn sequence_of(&self, uid: u64) -> Option<u64> {
        self.entries.get(&uid).map(|e| e.sequence)
    }

    /// The entry of node `uid`.
    pub fn get(&self, uid: u64) -> Option<&MetricsEntry> {
        self.entries.get(&uid)
    }

    /// Drops the entries whose uid `keep` refuses; returns the uids dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) -> Vec<u64> {
        let gone: Vec<u64> = self.entries.keys().copied().filter(|u| !keep(*u)).collect();
        for u in &gone {
            self.entries.remove(u);
        }
        gone
    }

    /// Every entry, by uid.
    pub fn entries(&self) -> impl Iterator<Item = &MetricsEntry> {
        self.entries.values()
    }

    /// The digest: the version of every entry held, by uid.
    pub fn versions(&self) -> Vec<EntryVersion> {
        self.entries.values().map(MetricsEntry::version).collect()
    }

    /// A 64-bit hash of the uids of the entries held (ascending; SplitMix64's finaliser
    /// chained over them): two states with entries of the same nodes have the same hash, so
    /// a compact digest (versions only) of one is readable by the other.
    pub fn nodes_hash(&self) -> u64 {
        self.entries.keys().fold(0x243f_6a88_85a3_08d3, |h, uid| {
            let mut z = (h ^ uid).wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(uid: u64, sequence: u64, code: u32) -> MetricsEntry {
        MetricsEntry {
            uid,
            sequence,
            codes: vec![(0, code)],
        }
    }

    #[test]
    fn the_newest_version_wins_and_bad_entries_are_named() {
        let mut s = MetricsState::new();
        assert!(s.merge_entry(entry(1, 2, 2)));
        assert!(!s.merge_entry(entry(1, 1, 1)));
        assert!(!s.merge_entry(entry(1, 2, 2)));
        assert!(s.merge_entry(entry(1, 3, 3)));
        assert!(s.has(EntryVersion {
            uid: 1,
            sequence: 2
        }));
        assert!(!s.has(EntryVersion {
            uid: 2,
            sequence: 1
        }));
        s.merge_entry(entry(2, 1, 1));
        assert_eq!(s.retain(|u| u == 2), vec![1]);
        assert_eq!(
            s.versions(),
            vec![EntryVersion {
                uid: 2,
                sequence: 1
            }]
        );

        assert_eq!(entry(1, 1, 7).validate(), Ok(()));
        assert_eq!(entry(1, 0, 7).validate(), Err(InvalidEntry::NoSequence));
        assert_eq!(
            entry(1, 1, MAX_CODE + 1).validate(),
            Err(InvalidEntry::BadCode(MAX_CODE + 1))
        );
        let mut e = entry(1, 1, 1);
        e.codes = vec![(3, 1), (2, 1)];
        assert_eq!(e.validate(), Err(InvalidEntry::BadIds));
        e.codes = vec![(2, 1), (2, 1)];
        assert_eq!(e.validate(), Err(InvalidEntry::BadIds));
        e.codes = vec![(MAX_METRIC_ID + 1, 1)];
        assert_eq!(e.validate(), Err(InvalidEntry::BadIds));
        e.codes = (0..=MAX_METRICS_PER_NODE as u8).map(|i| (i, 0)).collect();
        assert_eq!(
            e.validate(),
            Err(InvalidEntry::TooMany(MAX_METRICS_PER_NODE + 1))
        );
    }

    fn arb_state() -> impl Strategy<Value = MetricsState> {
        // Codes deliberately independent of the version: merging must stay a
        // semilattice even for two different entries of one version.
        proptest::collection::vec((0u64..6, 1u64..5, 0u32..3), 0..12).prop_map(|v| {
            let mut s = MetricsState::new();
            for (u, q, c) in v {
                s.merge_entry(entry(u, q, c));
            }
            s
        })
    }

    proptest! {
        #[test]
        fn merge_is_commutative_associative_and_idempotent(
            a in arb_state(), b in arb_state(), c in arb_state(),
        ) {
            let merged = |x: &MetricsState, y: &MetricsState| {
                let mut m = x.clone();
                m.merge(y);
                m
            };
            prop_assert_eq!(merged(&a, &b), merged(&b, &a));
            prop_assert_eq!(merged(&merged(&a, &b), &c), merged(&a, &merged(&b, &c)));
            prop_assert_eq!(merged(&a, &a), a.clone());
            let mut twice = merged(&a, &b);
            prop_assert_eq!(twice.merge(&b), 0);
            // The merge holds every version either side held.
            for v in a.versions().into_iter().chain(b.versions()) {
                prop_assert!(twice.has(v));
            }
        }
    }
}
