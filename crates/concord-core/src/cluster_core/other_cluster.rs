//! [`OtherCluster`]: another cluster of this node's system name found by the island probe,
//! and the probe's interval and bounds; `island.rs` runs the probe.

use crate::address::UniqueAddress;
use crate::cluster_identity::ClusterIdentity;

/// A member probes its seed nodes outside its cluster this often, ms.
pub const ISLAND_PROBE_INTERVAL_MS: u64 = 5_000;

/// Island probe targets the runtime may add beyond the seed nodes
/// ([`ClusterCore::set_island_probe_targets`](super::ClusterCore::set_island_probe_targets)); further addresses are ignored.
pub const MAX_ISLAND_PROBE_TARGETS: usize = 16;

/// Other clusters remembered at once (more are ignored: the report only needs some).
pub(super) const MAX_OTHER_CLUSTERS: usize = 8;

/// A found cluster not confirmed again for this long is forgotten (readiness recovers once
/// the island is gone), ms.
pub const OTHER_CLUSTER_FORGOTTEN_AFTER_MS: u64 = 3 * ISLAND_PROBE_INTERVAL_MS;

/// Another cluster of this node's system name, found through a seed node or an extra
/// island probe target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherCluster {
    /// Its identity.
    pub identity: ClusterIdentity,
    /// The member of it that told this node (answered a probe or probed this node).
    pub seen_via: UniqueAddress,
    /// When it was first found, ms.
    pub first_seen_ms: u64,
    /// When it was last confirmed, ms.
    pub last_seen_ms: u64,
    /// True if this node's cluster can prove it is the island
    /// ([`ClusterIdentity::yields_to`]).
    pub this_cluster_yields: bool,
}
