//! Distributed Data: replicated CRDTs on every node (Akka's `akka.cluster.ddata`).
//!
//! The protocol lives in `concord-core` ([`concord_core::ddata`]: the CRDTs and the
//! sans-IO [`concord_core::ddata::Replicator`]). This module is its runtime layer:
//!
//! - [`DistributedData`] — the layer to add to a node; it returns the [`Replicator`]
//!   handle (typed `get`, `update`, `delete`, `subscribe`).
//! - [`codec`] — the protocol's wire form (`Dd*` messages of `ddata.proto`).
//! - [`durable`] — durable keys in `redb` under the node's `data-dir`.
//! - `GET /cluster/ddata` — the keys with their type, size and durability.
//!
//! ```no_run
//! # async fn demo(config: concord::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use concord::ddata::DistributedData;
//! use concord::concord_core::ddata::{Key, ORSet, ReadConsistency, WriteConsistency};
//! let (ddata, replicator) = DistributedData::new();
//! let node = concord::Node::builder(config).layer(ddata).start().await?;
//! let rooms: Key<ORSet<String>> = Key::new("chat-rooms")?;
//! let me = replicator.replica();
//! replicator
//!     .update(&rooms, WriteConsistency::Local, ORSet::new, move |s| s.add(me, "lobby".to_string()))
//!     .await?;
//! let mut changes = replicator.subscribe(&rooms).await?;
//! let _next = changes.next().await;
//! let _all = replicator.get(&rooms, ReadConsistency::majority(3_000)).await?;
//! # drop(node); Ok(()) }
//! ```

pub mod codec;
pub mod command;
#[cfg(feature = "runtime")]
mod config;
pub mod durable;
pub mod effects;
#[cfg(feature = "runtime")]
mod layer;
mod metrics;
#[cfg(feature = "runtime")]
mod replicator;

pub use command::{KeyInfo, Notification, ReplicatorCommand};
#[cfg(feature = "runtime")]
pub use config::{DeltaCrdtConfig, DistributedDataConfig, DurableConfig};
pub use effects::ReplicatorEffects;
#[cfg(feature = "runtime")]
pub use layer::DistributedData;
#[cfg(feature = "runtime")]
pub use replicator::{Change, Changes, DdataError, Replicator};
