//! What the [`super::Replicator`]'s local owner asks and is told: request ids, results of
//! `get`, `update` and `delete` (Akka's `GetSuccess`/`NotFound`/`GetFailure`/
//! `GetDataDeleted`, `UpdateSuccess`/`UpdateTimeout`/`ModifyFailure`, ...), subscription
//! notifications and durable-store writes.

use super::envelope::SerializedEnvelope;
use super::value::ReplicatedValue;

/// The owner's id of one request, echoed in its response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

/// The outcome of a `get`.
#[derive(Debug, Clone)]
pub enum GetResult {
    /// The value (merged from the replicas the consistency asked for).
    Success(Box<dyn ReplicatedValue>),
    /// No replica asked has the key.
    NotFound,
    /// The consistency was not reached in time (or cannot be reached): the reason.
    Failure(String),
    /// The key was deleted.
    Deleted,
}

/// The outcome of an `update`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateResult {
    /// Written locally and to as many replicas as the consistency asked for.
    Success,
    /// The consistency was not reached in time: the local value *is* updated and will
    /// spread by gossip (Akka's `UpdateTimeout`); the reason.
    Timeout(String),
    /// The modify function failed (panicked or returned an error); nothing was written
    /// except what it had changed before failing.
    ModifyFailure(String),
    /// The key was deleted; it cannot be used again.
    Deleted,
    /// Refused before anything changed (type mismatch, too many keys, value too large).
    Failure(String),
}

/// The outcome of a `delete`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteResult {
    /// Deleted locally and on as many replicas as the consistency asked for.
    Success,
    /// Deleted locally; the consistency was not reached in time (the tombstone spreads by
    /// gossip).
    Timeout(String),
    /// It was deleted already.
    AlreadyDeleted,
    /// Refused (too many keys).
    Failure(String),
}

/// What the replicator tells its owner.
#[derive(Debug, Clone)]
pub enum ReplicatorEvent {
    /// The response to a `get`.
    GetResponse {
        /// The request.
        request: RequestId,
        /// The key.
        key: String,
        /// The outcome.
        result: GetResult,
    },
    /// The response to an `update`.
    UpdateResponse {
        /// The request.
        request: RequestId,
        /// The key.
        key: String,
        /// The outcome.
        result: UpdateResult,
    },
    /// The response to a `delete`.
    DeleteResponse {
        /// The request.
        request: RequestId,
        /// The key.
        key: String,
        /// The outcome.
        result: DeleteResult,
    },
    /// A subscribed key changed (at most once per notify interval per key).
    Changed {
        /// The key.
        key: String,
        /// Its value now.
        value: Box<dyn ReplicatedValue>,
    },
    /// A subscribed key was deleted.
    Deleted {
        /// The key.
        key: String,
    },
    /// A durable key changed: store this envelope before acting on later events (an
    /// `UpdateResponse` for the key follows it).
    Store {
        /// The key.
        key: String,
        /// The envelope to store.
        envelope: SerializedEnvelope,
    },
}
