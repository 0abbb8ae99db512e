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
#[cfg(feature = "runtime")]
mod config;
pub mod effects;
pub mod entity;
mod error;
mod extractor;
#[cfg(feature = "runtime")]
mod layer;
mod metrics;
pub mod remember_store;
#[cfg(feature = "runtime")]
pub mod routes;

pub use command::{AskFailure, AskTx, ShardingCommand, ShardingCompletion, StatsTx};
#[cfg(feature = "runtime")]
pub use config::{
    AllocationConfig, CoordinatorStateConfig, PassivationConfig, RecoveryRateConfig, ShardingConfig,
};
pub use effects::ShardingEffects;
pub use entity::{Entity, EntityContext};
pub use error::ShardingError;
#[cfg(feature = "runtime")]
pub use layer::{EntityRef, PendingReply, ShardRegion, Sharding, DURABLE_FILE};
#[cfg(feature = "runtime")]
pub use routes::{ShardInfoJson, ShardRegionJson, ShardRegionsJson};
