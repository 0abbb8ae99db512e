//! [`RemovedNodePruning`]: pruning the entries of a replica removed from the cluster, and
//! `no_replica_entries!`, its implementation for types that hold no per-replica entries.

use super::replica_id::ReplicaId;

/// Implements [`RemovedNodePruning`] for a type that holds no per-replica entries.
macro_rules! no_replica_entries {
    ([$($g:tt)*] $t:ty) => {
        impl<$($g)*> $crate::ddata::removed_node_pruning::RemovedNodePruning for $t {
            fn modified_by_nodes(&self) -> std::collections::BTreeSet<$crate::ddata::replica_id::ReplicaId> {
                std::collections::BTreeSet::new()
            }
            fn needs_pruning_from(&self, _removed: $crate::ddata::replica_id::ReplicaId) -> bool {
                false
            }
            fn prune(&mut self, _removed: $crate::ddata::replica_id::ReplicaId, _into: $crate::ddata::replica_id::ReplicaId) {}
            fn prune_cleanup(&mut self, _removed: $crate::ddata::replica_id::ReplicaId) {}
        }
    };
}

/// A CRDT that holds per-replica entries, which must be pruned when a replica is removed
/// from the cluster (Akka's pruning protocol: first `prune` collapses the removed replica's
/// entries into a live one, then — once every replica has seen that — `prune_cleanup`
/// drops any late data from the removed replica).
pub trait RemovedNodePruning {
    /// The replicas with entries in this value.
    fn modified_by_nodes(&self) -> std::collections::BTreeSet<ReplicaId>;

    /// True if `removed` has entries here.
    fn needs_pruning_from(&self, removed: ReplicaId) -> bool;

    /// Moves `removed`'s entries to `collapse_into` (the pruning node).
    fn prune(&mut self, removed: ReplicaId, collapse_into: ReplicaId);

    /// Drops `removed`'s entries (data from it that arrives after pruning).
    fn prune_cleanup(&mut self, removed: ReplicaId);
}
