//! # concord-sim
//!
//! A deterministic simulator of Concord clusters: many [`concord_core::ClusterCore`] nodes
//! in one process with a virtual clock, a seeded RNG and a simulated network (delay,
//! reordering, loss, duplication, partitions). Scenarios are code; randomized fault
//! schedules come from a seed and are checked against the cluster invariants after every
//! step and at the end. The same seed replays the same run.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod invariants;
pub mod network;
pub mod scale;
pub mod schedule;
pub mod sim;

pub use sim::{node_address, Simulation};
