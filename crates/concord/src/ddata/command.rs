//! [`ReplicatorCommand`]: what the [`super::Replicator`] handle asks of the layer's host.

use std::sync::Arc;

use concord_core::ddata::replicator::{
    DataTypeId, DeleteResult, GetResult, ReadConsistency, ReplicatedValue, ReplicatorStats,
    RequestId, UpdateResult, WriteConsistency,
};
use concord_core::ddata::Replicator as ReplicatorMachine;
use futures_channel::oneshot;

/// What a subscriber is told.
#[derive(Debug)]
pub enum Notification {
    /// The key's value now.
    Changed(Box<dyn ReplicatedValue>),
    /// The key was deleted.
    Deleted,
}

/// An update with its types erased: runs `Replicator::update::<T>` on the machine at
/// `now` (ms) under `request`.
pub type ErasedUpdate = Box<dyn FnOnce(&mut ReplicatorMachine, u64, RequestId) + Send>;

/// Registers a data type on the machine (types erased).
pub type ErasedRegister = Box<dyn FnOnce(&mut ReplicatorMachine) -> DataTypeId + Send>;

/// A request from a handle. Each carries the one-shot channel its answer goes to.
#[allow(missing_docs)] // the fields are named by what they carry
pub enum ReplicatorCommand {
    /// Register a data type.
    RegisterType {
        register: ErasedRegister,
        reply: oneshot::Sender<DataTypeId>,
    },
    /// Read a key (Akka `Get`).
    Get {
        key: String,
        consistency: ReadConsistency,
        reply: oneshot::Sender<GetResult>,
    },
    /// Change a key (Akka `Update`); the answer carries a durable-store failure if any.
    Update {
        consistency: WriteConsistency,
        update: ErasedUpdate,
        reply: oneshot::Sender<(UpdateResult, Option<String>)>,
    },
    /// Delete a key for good (Akka `Delete`).
    Delete {
        key: String,
        consistency: WriteConsistency,
        reply: oneshot::Sender<DeleteResult>,
    },
    /// Subscribe to a key's changes (Akka `Subscribe`).
    Subscribe {
        key: String,
        reply: oneshot::Sender<async_broadcast::Receiver<Arc<Notification>>>,
    },
    /// Every key with type, size and durability.
    Keys {
        reply: oneshot::Sender<Vec<KeyInfo>>,
    },
    /// The replicator's counters.
    Stats {
        reply: oneshot::Sender<ReplicatorStats>,
    },
    /// The other replicas that count in quorums now (addresses).
    Nodes { reply: oneshot::Sender<Vec<String>> },
}

/// One key as `GET /cluster/ddata` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyInfo {
    /// The key.
    pub key: String,
    /// The value's type (`null` for a deleted key).
    #[serde(rename = "type")]
    pub type_name: Option<String>,
    /// The encoded value's size, bytes.
    pub size_bytes: usize,
    /// Stored on disk.
    pub durable: bool,
}
