//! [`ClusterTimer`]: the timers of the membership machine; `timers.rs` says what each one
//! does when it fires.

use crate::address::UniqueAddress;

/// The timers of [`ClusterCore`](super::ClusterCore); their deadlines live in its timer table, and
/// `poll_timeout` is the earliest of them. Declared in the order they run when several are
/// due at the same millisecond.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClusterTimer {
    /// Seed-node process: send InitJoin to the seeds again (every second).
    InitJoin,
    /// Seed-node process of the first seed: form a new cluster when no other seed
    /// answered within `seed-node-timeout`.
    SeedNodeTimeout,
    /// No Welcome within `retry-unsuccessful-join-after`: join again.
    JoinRetry,
    /// `shutdown-after-unsuccessful-join-seed-nodes` passed without joining.
    JoinSeedNodesDeadline,
    /// A monitored node has not answered its first heartbeat within
    /// `expected-response-after`: start its failure detector anyway.
    ExpectedFirstHeartbeat(UniqueAddress),
    /// Send heartbeats (every `heartbeat-interval`).
    Heartbeat,
    /// Mark monitored nodes unreachable / reachable (every
    /// `unreachable-nodes-reaper-interval`).
    Reaper,
    /// Leader actions and the Split Brain Resolver (every `leader-actions-interval`).
    LeaderActions,
    /// A gossip round (every `gossip-interval`).
    Gossip,
    /// An extra gossip round at 1/3 and 2/3 of the interval while convergence is slow.
    GossipSpeedup(u8),
    /// A Down node keeps gossiping for two rounds, then shuts down.
    DownShutdown,
    /// An Exiting node whose exiting tasks completed shuts down if it does not learn of its
    /// removal within `exiting-shutdown-timeout`.
    ExitingShutdown,
    /// `quarantine-removed-node-after` passed since this member was removed.
    QuarantineRemoved(UniqueAddress),
    /// The lease-majority strategy's delay before acquiring the lease passed.
    LeaseAcquire,
    /// A member probes its seed nodes outside its cluster for other clusters (every
    /// [`ISLAND_PROBE_INTERVAL_MS`](super::other_cluster::ISLAND_PROBE_INTERVAL_MS)).
    IslandProbe,
}
