//! [`DataEnvelope`]: a replicated value with the replicator's metadata — the pruning state
//! of removed replicas and the delta versions it includes — as Akka's `DataEnvelope`; its
//! wire form [`SerializedEnvelope`]; and its [`Digest`], compared in anti-entropy gossip.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::{Address, UniqueAddress};
use crate::ddata::replica_id::ReplicaId;
use crate::ddata::version_vector::VersionVector;

use super::value::{DataError, DataTypeId, DataTypeRegistry, ReplicatedValue};

/// A 128-bit xxh3 digest of an envelope (its data and pruning state; not its delta
/// versions), as Akka's SHA-1 digest in `Status`. Equal digests mean equal envelopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub u128);

impl Digest {
    /// The digest of a deleted key.
    pub const DELETED: Digest = Digest(1);
    /// The digest of a key a replica does not have (in a `Status` reply).
    pub const NOT_FOUND: Digest = Digest(0);
}

/// The pruning of one removed replica's entries in one value (Akka's `PruningState`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PruningState {
    /// `owner` will collapse the removed replica's entries into its own once every node in
    /// `seen` has seen this marker.
    Initialized {
        /// The node that prunes.
        owner: UniqueAddress,
        /// The nodes that have seen the marker.
        seen: BTreeSet<Address>,
    },
    /// Done: data from the removed replica arriving later is cleaned away, until
    /// `obsolete_at_ms` (wall clock, ms since the epoch) when the marker is dropped.
    Performed {
        /// When the marker may be dropped, ms since the epoch.
        obsolete_at_ms: u64,
    },
}

impl PruningState {
    /// Akka's merge: Performed wins (the later expiry); two Initialized with the same
    /// owner union their seen sets, otherwise the lower owner address wins.
    pub fn merge(&self, other: &PruningState) -> PruningState {
        use PruningState::*;
        match (self, other) {
            (Performed { obsolete_at_ms: a }, Performed { obsolete_at_ms: b }) => Performed {
                obsolete_at_ms: (*a).max(*b),
            },
            (p @ Performed { .. }, _) | (_, p @ Performed { .. }) => p.clone(),
            (
                Initialized {
                    owner: o1,
                    seen: s1,
                },
                Initialized {
                    owner: o2,
                    seen: s2,
                },
            ) => {
                if o1 == o2 {
                    Initialized {
                        owner: o1.clone(),
                        seen: s1.union(s2).cloned().collect(),
                    }
                } else if o1 < o2 {
                    self.clone()
                } else {
                    other.clone()
                }
            }
        }
    }
}

/// A key's value, or the tombstone of a deleted key.
#[derive(Debug)]
pub enum EnvelopeData {
    /// The value.
    Value(Box<dyn ReplicatedValue>),
    /// Deleted for good: the key can never be used again (Akka's `DeletedData`).
    Deleted,
}

impl Clone for EnvelopeData {
    fn clone(&self) -> Self {
        match self {
            EnvelopeData::Value(v) => EnvelopeData::Value(v.clone_value()),
            EnvelopeData::Deleted => EnvelopeData::Deleted,
        }
    }
}

/// A replicated value with its pruning state and the delta versions it includes.
#[derive(Debug, Clone)]
pub struct DataEnvelope {
    /// The value or tombstone.
    pub data: EnvelopeData,
    /// Pruning of removed replicas, by removed replica.
    pub pruning: BTreeMap<ReplicaId, PruningState>,
    /// Per origin replica, the highest delta sequence number this value includes.
    pub delta_versions: VersionVector,
}

/// The wire (and durable store) form of a [`DataEnvelope`].
#[derive(Clone, Debug, PartialEq)]
pub struct SerializedEnvelope {
    /// The type of the value.
    pub data_type: DataTypeId,
    /// The encoded value; `None` for a deleted key.
    pub data: Option<Vec<u8>>,
    /// Pruning states.
    pub pruning: Vec<(ReplicaId, PruningState)>,
    /// Delta versions.
    pub delta_versions: Vec<(ReplicaId, u64)>,
}

impl SerializedEnvelope {
    /// Approximate size on the wire, bytes.
    pub fn size_bytes(&self) -> usize {
        let pruning: usize = self
            .pruning
            .iter()
            .map(|(_, p)| match p {
                PruningState::Initialized { seen, .. } => 64 + seen.len() * 48,
                PruningState::Performed { .. } => 24,
            })
            .sum();
        16 + self.data.as_ref().map_or(0, Vec::len) + pruning + self.delta_versions.len() * 16
    }
}

