//! [`GCounter`]: a grow-only counter — one count per replica, the value is their sum (Akka
//! `GCounter`; Shapiro et al., "A comprehensive study of CRDTs", 2011).

use std::collections::{BTreeMap, BTreeSet};

use super::removed_node_pruning::RemovedNodePruning;
use super::replica_id::ReplicaId;
use super::replicated_data::{DeltaReplicatedData, ReplicatedData};

/// A grow-only counter. Counts saturate at `u64::MAX` (and so does the value).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct GCounter {
    state: BTreeMap<ReplicaId, u64>,
    #[serde(skip)]
    delta: Option<Box<GCounter>>,
}

impl PartialEq for GCounter {
    fn eq(&self, other: &Self) -> bool {
        self.state == other.state
    }
}

impl Eq for GCounter {}

impl GCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value: the sum of all replicas' counts (saturating).
    pub fn value(&self) -> u64 {
        self.state.values().fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Adds `n` at `node`.
    pub fn increment(&mut self, node: ReplicaId, n: u64) {
        if n == 0 {
            return;
        }
        let c = self.state.entry(node).or_insert(0);
        *c = c.saturating_add(n);
        let c = *c;
        self.delta
            .get_or_insert_with(Default::default)
            .state
            .insert(node, c);
    }

    /// The per-replica counts.
    pub fn entries(&self) -> impl Iterator<Item = (ReplicaId, u64)> + '_ {
        self.state.iter().map(|(k, v)| (*k, *v))
    }

    /// From per-replica counts (a decoded value).
    pub fn from_entries(entries: impl IntoIterator<Item = (ReplicaId, u64)>) -> Self {
        GCounter {
            state: entries.into_iter().filter(|(_, v)| *v > 0).collect(),
            delta: None,
        }
    }
}

impl ReplicatedData for GCounter {
    fn merge(&mut self, other: &Self) {
        for (r, v) in &other.state {
            let e = self.state.entry(*r).or_insert(0);
            if *v > *e {
                *e = *v;
            }
        }
    }
}

impl DeltaReplicatedData for GCounter {
    type Delta = GCounter;

    fn take_delta(&mut self) -> Option<GCounter> {
        self.delta.take().map(|d| *d)
    }

    fn merge_delta(&mut self, delta: &GCounter) {
        self.merge(delta);
    }
}

impl RemovedNodePruning for GCounter {
    fn modified_by_nodes(&self) -> BTreeSet<ReplicaId> {
        self.state.keys().copied().collect()
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.state.contains_key(&removed)
    }

    fn prune(&mut self, removed: ReplicaId, collapse_into: ReplicaId) {
        if let Some(n) = self.state.remove(&removed) {
            self.increment(collapse_into, n);
        }
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.state.remove(&removed);
    }
}
