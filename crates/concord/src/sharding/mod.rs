//! Cluster Sharding: stateful entities addressed by id, alive on at most one node at a
//! time, spread over the cluster in shards and moved — with their state, losing and
//! reordering nothing — when nodes join and leave (Akka's Cluster Sharding, with the
//! original cluster spec's order-preserving handoff; docs/SHARDING.md).
//!
//! The protocol lives in `concord-core` ([`concord_core::sharding`]: region, shards,
//! coordinator, allocation, handoff). This module runs it:
//!
//! - [`Entity`] — what an application writes: an async handler over `&mut self`, the
//!   state it hands over when it moves, and [`EntityContext`] (id, shard, `passivate()`).
//! - [`Sharding`] — the layer: [`Sharding::init`] an entity type on every node (a proxy on
//!   nodes without its role, or with [`Sharding::init_proxy`]).
//! - [`ShardRegion`] and [`EntityRef`] — `tell` and `ask(timeout)` an entity by id.
//! - `GET /cluster/shards/{name}` ([`routes`]), the metrics `concord_sharding_*`, and the
//!   hand-overs in coordinated shutdown (`cluster-sharding-shutdown-region`: every shard
//!   handed over; `cluster-exiting`: the coordinator).
//!
//! Messages are serde types encoded as MessagePack with field names ([`entity`]'s docs
//! explain the choice), so a rolling update may add fields.

mod cells;
pub mod codec;
pub mod command;
pub mod effects;
pub mod entity;
#[cfg(feature = "runtime")]
mod layer;
mod metrics;
pub mod remember_store;
#[cfg(feature = "runtime")]
pub mod routes;

use std::sync::Arc;
use std::time::Duration;

use concord_core::sharding::DropReason;

pub use command::{AskTx, ShardingCommand, ShardingCompletion, StatsTx};
pub use effects::ShardingEffects;
pub use entity::{Entity, EntityContext};
#[cfg(feature = "runtime")]
pub use layer::{EntityRef, ShardRegion, Sharding, DURABLE_FILE};
#[cfg(feature = "runtime")]
pub use routes::{ShardInfoJson, ShardRegionJson, ShardRegionsJson};

/// Entity id → shard id.
pub(crate) type Extractor = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// Why an ask got no reply, as the layer's host tells the asker (the handle turns it
/// into a [`ShardingError`]).
#[derive(Debug)]
pub enum AskFailure {
    /// A buffer was full (or the id was invalid): the message was not delivered.
    Dropped(DropReason),
    /// The message was delivered but failed (does not decode, mailbox full, panic).
    Failed(String),
}

/// Why a message to an entity was not delivered or answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardingError {
    /// No reply within the timeout (the entity may be moving or slow; a late reply is
    /// dropped).
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// Not delivered: a region's buffer was full (`buffer-size`), the id was too long, or
    /// the region is shutting down.
    #[error("not delivered: {0}")]
    Dropped(String),
    /// Delivered, but the entity could not handle it (the message did not decode there,
    /// its mailbox was full, or its handler panicked).
    #[error("failed: {0}")]
    Failed(String),
    /// The message or the reply does not encode or decode here.
    #[error("encoding: {0}")]
    Encoding(String),
    /// The node has stopped.
    #[error("the sharding layer has stopped")]
    Stopped,
}
