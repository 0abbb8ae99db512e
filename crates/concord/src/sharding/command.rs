//! What the sharding layer's host is asked ([`ShardingCommand`], from the handles, the
//! management route and the coordinated shutdown) and what its background work reports
//! ([`ShardingCompletion`]).

use std::sync::Arc;

use concord_core::sharding::{DropReason, ShardId};
use concord_core::UniqueAddress;
use futures_channel::oneshot;

use super::entity::ErasedEntity;

/// Why an ask got no reply, as the layer's host tells the asker (the handle turns it
/// into a [`super::ShardingError`]).
#[derive(Debug)]
pub enum AskFailure {
    /// A buffer was full (or the id was invalid): the message was not delivered.
    Dropped(DropReason),
    /// The message was delivered but failed (does not decode, mailbox full, panic).
    Failed(String),
}

/// An ask's outcome: the encoded reply, or why there is none.
pub type AskTx = oneshot::Sender<Result<Vec<u8>, AskFailure>>;

/// The answer to a cluster-wide shard query: (region, [(shard, entities)]).
pub type StatsTx = oneshot::Sender<Vec<(UniqueAddress, Vec<(ShardId, u32)>)>>;

/// How a batch ended.
pub(crate) enum BatchOutcome {
    /// The entity, back, and whether it asked to be passivated.
    Done {
        entity: Box<dyn ErasedEntity>,
        passivate: bool,
    },
    /// The handler panicked: the entity is lost.
    Failed(String),
}

/// A request from a handle, the management API or a coordinated-shutdown task.
#[allow(missing_docs)] // the fields are named by what they carry
pub enum ShardingCommand {
    /// A `tell` (or, with `ask`, an `ask`) from an [`super::EntityRef`].
    Tell {
        type_name: Arc<str>,
        entity: String,
        payload: Vec<u8>,
        ask: Option<AskTx>,
        /// The caller's trace context (tracing on, its span sampled).
        trace: Option<crate::host::TraceContext>,
    },
    /// The shards of `type_name` hosted here, with their entity counts.
    LocalShards {
        type_name: Arc<str>,
        reply: oneshot::Sender<Vec<(ShardId, u32)>>,
    },
    /// A cluster-wide query of `type_name`'s regions (`GET /cluster/shards/{name}`).
    QueryStats { type_name: String, reply: StatsTx },
    /// Hand every shard over (the `cluster-sharding-shutdown-region` phase); `done` fires
    /// when every type's region is done.
    GracefulShutdown { done: oneshot::Sender<()> },
    /// The graceful shutdown did not finish in its phase: stop every entity here.
    StopHosting,
    /// The coordinators' hand-over (the `cluster-exiting` phase).
    SelfExiting { done: oneshot::Sender<()> },
}

/// A report of work the sharding layer started (opaque: only the layer reads it).
pub struct ShardingCompletion(pub(crate) Completion);

/// What a [`ShardingCompletion`] reports.
pub(crate) enum Completion {
    /// A batch of `entity` that continued in a task of its own ended.
    BatchDone {
        type_name: String,
        entity: String,
        generation: u64,
        outcome: BatchOutcome,
    },
    /// An entity answered an ask of `to` (this node or another): the answer goes through
    /// the machine.
    Reply {
        type_name: String,
        to: UniqueAddress,
        ask: u64,
        result: Result<Vec<u8>, String>,
    },
    /// The remembered entities of `shard` were read.
    RememberLoaded {
        type_name: String,
        shard: ShardId,
        ids: Vec<String>,
    },
    /// The remembered entities of `shard` were written.
    RememberWritten { type_name: String, shard: ShardId },
}
