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

#[macro_use]
mod removed_node_pruning;

mod flag;
mod gcounter;
mod gset;
mod lww_register;
mod maps;
mod ormap;
mod orset;
mod pncounter;
mod replica_id;
mod replicated_data;
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
pub use removed_node_pruning::RemovedNodePruning;
pub use replica_id::ReplicaId;
pub use replicated_data::{DeltaReplicatedData, ReplicatedData};
pub use replicator::{
    DataTypeRegistry, GetResult, Key, ReadConsistency, ReplicatedType, ReplicatedValue, Replicator,
    ReplicatorEvent, ReplicatorMessage, ReplicatorSettings, RequestId, UpdateResult,
    WriteConsistency,
};
pub use version_vector::{Dots, VersionVector};
