//! [`ReplicatedData`] and [`DeltaReplicatedData`]: the state-based CRDT contract (merge)
//! and its delta-state extension.

/// A state-based CRDT.
pub trait ReplicatedData: Clone + PartialEq + std::fmt::Debug {
    /// Merges `other` into `self`: commutative, associative and idempotent.
    fn merge(&mut self, other: &Self);

    /// `self` merged with `other`.
    fn merged(&self, other: &Self) -> Self {
        let mut m = self.clone();
        m.merge(other);
        m
    }
}

/// A CRDT whose updates also produce a delta to replicate instead of the whole state.
pub trait DeltaReplicatedData: ReplicatedData {
    /// What a delta is. Applying the deltas of a replica in the order they were made to any
    /// replica that had applied that replica's earlier deltas gives the same state as merging
    /// its full state (the Replicator guarantees that order and falls back to full state on
    /// a gap).
    type Delta: Clone + PartialEq + std::fmt::Debug;

    /// Takes the delta accumulated since the last take; `None` if nothing changed. Equality
    /// of values ignores a pending delta.
    fn take_delta(&mut self) -> Option<Self::Delta>;

    /// Applies a delta.
    fn merge_delta(&mut self, delta: &Self::Delta);
}