impl DataEnvelope {
    /// A fresh envelope around `value`.
    pub fn new(value: Box<dyn ReplicatedValue>) -> Self {
        DataEnvelope {
            data: EnvelopeData::Value(value),
            pruning: BTreeMap::new(),
            delta_versions: VersionVector::new(),
        }
    }

    /// The tombstone of a deleted key.
    pub fn deleted() -> Self {
        DataEnvelope {
            data: EnvelopeData::Deleted,
            pruning: BTreeMap::new(),
            delta_versions: VersionVector::new(),
        }
    }

    /// True for a tombstone.
    pub fn is_deleted(&self) -> bool {
        matches!(self.data, EnvelopeData::Deleted)
    }

    /// The value, unless deleted.
    pub fn value(&self) -> Option<&dyn ReplicatedValue> {
        match &self.data {
            EnvelopeData::Value(v) => Some(v.as_ref()),
            EnvelopeData::Deleted => None,
        }
    }

    /// The value, unless deleted.
    pub fn value_mut(&mut self) -> Option<&mut Box<dyn ReplicatedValue>> {
        match &mut self.data {
            EnvelopeData::Value(v) => Some(v),
            EnvelopeData::Deleted => None,
        }
    }

    /// The type id of the value (`None` for a tombstone).
    pub fn data_type(&self) -> Option<DataTypeId> {
        self.value().map(|v| v.data_type())
    }

    /// Drops the entries of every replica whose pruning was performed (late data).
    pub fn cleanup(&mut self) {
        let performed: Vec<ReplicaId> = self
            .pruning
            .iter()
            .filter(|(_, p)| matches!(p, PruningState::Performed { .. }))
            .map(|(r, _)| *r)
            .collect();
        if let EnvelopeData::Value(v) = &mut self.data {
            for r in performed {
                if v.pruning_needed_from(r) {
                    v.cleanup_pruned(r);
                }
            }
        }
    }

    /// Merges `other` (Akka's `DataEnvelope.merge`): a tombstone wins; pruning states
    /// merge (performed markers past `now_ms` are dropped); both values are cleaned of
    /// pruned replicas, then merged; delta versions merge.
    ///
    /// # Errors
    /// [`DataError::TypeMismatch`] if the values have different types; `self` is unchanged.
    pub fn merge(&mut self, other: &DataEnvelope, now_ms: u64) -> Result<(), DataError> {
        if other.is_deleted() {
            *self = DataEnvelope::deleted();
            return Ok(());
        }
        if self.is_deleted() {
            return Ok(());
        }
        if let (Some(a), Some(b)) = (self.value(), other.value()) {
            if a.data_type() != b.data_type() {
                return Err(DataError::TypeMismatch {
                    held: a.type_name(),
                    given: b.type_name(),
                });
            }
        }
        for (r, p) in &other.pruning {
            let merged = match self.pruning.get(r) {
                Some(mine) => mine.merge(p),
                None => p.clone(),
            };
            self.pruning.insert(*r, merged);
        }
        self.pruning.retain(|_, p| match p {
            PruningState::Performed { obsolete_at_ms } => *obsolete_at_ms > now_ms,
            PruningState::Initialized { .. } => true,
        });
        let mut theirs = other.clone();
        theirs.pruning = self.pruning.clone();
        theirs.cleanup();
        self.cleanup();
        if let (EnvelopeData::Value(a), EnvelopeData::Value(b)) = (&mut self.data, &theirs.data) {
            a.merge_value(b.as_ref())?;
        }
        self.delta_versions.merge(&other.delta_versions);
        Ok(())
    }

    /// Adds `node` to the seen set of every initialized pruning; true if anything changed.
    pub fn add_seen(&mut self, node: &Address) -> bool {
        let mut changed = false;
        for p in self.pruning.values_mut() {
            if let PruningState::Initialized { seen, .. } = p {
                changed |= seen.insert(node.clone());
            }
        }
        changed
    }

    /// The wire form.
    pub fn serialize(&self) -> SerializedEnvelope {
        self.serialize_with(true)
    }

    fn serialize_with(&self, delta_versions: bool) -> SerializedEnvelope {
        let (data_type, data) = match &self.data {
            EnvelopeData::Value(v) => (v.data_type(), Some(v.encode())),
            EnvelopeData::Deleted => (DataTypeId(0), None),
        };
        SerializedEnvelope {
            data_type,
            data,
            pruning: self.pruning.iter().map(|(r, p)| (*r, p.clone())).collect(),
            delta_versions: if delta_versions {
                self.delta_versions.entries().collect()
            } else {
                Vec::new()
            },
        }
    }

