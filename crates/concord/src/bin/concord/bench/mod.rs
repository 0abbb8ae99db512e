//! Benchmarks the `concord` binary runs (`concord bench ...`).
//!
//! - [`remote`]: messaging throughput of the ordinary lane between two nodes on loopback,
//!   against a raw tokio TCP baseline measured beside it, round by round.
//! - [`baseline`]: that raw TCP baseline (also beside the sharding benchmark).
//! - [`flow`]: gated senders, so that flows can be measured one at a time in rounds.
//! - [`singleton`]: hand-over time of a singleton on graceful leave of its node.
//! - [`ddata`]: Distributed Data quorum latency, big-ORSet updates and convergence, and
//!   steady-state traffic on 5 nodes.
//! - [`sharding`]: entity tell throughput (local, remote) next to the raw TCP baseline, ask
//!   latency at half the peak, rebalance time to a new node, memory per idle entity.
//! - [`delivery`]: reliable delivery's confirmed messages/s into sharded entities, with and
//!   without the durable queue, next to plain tell; send-to-confirm latency.
//! - [`kv`]: the key-value store's puts and gets per second and latency at two value
//!   sizes, keys transferred per second to a joining node, bytes on disk per key.
//! - [`routing`]: messages/s through the receptionist's `ServiceRouter` (each logic) to
//!   handles on 3 nodes, next to sharded tell in the same run.
//! - [`pubsub_fanout`]: distributed pub-sub to 1,000 subscribers on 5 nodes: deliveries/s,
//!   publish-to-last-subscriber latency, node-wide mailbox bytes.
//! - [`services_cli`]: the subcommands of those two.
//! - [`cluster`]: in-process clusters for the benchmarks.
//! - [`layer`]: [`layer::BenchLayer`], the layer that carries the benchmark's payloads
//!   ([`concord_core::ProtocolId::BENCH`]); the library's integration tests compile this
//!   file as a module of their own (`tests/common/mod.rs`) to flood a lane.

pub mod baseline;
pub mod cluster;
pub mod ddata;
pub mod delivery;
pub mod flow;
pub mod kv;
pub mod layer;
pub mod metrics_gossip;
pub mod persistence;
pub mod persistence_report;
pub mod pg_server;
pub mod pubsub_fanout;
pub mod remote;
pub mod routing;
pub mod services_cli;
pub mod sharding;
pub mod singleton;

pub use remote::{run_remote, RemoteBenchSettings};
