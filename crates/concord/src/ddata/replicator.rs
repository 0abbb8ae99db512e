//! [`Replicator`]: the typed handle to a node's Distributed Data (Akka's
//! `DistributedData(system).replicator` with `Get`, `Update`, `Delete`, `Subscribe`).
//!
//! Every call goes to the layer's driver task, which owns the sans-IO
//! [`concord_core::ddata::Replicator`]; the answer comes back when the consistency level
//! is reached (or not). Values are typed by their [`Key`]; a key holds one type for good.
//!
//! ```no_run
//! # async fn demo(replicator: concord::ddata::Replicator) -> Result<(), concord::ddata::DdataError> {
//! use concord::concord_core::ddata::{Key, PNCounter, ReadConsistency, WriteConsistency};
//! let hits: Key<PNCounter> = Key::new("hits").expect("a short key");
//! let me = replicator.replica();
//! replicator
//!     .update(&hits, WriteConsistency::majority(3_000), PNCounter::new, move |c| c.increment(me, 1))
//!     .await?;
//! let now = replicator.get(&hits, ReadConsistency::majority(3_000)).await?;
//! println!("{:?}", now.map(|c| c.value()));
//! # Ok(()) }
//! ```

use std::sync::Arc;

use concord_core::ddata::replicator::{
    DataTypeId, DeleteResult, GetResult, Key, ReadConsistency, ReplicatedType, UpdateResult,
    WriteConsistency,
};
use concord_core::ddata::ReplicaId;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};

use super::driver::{Driver, Pending, Reply};

/// Why a Distributed Data call did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DdataError {
    /// A read did not reach its consistency in time (Akka `GetFailure`).
    #[error("read failed: {0}")]
    GetFailure(String),
    /// A write did not reach its consistency in time; the local value *is* updated and
    /// spreads by gossip (Akka `UpdateTimeout`).
    #[error("write did not reach its consistency: {0}")]
    UpdateTimeout(String),
    /// The modify function panicked or refused (Akka `ModifyFailure`).
    #[error("modify failed: {0}")]
    ModifyFailure(String),
    /// The key was deleted and cannot be used again (Akka `DataDeleted`).
    #[error("the key was deleted")]
    DataDeleted,
    /// The key holds another type.
    #[error("{0}")]
    TypeMismatch(String),
    /// The durable store could not write the change (Akka `StoreFailure`); the value is
    /// changed in memory.
    #[error("durable store failed: {0}")]
    StoreFailure(String),
    /// Refused before anything changed (max keys, too large, bad key).
    #[error("{0}")]
    Refused(String),
    /// The replicator has stopped (the node is shutting down).
    #[error("the replicator has stopped")]
    Stopped,
}

/// A change of a subscribed key.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<T> {
    /// The key's value now.
    Changed(T),
    /// The key was deleted.
    Deleted,
}

/// A job run on the driver task with the machine.
pub(super) type Job = Box<dyn FnOnce(&mut Driver) + Send>;

/// The handle to a node's replicator; cheap to clone.
#[derive(Clone)]
pub struct Replicator {
    pub(super) jobs: mpsc::Sender<Job>,
    /// The node's uid once started (0 before).
    pub(super) replica: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Replicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicator")
            .field("replica", &self.replica())
            .finish()
    }
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

impl Replicator {
    /// This replica's id (the node incarnation's uid): what counters and sets record
    /// updates under. Known once the node has started (`ReplicaId(0)` before).
    pub fn replica(&self) -> ReplicaId {
        ReplicaId(self.replica.load(std::sync::atomic::Ordering::Relaxed))
    }

