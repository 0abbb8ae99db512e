//! Values of any CRDT type behind one interface, so the [`super::Replicator`] can hold,
//! merge, encode and prune them without knowing their types: [`ReplicatedValue`] (the
//! type-erased value), [`ReplicatedType`] (what a type needs to be replicated),
//! [`DataTypeRegistry`] (how to decode a type from the wire) and [`Key`] (a typed key).
//!
//! Values are encoded with `postcard` (serde); a type is named on the wire by
//! [`DataTypeId`], a 64-bit hash of its Rust type name, like Akka's serializer manifest.
//! Every node must register the types it replicates ([`DataTypeRegistry::register`]); a
//! value of a type a node does not know is counted and dropped there.

use std::any::Any;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Debug;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::ddata::flag::Flag;
use crate::ddata::gcounter::GCounter;
use crate::ddata::gset::GSet;
use crate::ddata::lww_register::LWWRegister;
use crate::ddata::maps::{LWWMap, ORMultiMap, PNCounterMap};
use crate::ddata::orset::ORSet;
use crate::ddata::pncounter::PNCounter;
use crate::ddata::removed_node_pruning::RemovedNodePruning;
use crate::ddata::replica_id::ReplicaId;
use crate::ddata::replicated_data::DeltaReplicatedData;

/// The wire name of a data type: the first 64 bits of the xxh3 hash of its Rust type name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DataTypeId(pub u64);

impl DataTypeId {
    /// The id of `T`.
    pub fn of<T: ?Sized + 'static>() -> Self {
        DataTypeId(xxhash_rust::xxh3::xxh3_64(
            std::any::type_name::<T>().as_bytes(),
        ))
    }
}

impl std::fmt::Display for DataTypeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Why bytes or values could not be used as data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DataError {
    /// The bytes are not a value (or delta) of the type.
    #[error("cannot decode {type_name}: {reason}")]
    Decode {
        /// The type's name.
        type_name: &'static str,
        /// The decoder's message.
        reason: String,
    },
    /// A value of another type was given.
    #[error("type mismatch: the key holds {held}, not {given}")]
    TypeMismatch {
        /// The type the key holds.
        held: &'static str,
        /// The type given.
        given: &'static str,
    },
    /// No type with this id is registered on this node.
    #[error("data type {0} is not registered on this node")]
    UnknownType(DataTypeId),
}

/// What a CRDT type needs to be replicated: merge and deltas, pruning of removed
/// replicas, and an encoding. Implemented for every type that has these.
pub trait ReplicatedType:
    DeltaReplicatedData + RemovedNodePruning + Serialize + DeserializeOwned + Send + Sync + 'static
where
    Self::Delta: Serialize + DeserializeOwned,
{
}

impl<T> ReplicatedType for T
where
    T: DeltaReplicatedData
        + RemovedNodePruning
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
    T::Delta: Serialize + DeserializeOwned,
{
}

/// A value of some [`ReplicatedType`], with its type erased.
pub trait ReplicatedValue: Send + Sync + Debug {
    /// The type's wire id.
    fn data_type(&self) -> DataTypeId;
    /// The type's Rust name (for messages).
    fn type_name(&self) -> &'static str;
    /// A copy.
    fn clone_value(&self) -> Box<dyn ReplicatedValue>;
    /// Merges `other` (of the same type) into `self`.
    ///
    /// # Errors
    /// [`DataError::TypeMismatch`] if `other` is of another type; `self` is unchanged.
    fn merge_value(&mut self, other: &dyn ReplicatedValue) -> Result<(), DataError>;
    /// Equal values (of the same type).
    fn eq_value(&self, other: &dyn ReplicatedValue) -> bool;
    /// The encoded value (without its pending delta).
    fn encode(&self) -> Vec<u8>;
    /// Takes the pending delta, encoded.
    fn take_delta_encoded(&mut self) -> Option<Vec<u8>>;
    /// Applies an encoded delta of this type.
    ///
    /// # Errors
    /// [`DataError::Decode`] if the bytes are not a delta of this type; `self` is unchanged.
    fn merge_delta_encoded(&mut self, bytes: &[u8]) -> Result<(), DataError>;
    /// The replicas with entries in the value ([`RemovedNodePruning::modified_by_nodes`]).
    fn replicas(&self) -> BTreeSet<ReplicaId>;
    /// [`RemovedNodePruning::needs_pruning_from`].
    fn pruning_needed_from(&self, removed: ReplicaId) -> bool;
    /// [`RemovedNodePruning::prune`].
    fn prune_into(&mut self, removed: ReplicaId, collapse_into: ReplicaId);
    /// [`RemovedNodePruning::prune_cleanup`].
    fn cleanup_pruned(&mut self, removed: ReplicaId);
    /// For downcasting to the concrete type.
    fn as_any(&self) -> &dyn Any;
    /// For downcasting to the concrete type.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl Clone for Box<dyn ReplicatedValue> {
    fn clone(&self) -> Self {
        self.clone_value()
    }
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DataError> {
    postcard::from_bytes(bytes).map_err(|e| DataError::Decode {
        type_name: std::any::type_name::<T>(),
        reason: e.to_string(),
    })
}

impl<T: ReplicatedType> ReplicatedValue for T
where
    T::Delta: Serialize + DeserializeOwned,
{
    fn data_type(&self) -> DataTypeId {
        DataTypeId::of::<T>()
    }

    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }

    fn clone_value(&self) -> Box<dyn ReplicatedValue> {
        Box::new(self.clone())
    }

    fn merge_value(&mut self, other: &dyn ReplicatedValue) -> Result<(), DataError> {
        match other.as_any().downcast_ref::<T>() {
            Some(o) => {
                self.merge(o);
                Ok(())
            }
            None => Err(DataError::TypeMismatch {
                held: self.type_name(),
                given: other.type_name(),
            }),
        }
    }

    fn eq_value(&self, other: &dyn ReplicatedValue) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }

    fn encode(&self) -> Vec<u8> {
        // Encoding into a Vec fails only for types whose `Serialize` fails by design.
        postcard::to_stdvec(self).unwrap_or_default()
    }

    fn take_delta_encoded(&mut self) -> Option<Vec<u8>> {
        let d = self.take_delta()?;
        postcard::to_stdvec(&d).ok()
    }

    fn merge_delta_encoded(&mut self, bytes: &[u8]) -> Result<(), DataError> {
        let d: T::Delta = decode(bytes)?;
        self.merge_delta(&d);
        Ok(())
    }

    fn replicas(&self) -> BTreeSet<ReplicaId> {
        RemovedNodePruning::modified_by_nodes(self)
    }

    fn pruning_needed_from(&self, removed: ReplicaId) -> bool {
        RemovedNodePruning::needs_pruning_from(self, removed)
    }

    fn prune_into(&mut self, removed: ReplicaId, collapse_into: ReplicaId) {
        RemovedNodePruning::prune(self, removed, collapse_into);
    }

    fn cleanup_pruned(&mut self, removed: ReplicaId) {
        RemovedNodePruning::prune_cleanup(self, removed);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

type Decoder = fn(&[u8]) -> Result<Box<dyn ReplicatedValue>, DataError>;

fn decode_boxed<T: ReplicatedType>(bytes: &[u8]) -> Result<Box<dyn ReplicatedValue>, DataError>
where
    T::Delta: Serialize + DeserializeOwned,
{
    Ok(Box::new(decode::<T>(bytes)?))
}

/// The data types a node can decode, by wire id.
#[derive(Clone)]
pub struct DataTypeRegistry {
    types: HashMap<DataTypeId, (&'static str, Decoder)>,
}

impl Debug for DataTypeRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.types.values().map(|(n, _)| n))
            .finish()
    }
}

impl Default for DataTypeRegistry {
    /// The built-in types with `String` elements and keys: `GCounter`, `PNCounter`,
    /// `Flag`, `GSet<String>`, `ORSet<String>`, `LWWRegister<String>`,
    /// `LWWRegister<Vec<u8>>`, `LWWMap<String, String>`, `PNCounterMap<String>`,
    /// `ORMultiMap<String, String>`.
    fn default() -> Self {
        let mut r = DataTypeRegistry::empty();
        r.register::<GCounter>();
        r.register::<PNCounter>();
        r.register::<Flag>();
        r.register::<GSet<String>>();
        r.register::<ORSet<String>>();
        r.register::<LWWRegister<String>>();
        r.register::<LWWRegister<Vec<u8>>>();
        r.register::<LWWMap<String, String>>();
        r.register::<PNCounterMap<String>>();
        r.register::<ORMultiMap<String, String>>();
        r
    }
}

impl DataTypeRegistry {
    /// A registry without any type.
    pub fn empty() -> Self {
        DataTypeRegistry {
            types: HashMap::new(),
        }
    }

    /// Registers `T` (idempotent).
    pub fn register<T: ReplicatedType>(&mut self) -> DataTypeId
    where
        T::Delta: Serialize + DeserializeOwned,
    {
        let id = DataTypeId::of::<T>();
        self.types
            .insert(id, (std::any::type_name::<T>(), decode_boxed::<T>));
        id
    }

