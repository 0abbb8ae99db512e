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
use futures_channel::oneshot;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;

use super::command::{KeyInfo, Notification, ReplicatorCommand};

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

/// The handle to a node's replicator; cheap to clone.
#[derive(Clone)]
pub struct Replicator {
    pub(super) commands: mpsc::Sender<ReplicatorCommand>,
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

impl Replicator {
    /// This replica's id (the node incarnation's uid): what counters and sets record
    /// updates under. Known once the node has started (`ReplicaId(0)` before).
    pub fn replica(&self) -> ReplicaId {
        ReplicaId(self.replica.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Sends the command `make` builds around a reply channel; its answer.
    async fn command<R>(
        &self,
        make: impl FnOnce(oneshot::Sender<R>) -> ReplicatorCommand,
    ) -> Result<R, DdataError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(make(tx))
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
        self.command(|reply| ReplicatorCommand::RegisterType {
            register: Box::new(|m| m.register_type::<T>()),
            reply,
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
        let key = key.id().to_string();
        let result = self
            .command(|reply| ReplicatorCommand::Get {
                key,
                consistency,
                reply,
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
            .command(|reply| ReplicatorCommand::Update {
                consistency,
                update: Box::new(move |m, now, request| {
                    m.update(now, request, &key, consistency, initial, modify)
                }),
                reply,
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
            .command(|reply| ReplicatorCommand::Delete {
                key,
                consistency,
                reply,
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
        let key = key.id().to_string();
        let rx = self
            .command(|reply| ReplicatorCommand::Subscribe { key, reply })
            .await?;
        Ok(Changes {
            rx,
            _type: std::marker::PhantomData,
        })
    }

    /// Every key with its type, size and durability (for `GET /cluster/ddata`).
    pub async fn keys(&self) -> Result<Vec<KeyInfo>, DdataError> {
        self.command(|reply| ReplicatorCommand::Keys { reply })
            .await
    }

    /// The replicator's counters.
    pub async fn stats(
        &self,
    ) -> Result<concord_core::ddata::replicator::ReplicatorStats, DdataError> {
        self.command(|reply| ReplicatorCommand::Stats { reply })
            .await
    }

    /// The addresses of the other replicas that count in quorums now: Up (and Leaving)
    /// members with the replicator's role, reachable or not, this node excluded. A
    /// `ReadConsistency::All` read asks every one of them.
    pub async fn nodes(&self) -> Result<Vec<String>, DdataError> {
        self.command(|reply| ReplicatorCommand::Nodes { reply })
            .await
    }
}

/// A subscription to one key: [`Changes::next`] waits for the next change.
pub struct Changes<T> {
    rx: async_broadcast::Receiver<Arc<Notification>>,
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
            let n = match self.rx.recv().await {
                Ok(n) => n,
                // Older changes were folded into a newer one.
                Err(async_broadcast::RecvError::Overflowed(_)) => continue,
                Err(async_broadcast::RecvError::Closed) => return None,
            };
            match n.as_ref() {
                Notification::Deleted => return Some(Change::Deleted),
                Notification::Changed(v) => {
                    if let Some(t) = v.as_any().downcast_ref::<T>() {
                        return Some(Change::Changed(t.clone()));
                    }
                }
            }
        }
    }
}
