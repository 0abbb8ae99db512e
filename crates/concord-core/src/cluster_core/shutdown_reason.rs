//! [`ShutdownReason`]: why a node asks the runtime to shut it down (the reason its
//! coordinated shutdown runs with).

/// Why the node asks the runtime to shut it down (the reason its coordinated shutdown
/// runs with). Non-exhaustive: a later version may add reasons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownReason {
    /// The node left gracefully and was removed (Akka's `ClusterLeavingReason`).
    Removed,
    /// The node was marked Down (`run-coordinated-shutdown-when-down`; Akka's
    /// `ClusterDowningReason`), or removed without having left.
    Downed,
    /// The node was Exiting and did not learn of its removal in time.
    ExitingTimeout,
    /// Joining the seed nodes did not succeed in time
    /// (`shutdown-after-unsuccessful-join-seed-nodes`; Akka's
    /// `ClusterJoinUnsuccessfulReason`).
    JoinSeedNodesTimeout,
    /// `leave` was called before the node was in a cluster.
    LeftBeforeJoining,
    /// This node's cluster proved to be an island: it was re-formed by a node whose
    /// membership record named another cluster, and that cluster was found running
    /// ([`crate::cluster_identity::ClusterIdentity::yields_to`]). The node stops so that,
    /// restarted by its supervisor, it joins its seed nodes again (like a downed node in
    /// Akka). Only with `island-resolution = rejoin`.
    IslandCluster,
    /// Stopped by its owner without leaving (the runtime's abrupt stop, like a crash).
    Stopped,
    /// A peer refused this incarnation as quarantined: it was removed from the cluster
    /// (e.g. downed while paused or partitioned).
    Quarantined,
    /// Its owner asked for a graceful shutdown (SIGTERM, `Node::shutdown`): the node
    /// leaves the cluster, then stops (Akka's `ActorSystemTerminateReason`).
    Requested,
}
