//! [`IslandReport`]: this node's cluster identity and the island clusters it found.

/// This node's cluster identity and the other clusters of its system name it found
/// through its seed nodes or the bootstrap contact points (island clusters;
/// docs/MEMBERSHIP.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IslandReport {
    /// This node's cluster, once it is a member of one that has an identity.
    pub identity: Option<concord_core::ClusterIdentity>,
    /// Other clusters found (each confirmed within the last 15 s).
    pub other_clusters: Vec<concord_core::cluster_core::OtherCluster>,
}