    /// From the wire form.
    ///
    /// # Errors
    /// [`DataError::UnknownType`] or [`DataError::Decode`].
    pub fn deserialize(
        s: &SerializedEnvelope,
        registry: &DataTypeRegistry,
    ) -> Result<Self, DataError> {
        let data = match &s.data {
            None => EnvelopeData::Deleted,
            Some(bytes) => EnvelopeData::Value(registry.decode(s.data_type, bytes)?),
        };
        let mut delta_versions = VersionVector::new();
        for (r, v) in &s.delta_versions {
            delta_versions.observe(*r, *v);
        }
        Ok(DataEnvelope {
            data,
            pruning: s.pruning.iter().cloned().collect(),
            delta_versions,
        })
    }

    /// The digest: of the encoded value and pruning state (not the delta versions).
    pub fn digest(&self) -> Digest {
        if self.is_deleted() {
            return Digest::DELETED;
        }
        let s = self.serialize_with(false);
        let mut h = xxhash_rust::xxh3::Xxh3::new();
        h.update(&s.data_type.0.to_le_bytes());
        if let Some(d) = &s.data {
            h.update(&(d.len() as u64).to_le_bytes());
            h.update(d);
        }
        for (r, p) in &s.pruning {
            h.update(&r.0.to_le_bytes());
            match p {
                PruningState::Initialized { owner, seen } => {
                    h.update(b"I");
                    h.update(owner.to_string().as_bytes());
                    for a in seen {
                        h.update(a.to_string().as_bytes());
                        h.update(b";");
                    }
                }
                PruningState::Performed { obsolete_at_ms } => {
                    h.update(b"P");
                    h.update(&obsolete_at_ms.to_le_bytes());
                }
            }
        }
        // 0 and 1 are the not-found and deleted digests.
        Digest(h.digest128().max(2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddata::gcounter::GCounter;
    use crate::ddata::replicated_data::ReplicatedData;

    fn ua(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "h", i), u64::from(i))
    }

    #[test]
    fn merge_cleans_late_data_of_pruned_replicas_and_deleted_wins() {
        let (a, gone) = (ReplicaId(1), ReplicaId(3));
        let mut c = GCounter::new();
        c.increment(a, 1);
        c.increment(gone, 5);
        let late = DataEnvelope::new(Box::new(c.clone()));
        let mut pruned = c.clone();
        crate::ddata::removed_node_pruning::RemovedNodePruning::prune(&mut pruned, gone, a);
        let mut env = DataEnvelope::new(Box::new(pruned));
        env.pruning.insert(
            gone,
            PruningState::Performed {
                obsolete_at_ms: 1_000,
            },
        );
        env.merge(&late, 10).unwrap();
        let v = env
            .value()
            .unwrap()
            .as_any()
            .downcast_ref::<GCounter>()
            .unwrap();
        assert_eq!(
            v.value(),
            6,
            "the late copy of the pruned count is not added again"
        );
        // Past its expiry the marker goes.
        env.merge(&late.clone(), 2_000).unwrap();
        assert!(env.pruning.is_empty());
        let mut d = env.clone();
        d.merge(&DataEnvelope::deleted(), 0).unwrap();
        assert!(d.is_deleted());
        d.merge(&env, 0).unwrap();
        assert!(d.is_deleted(), "a tombstone stays");
        assert_eq!(d.digest(), Digest::DELETED);
    }

    #[test]
    fn pruning_states_merge_as_akka() {
        let i = |o: u16, s: &[u16]| PruningState::Initialized {
            owner: ua(o),
            seen: s.iter().map(|x| ua(*x).address).collect(),
        };
        assert_eq!(i(1, &[1]).merge(&i(1, &[2])), i(1, &[1, 2]));
        assert_eq!(i(2, &[2]).merge(&i(1, &[1])), i(1, &[1]));
        let p = PruningState::Performed { obsolete_at_ms: 5 };
        assert_eq!(i(1, &[]).merge(&p), p);
        assert_eq!(p.merge(&i(1, &[])), p);
    }

    #[test]
    fn digest_changes_with_the_value_and_round_trips() {
        let reg = DataTypeRegistry::default();
        let mut c = GCounter::new();
        c.increment(ReplicaId(1), 1);
        let e1 = DataEnvelope::new(Box::new(c.clone()));
        c.increment(ReplicaId(1), 1);
        let e2 = DataEnvelope::new(Box::new(c.clone()));
        assert_ne!(e1.digest(), e2.digest());
        let back = DataEnvelope::deserialize(&e2.serialize(), &reg).unwrap();
        assert_eq!(back.digest(), e2.digest());
        let merged = {
            let mut m = e1.clone();
            m.merge(&e2, 0).unwrap();
            m
        };
        assert_eq!(merged.digest(), e2.digest());
        let _ = GCounter::new().merged(&GCounter::new());
    }
}
