//! [`ORMap`]: a map whose keys are an [`ORSet`] and whose values are CRDTs (Akka `ORMap`,
//! with the per-dot values of riak_dt's map).
//!
//! A key is present as its ORSet says (add-wins against a concurrent remove). Each write of a
//! key (a put or an update) takes a new dot for the key, like an ORSet add, and stores the
//! written value under that dot, replacing the dots — and values — the writer had seen. The
//! value shown is the merge of the values of the key's surviving dots, so concurrent writes
//! merge, and a remove takes away exactly the values it saw: a value never comes back
//! through a replica that had merged it before the remove. Deltas carry the dot and the whole
//! written value, so a replica that applies every delta in causal order holds the same state
//! as one that merged full states (property-tested).
//!
//! As in Akka, an update after a remove that a replica has not yet seen starts from that
//! replica's old value, which then survives the remove (add-wins).

use std::collections::{BTreeMap, BTreeSet};

use super::orset::{ORSet, ORSetDelta};
use super::removed_node_pruning::RemovedNodePruning;
use super::replica_id::ReplicaId;
use super::replicated_data::{DeltaReplicatedData, ReplicatedData};
use super::version_vector::Dots;

type Dot = (ReplicaId, u64);

/// The values of one key: one per surviving dot, and their merge (what is shown).
#[derive(Clone, Debug)]
struct Entry<V> {
    by_dot: BTreeMap<Dot, V>,
    value: V,
}

impl<V: ReplicatedData> Entry<V> {
    fn single(dot: Dot, value: V) -> Self {
        Entry {
            by_dot: BTreeMap::from([(dot, value.clone())]),
            value,
        }
    }

    /// From per-dot values; `None` if there are none.
    fn from_dots(by_dot: BTreeMap<Dot, V>) -> Option<Self> {
        let mut it = by_dot.values();
        let mut value = it.next()?.clone();
        for v in it {
            value.merge(v);
        }
        Some(Entry { by_dot, value })
    }
}

/// A map from `K` to CRDT values `V`. Encoded as its key set and a list of
/// (key, dot, value); a decoded map whose values do not match its keys' dots is refused.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(try_from = "ORMapRepr<K, V>")]
#[serde(bound(
    deserialize = "K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug, V: serde::Deserialize<'de> + DeltaReplicatedData"
))]
pub struct ORMap<K: Ord + Clone, V: DeltaReplicatedData> {
    keys: ORSet<K>,
    entries: BTreeMap<K, Entry<V>>,
    delta: Option<ORMapDelta<K, V>>,
}

/// A delta of an [`ORMap`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(bound(
    serialize = "K: serde::Serialize, V: serde::Serialize",
    deserialize = "K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug, V: serde::Deserialize<'de> + DeltaReplicatedData"
))]
pub enum ORMapDelta<K: Ord + Clone, V: DeltaReplicatedData> {
    /// `entry` was written: its new dot, the dots (and so values) it replaced, the value.
    Put {
        /// The key.
        entry: K,
        /// The write's dot (replica, counter).
        dot: (ReplicaId, u64),
        /// The key's dots at the writer before the write.
        replaces: Dots,
        /// The written value.
        value: V,
    },
    /// `entry` was removed: these were its dots at the remover.
    Remove {
        /// The key.
        entry: K,
        /// The dots removed.
        dots: Dots,
    },
    /// Several deltas, in order.
    Group(Vec<ORMapDelta<K, V>>),
}

impl<K: Ord + Clone, V: DeltaReplicatedData> Default for ORMap<K, V> {
    fn default() -> Self {
        ORMap {
            keys: ORSet::default(),
            entries: BTreeMap::new(),
            delta: None,
        }
    }
}

impl<K: Ord + Clone, V: DeltaReplicatedData> PartialEq for ORMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.keys == other.keys
            && self.entries.len() == other.entries.len()
            && self
                .entries
                .iter()
                .zip(other.entries.iter())
                .all(|((ka, a), (kb, b))| ka == kb && a.by_dot == b.by_dot)
    }
}

/// The encoded form of an [`ORMap`].
#[derive(serde::Deserialize)]
#[serde(bound(
    deserialize = "K: serde::Deserialize<'de> + Ord + Clone + std::fmt::Debug, V: serde::Deserialize<'de>"
))]
struct ORMapRepr<K: Ord + Clone, V> {
    keys: ORSet<K>,
    values: Vec<(K, Dot, V)>,
}

impl<K: Ord + Clone + std::fmt::Debug, V: DeltaReplicatedData> TryFrom<ORMapRepr<K, V>>
    for ORMap<K, V>
{
    type Error = ORMapPartsError;
    fn try_from(r: ORMapRepr<K, V>) -> Result<Self, ORMapPartsError> {
        ORMap::from_parts(r.keys, r.values)
    }
}

