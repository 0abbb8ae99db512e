//! The maps built on [`ORMap`] and [`ORSet`] (Akka's `LWWMap`, `PNCounterMap`,
//! `ORMultiMap`).

use std::collections::BTreeSet;

use super::lww_register::LWWRegister;
use super::ormap::{ORMap, ORMapDelta};
use super::orset::{ORSet, ORSetDelta};
use super::pncounter::PNCounter;
use super::removed_node_pruning::RemovedNodePruning;
use super::replica_id::ReplicaId;
use super::replicated_data::{DeltaReplicatedData, ReplicatedData};

/// Implements the CRDT traits of a wrapper by delegating to its one field.
macro_rules! delegate_crdt {
    ([$($bounds:tt)*] $ty:ty, $field:ident, $delta:ty) => {
        impl<$($bounds)*> ReplicatedData for $ty {
            fn merge(&mut self, other: &Self) {
                self.$field.merge(&other.$field);
            }
        }

        impl<$($bounds)*> DeltaReplicatedData for $ty {
            type Delta = $delta;

            fn take_delta(&mut self) -> Option<Self::Delta> {
                self.$field.take_delta()
            }

            fn merge_delta(&mut self, delta: &Self::Delta) {
                self.$field.merge_delta(delta);
            }
        }

        impl<$($bounds)*> RemovedNodePruning for $ty {
            fn modified_by_nodes(&self) -> BTreeSet<ReplicaId> {
                self.$field.modified_by_nodes()
            }
            fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
                self.$field.needs_pruning_from(removed)
            }
            fn prune(&mut self, removed: ReplicaId, collapse_into: ReplicaId) {
                self.$field.prune(removed, collapse_into);
            }
            fn prune_cleanup(&mut self, removed: ReplicaId) {
                self.$field.prune_cleanup(removed);
            }
        }
    };
}

/// A map of last-writer-wins registers: `put` overwrites, concurrent puts resolve by
/// timestamp (Akka `LWWMap`; needs roughly synchronised clocks).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(bound(
    serialize = "K: serde::Serialize + std::fmt::Debug, V: serde::Serialize",
    deserialize = "K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug, V: serde::Deserialize<'de> + Clone + PartialEq + std::fmt::Debug"
))]
pub struct LWWMap<K: Ord + Clone, V: Clone + PartialEq + std::fmt::Debug> {
    map: ORMap<K, LWWRegister<V>>,
}

impl<K: Ord + Clone, V: Clone + PartialEq + std::fmt::Debug> Default for LWWMap<K, V> {
    fn default() -> Self {
        LWWMap {
            map: ORMap::default(),
        }
    }
}

impl<K: Ord + Clone + std::fmt::Debug, V: Clone + PartialEq + std::fmt::Debug> LWWMap<K, V> {
    /// The empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// From the underlying map (a decoded value).
    pub fn from_map(map: ORMap<K, LWWRegister<V>>) -> Self {
        LWWMap { map }
    }

    /// The underlying map (to encode the value).
    pub fn as_map(&self) -> &ORMap<K, LWWRegister<V>> {
        &self.map
    }

    /// Puts `value` at `k`, written at `now_ms` by `node`.
    pub fn put(&mut self, node: ReplicaId, k: K, value: V, now_ms: i64) {
        let initial = LWWRegister::new(node, value.clone(), now_ms);
        self.map
            .update(node, k, initial, |r| r.set(node, value, now_ms));
    }

    /// The value at `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k).map(|r| r.value())
    }

    /// Removes `k`.
    pub fn remove(&mut self, node: ReplicaId, k: &K) {
        self.map.remove(node, k);
    }

    /// The entries, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.entries().map(|(k, r)| (k, r.value()))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

delegate_crdt!(
    [K: Ord + Clone + std::fmt::Debug, V: Clone + PartialEq + std::fmt::Debug]
    LWWMap<K, V>, map, ORMapDelta<K, LWWRegister<V>>
);

/// A map of counters (Akka `PNCounterMap`). A removed key's counts may come back on
/// replicas that never saw the remove if the key is incremented again (as in Akka).
#[derive(Clone, Debug, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(bound(
    serialize = "K: serde::Serialize + std::fmt::Debug",
    deserialize = "K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug"
))]
pub struct PNCounterMap<K: Ord + Clone> {
    map: ORMap<K, PNCounter>,
}

