//! Benchmarks the `concord` binary runs (`concord bench ...`).
//!
//! - [`remote`]: messaging throughput of the ordinary lane between two nodes on loopback,
//!   against a raw tokio TCP baseline measured in the same run.
//! - [`layer`]: [`BenchLayer`], the layer that carries the benchmark's payloads
//!   ([`concord_core::ProtocolId::BENCH`]); tests use it to flood a lane.

pub mod layer;
pub mod remote;

pub use layer::{BenchLayer, BenchProbe};
pub use remote::{run_remote, RemoteBenchResult, RemoteBenchSettings};