impl<K, V> serde::Serialize for ORMap<K, V>
where
    K: Ord + Clone + std::fmt::Debug + serde::Serialize,
    V: DeltaReplicatedData + serde::Serialize,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let values: Vec<(&K, Dot, &V)> = self.values_by_dot().collect();
        let mut st = s.serialize_struct("ORMap", 2)?;
        st.serialize_field("keys", &self.keys)?;
        st.serialize_field("values", &values)?;
        st.end()
    }
}

/// Why decoded parts do not make an [`ORMap`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ORMap parts disagree: a key's dots and its per-dot values differ")]
pub struct ORMapPartsError;

impl<K: Ord + Clone + std::fmt::Debug, V: DeltaReplicatedData> ORMap<K, V> {
    /// The empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// From its parts (a decoded value): the key set and, per key, one value per dot.
    ///
    /// # Errors
    /// [`ORMapPartsError`] if the values' dots are not exactly the keys' dots.
    pub fn from_parts(
        keys: ORSet<K>,
        values: impl IntoIterator<Item = (K, (ReplicaId, u64), V)>,
    ) -> Result<Self, ORMapPartsError> {
        let mut by_key: BTreeMap<K, BTreeMap<Dot, V>> = BTreeMap::new();
        for (k, dot, v) in values {
            if by_key.entry(k).or_default().insert(dot, v).is_some() {
                return Err(ORMapPartsError);
            }
        }
        let mut entries = BTreeMap::new();
        for (k, dots) in keys.parts().0 {
            let by_dot = by_key.remove(k).ok_or(ORMapPartsError)?;
            if by_dot.len() != dots.iter().count() || !dots.iter().all(|d| by_dot.contains_key(&d))
            {
                return Err(ORMapPartsError);
            }
            let entry = Entry::from_dots(by_dot).ok_or(ORMapPartsError)?;
            entries.insert(k.clone(), entry);
        }
        if !by_key.is_empty() {
            return Err(ORMapPartsError);
        }
        Ok(ORMap {
            keys,
            entries,
            delta: None,
        })
    }

    /// The key set (to encode the value).
    pub fn keys(&self) -> &ORSet<K> {
        &self.keys
    }

    /// Every (key, dot, value) (to encode the value).
    pub fn values_by_dot(&self) -> impl Iterator<Item = (&K, (ReplicaId, u64), &V)> {
        self.entries
            .iter()
            .flat_map(|(k, e)| e.by_dot.iter().map(move |(d, v)| (k, *d, v)))
    }

    /// The value of `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        self.entries.get(k).map(|e| &e.value)
    }

    /// True if `k` is present.
    pub fn contains_key(&self, k: &K) -> bool {
        self.entries.contains_key(k)
    }

    /// The entries, in key order.
    pub fn entries(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, e)| (k, &e.value))
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn record(&mut self, op: ORMapDelta<K, V>) {
        self.delta = Some(match self.delta.take() {
            None => op,
            Some(ORMapDelta::Group(mut v)) => {
                v.push(op);
                ORMapDelta::Group(v)
            }
            Some(d) => ORMapDelta::Group(vec![d, op]),
        });
    }

    /// Writes `value` at `k` under a new dot of `node`, replacing what this replica had.
    fn write(&mut self, node: ReplicaId, k: K, mut value: V) {
        let _ = value.take_delta();
        let (dot, replaces) = self.keys.add_dot(node, k.clone());
        self.entries
            .insert(k.clone(), Entry::single(dot, value.clone()));
        self.record(ORMapDelta::Put {
            entry: k,
            dot,
            replaces,
            value,
        });
    }

    /// Puts `value` at `k`, replacing the value this replica shows (other replicas merge it
    /// with concurrent writes).
    pub fn put(&mut self, node: ReplicaId, k: K, value: V) {
        self.write(node, k, value);
    }

    /// Updates the value at `k` with `modify` (starting from `initial` if absent). The
    /// delta carries the whole updated value.
    pub fn update(&mut self, node: ReplicaId, k: K, initial: V, modify: impl FnOnce(&mut V)) {
        let mut v = self.entries.get(&k).map_or(initial, |e| e.value.clone());
        modify(&mut v);
        self.write(node, k, v);
    }

    /// Removes `k` (the writes of it this replica has seen).
    pub fn remove(&mut self, node: ReplicaId, k: &K) {
        if self.entries.remove(k).is_none() {
            return;
        }
        self.keys.remove(node, k);
        if let Some(ORSetDelta::Remove { element, dots }) = self.keys.take_delta() {
            self.record(ORMapDelta::Remove {
                entry: element,
                dots,
            });
        }
    }

    /// Makes `k`'s values match its surviving dots, adding `written` if its dot survives.
    fn sync(&mut self, k: &K, written: Option<(Dot, &V)>) {
        let Some(dots) = self.keys.dots(k) else {
            self.entries.remove(k);
            return;
        };
        let mut by_dot = self.entries.remove(k).map(|e| e.by_dot).unwrap_or_default();
        by_dot.retain(|d, _| dots.contains(d.0, d.1));
        if let Some((dot, v)) = written {
            if dots.contains(dot.0, dot.1) {
                by_dot.entry(dot).or_insert_with(|| v.clone());
            }
        }
        if let Some(e) = Entry::from_dots(by_dot) {
            self.entries.insert(k.clone(), e);
        }
    }

    fn apply(&mut self, d: &ORMapDelta<K, V>) {
        match d {
            ORMapDelta::Put {
                entry,
                dot,
                replaces,
                value,
            } => {
                self.keys.merge_delta(&ORSetDelta::Add {
                    element: entry.clone(),
                    dot: *dot,
                    replaces: replaces.clone(),
                });
                self.sync(entry, Some((*dot, value)));
            }
            ORMapDelta::Remove { entry, dots } => {
                self.keys.merge_delta(&ORSetDelta::Remove {
                    element: entry.clone(),
                    dots: dots.clone(),
                });
                self.sync(entry, None);
            }
            ORMapDelta::Group(v) => {
                for d in v {
                    self.apply(d);
                }
            }
        }
    }
}