    /// True if `id` is registered.
    pub fn contains(&self, id: DataTypeId) -> bool {
        self.types.contains_key(&id)
    }

    /// The name of type `id`.
    pub fn name(&self, id: DataTypeId) -> Option<&'static str> {
        self.types.get(&id).map(|(n, _)| *n)
    }

    /// Decodes a value of type `id`.
    ///
    /// # Errors
    /// [`DataError::UnknownType`] or [`DataError::Decode`]. Never panics on any input.
    pub fn decode(
        &self,
        id: DataTypeId,
        bytes: &[u8],
    ) -> Result<Box<dyn ReplicatedValue>, DataError> {
        let (_, d) = self.types.get(&id).ok_or(DataError::UnknownType(id))?;
        d(bytes)
    }
}

/// The longest key id, bytes.
pub const MAX_KEY_BYTES: usize = 512;

/// The id of a replicated value and its type (Akka's `Key[T]`, e.g. `ORSetKey`).
pub struct Key<T> {
    id: String,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for Key<T> {
    fn clone(&self) -> Self {
        Key {
            id: self.id.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> Debug for Key<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({:?}: {})", self.id, std::any::type_name::<T>())
    }
}

impl<T> PartialEq for Key<T> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<T> Eq for Key<T> {}

/// A key id that is empty or longer than [`MAX_KEY_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a key id must be 1 to {MAX_KEY_BYTES} bytes, got {0}")]
pub struct InvalidKey(pub usize);

/// Checks a key id's length.
///
/// # Errors
/// [`InvalidKey`] if it is empty or longer than [`MAX_KEY_BYTES`].
pub fn check_key_id(id: &str) -> Result<(), InvalidKey> {
    if id.is_empty() || id.len() > MAX_KEY_BYTES {
        Err(InvalidKey(id.len()))
    } else {
        Ok(())
    }
}

impl<T> Key<T> {
    /// The key `id`.
    ///
    /// # Errors
    /// [`InvalidKey`] if `id` is empty or longer than [`MAX_KEY_BYTES`].
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidKey> {
        let id = id.into();
        check_key_id(&id)?;
        Ok(Key {
            id,
            _type: PhantomData,
        })
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Akka's key names.
pub type GCounterKey = Key<GCounter>;
/// Akka's key names.
pub type PNCounterKey = Key<PNCounter>;
/// Akka's key names.
pub type FlagKey = Key<Flag>;
/// Akka's key names.
pub type GSetKey<T> = Key<GSet<T>>;
/// Akka's key names.
pub type ORSetKey<T> = Key<ORSet<T>>;
/// Akka's key names.
pub type LWWRegisterKey<T> = Key<LWWRegister<T>>;
/// Akka's key names.
pub type LWWMapKey<K, V> = Key<LWWMap<K, V>>;
/// Akka's key names.
pub type PNCounterMapKey<K> = Key<PNCounterMap<K>>;
/// Akka's key names.
pub type ORMultiMapKey<K, V> = Key<ORMultiMap<K, V>>;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn values_round_trip_through_the_registry_and_merge_only_their_own_type() {
        let reg = DataTypeRegistry::default();
        let mut s = ORSet::new();
        s.add(ReplicaId(1), "a".to_string());
        let v: Box<dyn ReplicatedValue> = Box::new(s.clone());
        let back = reg.decode(v.data_type(), &v.encode()).unwrap();
        assert!(back.eq_value(v.as_ref()));
        let mut c: Box<dyn ReplicatedValue> = Box::new(GCounter::new());
        assert!(matches!(
            c.merge_value(v.as_ref()),
            Err(DataError::TypeMismatch { .. })
        ));
        assert_eq!(
            reg.decode(DataTypeId(7), b"").err(),
            Some(DataError::UnknownType(DataTypeId(7)))
        );
        assert!(Key::<GCounter>::new("").is_err());
        assert!(Key::<GCounter>::new("x".repeat(MAX_KEY_BYTES + 1)).is_err());
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let reg = DataTypeRegistry::default();
            for id in [
                DataTypeId::of::<GCounter>(),
                DataTypeId::of::<PNCounter>(),
                DataTypeId::of::<ORSet<String>>(),
                DataTypeId::of::<LWWMap<String, String>>(),
                DataTypeId::of::<PNCounterMap<String>>(),
                DataTypeId::of::<ORMultiMap<String, String>>(),
            ] {
                if let Ok(mut v) = reg.decode(id, &bytes) {
                    let _ = v.encode();
                    let _ = v.merge_delta_encoded(&bytes);
                    let w = v.clone();
                    let _ = v.merge_value(w.as_ref());
                }
            }
        }
    }
}
