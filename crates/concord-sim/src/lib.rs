//! # concord-sim
//!
//! A deterministic simulator of Concord clusters: many nodes in one process with a virtual
//! clock, a seeded RNG and a simulated network (delay, reordering, loss, duplication,
//! partitions). Each node runs the membership machine ([`concord_core::ClusterCore`]) and
//! any other protocol machines ([`hosted`]), routed by protocol id as the runtime routes
//! envelopes. Scenarios are code; randomized fault schedules come from a seed and are
//! checked against the cluster invariants after every step and at the end. The same seed
//! replays the same run. Layers run in their real host ([`layer_host`]) with their real
//! effects: the simulator depends on `concord-core` and on `concord` without its tokio
//! runtime (`default-features = false`), so nothing here needs tokio.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod hosted;
pub mod invariants;
pub mod layer_host;
pub mod lease;
pub mod membership;
pub mod message;
pub mod network;
pub mod node;
pub mod scale;
pub mod schedule;
pub mod sharding_exiting;
pub mod sim;
pub mod stats;
pub mod trace;

pub use hosted::{Hosted, HostedMachine, Payload};
pub use layer_host::{SimHost, SimRuntime, Sleep};
pub use lease::SimLease;
pub use sharding_exiting::ShardingExiting;
pub use sim::{node_address, SimMessage, Simulation};