impl<K: Ord + Clone + std::fmt::Debug, V: DeltaReplicatedData> ReplicatedData for ORMap<K, V> {
    fn merge(&mut self, other: &Self) {
        let keys = self.keys.merged(&other.keys);
        let mut entries = BTreeMap::new();
        for (k, dots) in keys.parts().0 {
            let mut by_dot = BTreeMap::new();
            for d in dots.iter() {
                // A surviving dot is on at least one side; its value is the same on both.
                let v = self
                    .entries
                    .get(k)
                    .and_then(|e| e.by_dot.get(&d))
                    .or_else(|| other.entries.get(k).and_then(|e| e.by_dot.get(&d)));
                if let Some(v) = v {
                    by_dot.insert(d, v.clone());
                }
            }
            if let Some(e) = Entry::from_dots(by_dot) {
                entries.insert(k.clone(), e);
            }
        }
        self.keys = keys;
        self.entries = entries;
    }
}

impl<K: Ord + Clone + std::fmt::Debug, V: DeltaReplicatedData> DeltaReplicatedData for ORMap<K, V> {
    type Delta = ORMapDelta<K, V>;

    fn take_delta(&mut self) -> Option<ORMapDelta<K, V>> {
        self.delta.take()
    }

    fn merge_delta(&mut self, delta: &ORMapDelta<K, V>) {
        self.apply(delta);
    }
}

impl<K, V> RemovedNodePruning for ORMap<K, V>
where
    K: Ord + Clone + std::fmt::Debug,
    V: DeltaReplicatedData + RemovedNodePruning,
{
    fn modified_by_nodes(&self) -> BTreeSet<ReplicaId> {
        let mut s = self.keys.modified_by_nodes();
        for e in self.entries.values() {
            s.extend(e.value.modified_by_nodes());
        }
        s
    }

    fn needs_pruning_from(&self, removed: ReplicaId) -> bool {
        self.keys.needs_pruning_from(removed)
            || self
                .entries
                .values()
                .any(|e| e.value.needs_pruning_from(removed))
    }

    /// Every key with a dot or a value entry of `removed` is written again by
    /// `collapse_into` with its merged value pruned (one new dot replacing all), then the
    /// removed replica leaves the key set's context.
    fn prune(&mut self, removed: ReplicaId, collapse_into: ReplicaId) {
        let affected: Vec<K> = self
            .entries
            .iter()
            .filter(|(k, e)| {
                self.keys.dots(k).is_some_and(|d| d.has_replica(removed))
                    || e.value.needs_pruning_from(removed)
            })
            .map(|(k, _)| k.clone())
            .collect();
        // Written again by `collapse_into`, as deltas too (the replicator sends the pruning
        // marker with them).
        for k in affected {
            if let Some(e) = self.entries.get(&k) {
                let mut v = e.value.clone();
                v.prune(removed, collapse_into);
                self.write(collapse_into, k, v);
            }
        }
        self.keys.prune(removed, collapse_into);
        let _ = self.keys.take_delta();
    }

    fn prune_cleanup(&mut self, removed: ReplicaId) {
        self.keys.prune_cleanup(removed);
        let keys: Vec<K> = self.entries.keys().cloned().collect();
        for k in keys {
            self.sync(&k, None);
            if let Some(e) = self.entries.get_mut(&k) {
                for v in e.by_dot.values_mut() {
                    v.prune_cleanup(removed);
                }
                if let Some(fresh) = Entry::from_dots(std::mem::take(&mut e.by_dot)) {
                    *e = fresh;
                }
            }
        }
    }
}
