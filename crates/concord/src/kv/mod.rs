//! The Dynamo-style replicated key-value store (docs/KV_STORE.md): keys partitioned over the
//! members on a consistent-hashing ring, N replicas each, reads and writes with R and W
//! quorums, concurrent writes kept as siblings (dotted version vectors), read repair,
//! hinted handoff, transfers when members join or leave, and anti-entropy. The protocol is
//! the sans-IO [`concord_core::kv::KvMachine`]; this module runs it:
//!
//! - [`KeyValueStore`]: the layer (`Node::builder(config).layer(..)`) and its handle
//!   [`KvStore`] (`put`, `get`, `delete`, with per-request `n`, `r`, `w`);
//! - storage in `redb`, one file per node ([`storage`]);
//! - the HTTP API in Riak KV's shapes on `kv.http-port` ([`http`]);
//! - the codec of its messages ([`codec`]).
//!
//! ```no_run
//! # async fn demo(config: concord::Config) -> anyhow::Result<()> {
//! use concord::kv::KeyValueStore;
//! use concord::concord_core::kv::{ReadOptions, WriteOptions};
//!
//! let (kv, store) = KeyValueStore::new();
//! let node = concord::Node::builder(config).layer(kv).start().await?;
//! store.put("cart/alice", b"book".to_vec(), None, WriteOptions::default()).await?;
//! let read = store.get("cart/alice", ReadOptions::default()).await?;
//! // Write back with the read's context: the new value supersedes what was read.
//! store
//!     .put("cart/alice", b"book,pen".to_vec(), read.context.as_ref(), WriteOptions::default())
//!     .await?;
//! # node.shutdown().await; Ok(()) }
//! ```

pub mod codec;
pub mod command;
#[cfg(feature = "runtime")]
mod config;
pub mod effects;
#[cfg(feature = "runtime")]
mod handle;
#[cfg(feature = "runtime")]
pub mod http;
#[cfg(feature = "runtime")]
mod layer;
pub mod lsm_storage;
mod metrics;
pub mod storage;

pub use command::{KvCommand, KvStatusReport};
#[cfg(feature = "runtime")]
pub use config::KvConfig;
pub use effects::KvEffects;
#[cfg(feature = "runtime")]
pub use handle::{Context, KvStore, KvValue};
#[cfg(feature = "runtime")]
pub use layer::KeyValueStore;
