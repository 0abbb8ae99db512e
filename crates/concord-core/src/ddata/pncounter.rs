//! [`PNCounter`]: a counter that goes up and down — two [`GCounter`]s, increments and
//! decrements; the value is their difference (Akka `PNCounter`).

use std::collections::BTreeSet;

use super::gcounter::GCounter;
use super::removed_node_pruning::RemovedNodePruning;
use super::replica_id::ReplicaId;
use super::replicated_data::{DeltaReplicatedData, ReplicatedData};

/// An increment/decrement counter. The value is `i128` so no sum of `u64` counts overflows.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PNCounter {
    increments: GCounter,
    decrements: GCounter,
}

/// A delta of a [`PNCounter`]: the changed increment and decrement counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PNCounterDelta {
    /// Changed increment counts.
    pub increments: GCounter,
    /// Changed decrement counts.
    pub decrements: GCounter,
}

impl PNCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// From the two grow-only halves (a decoded value).
    pub fn from_parts(increments: GCounter, decrements: GCounter) -> Self {
        PNCounter {
            increments,
            decrements,
        }
    }

    /// The two grow-only halves.
    pub fn parts(&self) -> (&GCounter, &GCounter) {
        (&self.increments, &self.decrements)
    }

    /// The value.
    pub fn value(&self) -> i128 {
        i128::from(self.increments.value()) - i128::from(self.decrements.value())
    }

    /// Adds `n` (negative: subtracts) at `node`.
    pub fn increment(&mut self, node: ReplicaId, n: i64) {
        if n >= 0 {
            self.increments.increment(node, n.unsigned_abs());
        } else {
            self.decrements.increment(node, n.unsigned_abs());
        }
    }

    /// Subtracts `n` at `node`.
    pub fn decrement(&mut self, node: ReplicaId, n: u64) {
        self.decrements.increment(node, n);
    }
}

impl ReplicatedData for PNCounter {
    fn merge(&mut self, other: &Self) {
        self.increments.merge(&other.increments);
        self.decrements.merge(&other.decrements);
    }
}

impl DeltaReplicatedData for PNCounter {
    type Delta = PNCounterDelta;

    fn take_delta(&mut self) -> Option<PNCounterDelta> {
        let (i, d) = (self.increments.take_delta(), self.decrements.take_delta());
        if i.is_none() && d.is_none() {
            return None;
        }
        Some(PNCounterDelta {
            increments: i.unwrap_or_default(),
            decrements: d.unwrap_or_default(),
        })
    }

    fn merge_delta(&mut self, delta: &PNCounterDelta) {
        self.increments.merge(&delta.increments);
        self.decrements.merge(&delta.decrements);
    }
}

impl RemovedNodePruning for PNCounter {
    fn modified_by_nodes(&self) -> BTreeSet<ReplicaId> {
        let mut s = self.increments.modified_by_nodes();
        s.extend(self.decrements.modified_by_nodes());
        s
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.increments.needs_pruning_from(removed) || self.decrements.needs_pruning_from(removed)
    }

    fn prune(&mut self, removed: ReplicaId, collapse_into: ReplicaId) {
        self.increments.prune(removed, collapse_into);
        self.decrements.prune(removed, collapse_into);
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.increments.prune_cleanup(removed);
        self.decrements.prune_cleanup(removed);
    }
}