    async fn run<R: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Driver, oneshot::Sender<R>) + Send + 'static,
    ) -> Result<R, DdataError> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Box::new(move |d: &mut Driver| job(d, tx)))
            .await
            .map_err(|_| DdataError::Stopped)?;
        rx.await.map_err(|_| DdataError::Stopped)
    }

    /// Registers a data type (every node must register the types it replicates; the
    /// built-in CRDTs with `String` elements are registered already).
    pub async fn register_type<T: ReplicatedType>(&self) -> Result<DataTypeId, DdataError>
    where
        T::Delta: Serialize + DeserializeOwned,
    {
        self.run(|d, tx| {
            let _ = tx.send(d.machine.register_type::<T>());
        })
        .await
    }

    /// Reads `key` at `consistency`: `Ok(Some(value))`, `Ok(None)` if no replica asked has
    /// it, or [`DdataError::GetFailure`] / [`DdataError::DataDeleted`] /
    /// [`DdataError::TypeMismatch`].
    pub async fn get<T: ReplicatedType>(
        &self,
        key: &Key<T>,
        consistency: ReadConsistency,
    ) -> Result<Option<T>, DdataError>
    where
        T::Delta: Serialize + DeserializeOwned,
    {
        let id = key.id().to_string();
        let result = self
            .run(move |d, tx| {
                let request = d.next_request();
                d.pending
                    .insert(request, Pending::new(Reply::Get(tx), consistency.label()));
                let now = d.now();
                d.machine.get(now, request, &id, consistency);
            })
            .await?;
        match result {
            GetResult::Success(v) => match v.as_any().downcast_ref::<T>() {
                Some(t) => Ok(Some(t.clone())),
                None => Err(DdataError::TypeMismatch(format!(
                    "the key holds {}, not {}",
                    v.type_name(),
                    std::any::type_name::<T>()
                ))),
            },
            GetResult::NotFound => Ok(None),
            GetResult::Failure(r) => Err(DdataError::GetFailure(r)),
            GetResult::Deleted => Err(DdataError::DataDeleted),
        }
    }

    /// Updates `key`: `modify` runs on the local value (`initial()` if the key is new),
    /// then the value is written at `consistency`. On
    /// [`DdataError::UpdateTimeout`] the local value is updated all the same.
    pub async fn update<T: ReplicatedType>(
        &self,
        key: &Key<T>,
        consistency: WriteConsistency,
        initial: impl FnOnce() -> T + Send + 'static,
        modify: impl FnOnce(&mut T) + Send + 'static,
    ) -> Result<(), DdataError>
    where
        T::Delta: Serialize + DeserializeOwned,
    {
        let key = key.clone();
        let result = self
            .run(move |d, tx| {
                let request = d.next_request();
                d.pending.insert(
                    request,
                    Pending::new(Reply::Update(tx), consistency.label()),
                );
                let now = d.now();
                d.machine
                    .update(now, request, &key, consistency, initial, modify);
            })
            .await?;
        match result {
            (_, Some(e)) => Err(DdataError::StoreFailure(e)),
            (UpdateResult::Success, None) => Ok(()),
            (UpdateResult::Timeout(r), None) => Err(DdataError::UpdateTimeout(r)),
            (UpdateResult::ModifyFailure(r), None) => Err(DdataError::ModifyFailure(r)),
            (UpdateResult::Deleted, None) => Err(DdataError::DataDeleted),
            (UpdateResult::Failure(r), None) if r.starts_with("type mismatch") => {
                Err(DdataError::TypeMismatch(r))
            }
            (UpdateResult::Failure(r), None) => Err(DdataError::Refused(r)),
        }
    }

    /// Deletes `key` for good at `consistency` (Akka `Delete`): it can never be used again.
    pub async fn delete(&self, key: &str, consistency: WriteConsistency) -> Result<(), DdataError> {
        let key = key.to_string();
        let result = self
            .run(move |d, tx| {
                let request = d.next_request();
                d.pending.insert(
                    request,
                    Pending::new(Reply::Delete(tx), consistency.label()),
                );
                let now = d.now();
                d.machine.delete(now, request, &key, consistency);
            })
            .await?;
        match result {
            DeleteResult::Success => Ok(()),
            DeleteResult::Timeout(r) => Err(DdataError::UpdateTimeout(r)),
            DeleteResult::AlreadyDeleted => Err(DdataError::DataDeleted),
            DeleteResult::Failure(r) => Err(DdataError::Refused(r)),
        }
    }

    /// Subscribes to `key`: the latest change, at most every `notify-subscribers-interval`
    /// (changes in between are folded into the latest value).
    pub async fn subscribe<T: ReplicatedType>(&self, key: &Key<T>) -> Result<Changes<T>, DdataError>
    where
        T::Delta: Serialize + DeserializeOwned,
    {
        let id = key.id().to_string();
        let rx = self
            .run(move |d, tx| {
                let (wtx, wrx) = watch::channel(None);
                d.subscribers.entry(id.clone()).or_default().push(wtx);
                d.machine.subscribe(&id);
                let _ = tx.send(wrx);
            })
            .await?;
        Ok(Changes {
            rx,
            _type: std::marker::PhantomData,
        })
    }

    /// Every key with its type, size and durability (for `GET /cluster/ddata`).
    pub async fn keys(&self) -> Result<Vec<KeyInfo>, DdataError> {
        self.run(|d, tx| {
            let keys = d
                .machine
                .key_summaries()
                .into_iter()
                .map(|(key, type_name, size_bytes, durable)| KeyInfo {
                    key,
                    type_name: type_name.map(str::to_string),
                    size_bytes,
                    durable,
                })
                .collect();
            let _ = tx.send(keys);
        })
        .await
    }

    /// The replicator's counters.
    pub async fn stats(
        &self,
    ) -> Result<concord_core::ddata::replicator::ReplicatorStats, DdataError> {
        self.run(|d, tx| {
            let _ = tx.send(d.machine.stats().clone());
        })
        .await
    }
}

/// A subscription to one key: [`Changes::next`] waits for the next change.
pub struct Changes<T> {
    rx: watch::Receiver<Option<Arc<super::driver::Notification>>>,
    _type: std::marker::PhantomData<fn() -> T>,
}

impl<T: ReplicatedType> Changes<T>
where
    T::Delta: Serialize + DeserializeOwned,
{
    /// The next change (the latest value if several happened); `None` once the replicator
    /// has stopped. A value of another type than `T` is skipped.
    pub async fn next(&mut self) -> Option<Change<T>> {
        loop {
            self.rx.changed().await.ok()?;
            let n = self.rx.borrow_and_update().clone();
            match n.as_deref() {
                Some(super::driver::Notification::Deleted) => return Some(Change::Deleted),
                Some(super::driver::Notification::Changed(v)) => {
                    if let Some(t) = v.as_any().downcast_ref::<T>() {
                        return Some(Change::Changed(t.clone()));
                    }
                }
                None => {}
            }
        }
    }
}

/// A request answered by the machine.
pub(super) type GetReply = oneshot::Sender<GetResult>;
/// An update's answer, with a durable-store failure if there was one.
pub(super) type UpdateReply = oneshot::Sender<(UpdateResult, Option<String>)>;
/// A delete's answer.
pub(super) type DeleteReply = oneshot::Sender<DeleteResult>;