impl<K: Ord + Clone + std::fmt::Debug> PNCounterMap<K> {
    /// The empty map.
    pub fn new() -> Self {
        PNCounterMap {
            map: ORMap::default(),
        }
    }

    /// From the underlying map (a decoded value).
    pub fn from_map(map: ORMap<K, PNCounter>) -> Self {
        PNCounterMap { map }
    }

    /// The underlying map (to encode the value).
    pub fn as_map(&self) -> &ORMap<K, PNCounter> {
        &self.map
    }

    /// Adds `n` (negative: subtracts) to the counter at `k`.
    pub fn increment(&mut self, node: ReplicaId, k: K, n: i64) {
        self.map
            .update(node, k, PNCounter::new(), |c| c.increment(node, n));
    }

    /// The counter's value at `k`.
    pub fn get(&self, k: &K) -> Option<i128> {
        self.map.get(k).map(PNCounter::value)
    }

    /// Removes `k`.
    pub fn remove(&mut self, node: ReplicaId, k: &K) {
        self.map.remove(node, k);
    }

    /// The entries, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&K, i128)> {
        self.map.entries().map(|(k, c)| (k, c.value()))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

delegate_crdt!(
    [K: Ord + Clone + std::fmt::Debug]
    PNCounterMap<K>, map, ORMapDelta<K, PNCounter>
);

/// A map from keys to sets of values (Akka `ORMultiMap`): an observed-remove set of
/// (key, value) bindings, so each binding is add-wins on its own and a key is present while
/// it has a binding.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(bound(
    serialize = "K: serde::Serialize, V: serde::Serialize",
    deserialize = "K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug, V: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug"
))]
pub struct ORMultiMap<K: Ord + Clone, V: Ord + Clone> {
    bindings: ORSet<(K, V)>,
}

impl<K: Ord + Clone, V: Ord + Clone> Default for ORMultiMap<K, V> {
    fn default() -> Self {
        ORMultiMap {
            bindings: ORSet::default(),
        }
    }
}

impl<K: Ord + Clone + std::fmt::Debug, V: Ord + Clone + std::fmt::Debug> ORMultiMap<K, V> {
    /// The empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// From the bindings (a decoded value).
    pub fn from_bindings(bindings: ORSet<(K, V)>) -> Self {
        ORMultiMap { bindings }
    }

    /// The bindings (to encode the value).
    pub fn bindings(&self) -> &ORSet<(K, V)> {
        &self.bindings
    }

    /// Binds `v` to `k`.
    pub fn add_binding(&mut self, node: ReplicaId, k: K, v: V) {
        self.bindings.add(node, (k, v));
    }

    /// Unbinds `v` from `k`.
    pub fn remove_binding(&mut self, node: ReplicaId, k: &K, v: &V) {
        self.bindings.remove(node, &(k.clone(), v.clone()));
    }

    /// Replaces the values of `k` by `values`.
    pub fn put(&mut self, node: ReplicaId, k: K, values: impl IntoIterator<Item = V>) {
        let values: BTreeSet<V> = values.into_iter().collect();
        for old in self.get(&k) {
            if !values.contains(&old) {
                self.remove_binding(node, &k, &old);
            }
        }
        for v in values {
            if !self.bindings.contains(&(k.clone(), v.clone())) {
                self.add_binding(node, k.clone(), v);
            }
        }
    }

    /// Removes `k` and all its values.
    pub fn remove(&mut self, node: ReplicaId, k: &K) {
        for v in self.get(k) {
            self.remove_binding(node, k, &v);
        }
    }

    /// The values of `k` (empty if absent).
    pub fn get(&self, k: &K) -> BTreeSet<V> {
        self.bindings
            .elements()
            .filter(|(bk, _)| bk == k)
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// The keys, in order.
    pub fn keys(&self) -> BTreeSet<K> {
        self.bindings.elements().map(|(k, _)| k.clone()).collect()
    }

    /// True if `k` has a value.
    pub fn contains_key(&self, k: &K) -> bool {
        self.bindings.elements().any(|(bk, _)| bk == k)
    }
}

delegate_crdt!(
    [K: Ord + Clone + std::fmt::Debug, V: Ord + Clone + std::fmt::Debug]
    ORMultiMap<K, V>, bindings, ORSetDelta<(K, V)>
);
