//! Distributed Data: conflict-free replicated data types (CRDTs) and the Replicator that
//! keeps them replicated across the cluster.
//!
//! Every type here is a state-based CRDT: [`ReplicatedData::merge`] is commutative,
//! associative and idempotent, so replicas that have received the same updates, in any
//! order and any number of times, hold the same value (property-tested for every type).
//! Updates mutate in place and record a *delta* — the smallest state that carries the
//! update — which the Replicator sends instead of the whole value ([`DeltaReplicatedData`],
//! after Almeida, Shoker and Baquero, "Delta State Replicated Data Types", 2018). Types whose
//! entries belong to replicas support pruning the entries of a removed node
//! ([`RemovedNodePruning`]).
//!
//! Types (Akka's `akka.cluster.ddata`): [`GCounter`], [`PNCounter`], [`GSet`], [`ORSet`]
//! (an observed-remove set without tombstones, ORSWOT, after riak_dt and Bieniusa et al.,
//! "An optimized conflict-free replicated set", 2012), [`LWWRegister`], [`Flag`], [`ORMap`]
//! and the maps built on it: [`LWWMap`], [`PNCounterMap`], [`ORMultiMap`].
//!
//! Replicas are identified by [`ReplicaId`], the random 64-bit uid of a node's incarnation.

/// Implements [`RemovedNodePruning`] for a type that holds no per-replica entries.
macro_rules! no_replica_entries {
    ([$($g:tt)*] $t:ty) => {
        impl<$($g)*> $crate::ddata::RemovedNodePruning for $t {
            fn modified_by_nodes(&self) -> std::collections::BTreeSet<$crate::ddata::ReplicaId> {
                std::collections::BTreeSet::new()
            }
            fn needs_pruning_from(&self, _removed: $crate::ddata::ReplicaId) -> bool {
                false
            }
            fn prune(&mut self, _removed: $crate::ddata::ReplicaId, _into: $crate::ddata::ReplicaId) {}
            fn prune_cleanup(&mut self, _removed: $crate::ddata::ReplicaId) {}
        }
    };
}

mod flag;
mod gcounter;
mod gset;
mod lww_register;
mod maps;
mod ormap;
mod orset;
mod pncounter;
pub mod replicator;
mod version_vector;

#[cfg(test)]
mod laws;

pub use flag::Flag;
pub use gcounter::GCounter;
pub use gset::GSet;
pub use lww_register::LWWRegister;
pub use maps::{LWWMap, ORMultiMap, PNCounterMap};
pub use ormap::{ORMap, ORMapDelta, ORMapPartsError};
pub use orset::{ORSet, ORSetDelta};
pub use pncounter::PNCounter;
pub use replicator::{
    DataTypeRegistry, GetResult, Key, ReadConsistency, ReplicatedType, ReplicatedValue, Replicator,
    ReplicatorEvent, ReplicatorMessage, ReplicatorSettings, RequestId, UpdateResult,
    WriteConsistency,
};
pub use version_vector::{Dots, VersionVector};

use crate::address::UniqueAddress;

/// A replica: the uid of one node incarnation (random, 64 bits, like Riak's actor ids). A
/// restarted node is a new replica.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct ReplicaId(pub u64);

impl From<&UniqueAddress> for ReplicaId {
    fn from(u: &UniqueAddress) -> Self {
        ReplicaId(u.uid)
    }
}

impl std::fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

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
