//! [`JoinProcess`]: where a node is in joining a cluster (the seed-node process, or a Join
//! sent to one node); `join.rs` drives it.

use std::collections::BTreeSet;

use crate::address::Address;

/// Where this node is in joining a cluster.
#[derive(Clone, Debug)]
pub(super) enum JoinProcess {
    Idle,
    /// InitJoin sent to the seeds (timers: [`ClusterTimer::InitJoin`](super::cluster_timer::ClusterTimer::InitJoin), and for the first
    /// seed [`ClusterTimer::SeedNodeTimeout`](super::cluster_timer::ClusterTimer::SeedNodeTimeout)).
    SeedNodes {
        seeds: Vec<Address>,
        first_seed: bool,
        /// Other seeds that have not answered InitJoinNack (first-seed process).
        remaining: BTreeSet<Address>,
    },
    /// Join sent to `target` (timer: [`ClusterTimer::JoinRetry`](super::cluster_timer::ClusterTimer::JoinRetry)).
    TryingToJoin {
        target: Address,
        seeds: Option<Vec<Address>>,
    },
}
