//! [`ReplicatorTimer`]: the replicator's timers (gossip, delta propagation, subscriber
//! notification, pruning, and each request's secondaries and timeout).

/// The replicator's timers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum ReplicatorTimer {
    Gossip,
    DeltaPropagation,
    NotifySubscribers,
    Pruning,
    /// Send a request to its secondary nodes (a fifth of its timeout).
    Secondaries(u64),
    /// A request's timeout.
    RequestTimeout(u64),
}
