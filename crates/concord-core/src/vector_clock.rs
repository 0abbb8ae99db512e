//! [`VectorClock`]: a set of (node, counter) pairs versioning the gossip state.
//!
//! Spec: cluster-specification.md, "Vector Clocks". Every update of the cluster state by a
//! node increments that node's counter; comparing clocks tells whether one state is
//! causally before, after, the same as or concurrent with another. Entries of removed
//! nodes are pruned (Akka `VectorClock.prune`).

use std::collections::BTreeMap;

use crate::address::UniqueAddress;

/// Result of comparing two vector clocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockOrdering {
    /// `self` happened before `other` (every counter <=, one <).
    Before,
    /// `self` happened after `other`.
    After,
    /// Identical clocks.
    Same,
    /// Neither dominates: concurrent updates that must be merged.
    Concurrent,
}

/// How far ahead of this node's own clock a received counter may be, changes (2^32: a
/// node changing the state every millisecond needs 50 days to get that far ahead of a peer
/// that hears nothing from it; in practice gossip keeps peers within a few changes).
pub const MAX_VECTOR_CLOCK_JUMP: u64 = 1 << 32;

/// A vector clock keyed by node incarnation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VectorClock {
    versions: BTreeMap<UniqueAddress, u64>,
}

impl VectorClock {
    /// The empty clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a clock from entries (zero counters are dropped).
    pub fn from_entries(entries: impl IntoIterator<Item = (UniqueAddress, u64)>) -> Self {
        VectorClock {
            versions: entries.into_iter().filter(|(_, v)| *v > 0).collect(),
        }
    }

    /// The entries, in node order.
    pub fn entries(&self) -> impl Iterator<Item = (&UniqueAddress, u64)> {
        self.versions.iter().map(|(k, v)| (k, *v))
    }

    /// Number of nodes with an entry.
    pub fn len(&self) -> usize {
        self.versions.len()
    }

    /// True if no node has an entry.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// The counter of `node` (0 when absent).
    pub fn get(&self, node: &UniqueAddress) -> u64 {
        self.versions.get(node).copied().unwrap_or(0)
    }

    /// A copy with `node`'s counter incremented by one (saturating: a counter never wraps;
    /// [`VectorClock::implausible_jump`] keeps counters from the network far below the
    /// limit).
    pub fn increment(&self, node: &UniqueAddress) -> VectorClock {
        let mut v = self.clone();
        let c = v.versions.entry(node.clone()).or_insert(0);
        *c = c.saturating_add(1);
        v
    }

    /// The first entry of `self` (a clock received from the network) whose counter is more
    /// than `max_jump` ahead of the same entry of `local` (absent entries count as 0), as
    /// `(node, counter)`; `None` if every counter is plausible.
    ///
    /// A counter grows by one per change a node makes to the state, so a legitimate clock is
    /// never billions of changes ahead of what this node has seen; a forged counter near
    /// `u64::MAX` would otherwise make every later change of that node invisible (its
    /// increments could not pass it). See [`MAX_VECTOR_CLOCK_JUMP`].
    pub fn implausible_jump(
        &self,
        local: &VectorClock,
        max_jump: u64,
    ) -> Option<(&UniqueAddress, u64)> {
        self.versions
            .iter()
            .find(|(k, c)| **c > local.get(k).saturating_add(max_jump))
            .map(|(k, c)| (k, *c))
    }

    /// Pointwise maximum: the least clock that is after-or-same as both.
    pub fn merge(&self, other: &VectorClock) -> VectorClock {
        let mut v = self.clone();
        for (k, c) in &other.versions {
            let e = v.versions.entry(k.clone()).or_insert(0);
            if *c > *e {
                *e = *c;
            }
        }
        v
    }

    /// A copy without `node`'s entry (used when a node is removed).
    pub fn prune(&self, node: &UniqueAddress) -> VectorClock {
        let mut v = self.clone();
        v.versions.remove(node);
        v
    }

    /// Compares two clocks.
    pub fn compare(&self, other: &VectorClock) -> ClockOrdering {
        let mut less = false; // some self < other
        let mut greater = false; // some self > other
        for (k, a) in &self.versions {
            let b = other.get(k);
            if *a > b {
                greater = true;
            } else if *a < b {
                less = true;
            }
        }
        for (k, b) in &other.versions {
            if !self.versions.contains_key(k) && *b > 0 {
                less = true;
            }
        }
        match (less, greater) {
            (false, false) => ClockOrdering::Same,
            (true, false) => ClockOrdering::Before,
            (false, true) => ClockOrdering::After,
            (true, true) => ClockOrdering::Concurrent,
        }
    }

    /// True if `self` is before or the same as `other`.
    pub fn is_before_or_same(&self, other: &VectorClock) -> bool {
        matches!(
            self.compare(other),
            ClockOrdering::Before | ClockOrdering::Same
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use proptest::prelude::*;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "h", i + 1), u64::from(i))
    }

    #[test]
    fn increment_makes_a_clock_after_its_origin() {
        let a = VectorClock::new();
        let b = a.increment(&node(1));
        assert_eq!(a.compare(&b), ClockOrdering::Before);
        assert_eq!(b.compare(&a), ClockOrdering::After);
        assert_eq!(b.compare(&b.clone()), ClockOrdering::Same);
    }

    #[test]
    fn independent_increments_are_concurrent_and_merge_dominates_both() {
        let base = VectorClock::new().increment(&node(1));
        let x = base.increment(&node(2));
        let y = base.increment(&node(3));
        assert_eq!(x.compare(&y), ClockOrdering::Concurrent);
        let m = x.merge(&y);
        assert_eq!(x.compare(&m), ClockOrdering::Before);
        assert_eq!(y.compare(&m), ClockOrdering::Before);
    }

    #[test]
    fn prune_removes_a_node() {
        let v = VectorClock::new().increment(&node(1)).increment(&node(2));
        let p = v.prune(&node(1));
        assert_eq!(p.get(&node(1)), 0);
        assert_eq!(p.get(&node(2)), 1);
        assert_eq!(p.len(), 1);
    }

    fn arb_clock() -> impl Strategy<Value = VectorClock> {
        proptest::collection::btree_map(0u16..6, 1u64..5, 0..6)
            .prop_map(|m| VectorClock::from_entries(m.into_iter().map(|(k, v)| (node(k), v))))
    }

    proptest! {
        #[test]
        fn merge_is_commutative(a in arb_clock(), b in arb_clock()) {
            prop_assert_eq!(a.merge(&b), b.merge(&a));
        }

        #[test]
        fn merge_is_associative(a in arb_clock(), b in arb_clock(), c in arb_clock()) {
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
        }

        #[test]
        fn merge_is_idempotent(a in arb_clock()) {
            prop_assert_eq!(a.merge(&a), a);
        }

        #[test]
        fn compare_is_antisymmetric(a in arb_clock(), b in arb_clock()) {
            let expected = match a.compare(&b) {
                ClockOrdering::Before => ClockOrdering::After,
                ClockOrdering::After => ClockOrdering::Before,
                other => other,
            };
            prop_assert_eq!(b.compare(&a), expected);
        }

        #[test]
        fn merge_is_after_or_same_as_inputs(a in arb_clock(), b in arb_clock()) {
            let m = a.merge(&b);
            prop_assert!(a.is_before_or_same(&m));
            prop_assert!(b.is_before_or_same(&m));
        }
    }
}
