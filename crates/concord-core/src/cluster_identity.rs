//! Cluster identity and the membership record: what keeps a restarted node from forming an
//! "island" cluster of its own, and what tells two clusters of the same system name apart.
//!
//! - [`ClusterId`]: a random 64-bit number chosen by the node that forms a cluster (joins
//!   itself). It travels in the gossip, so every member knows it.
//! - [`ClusterIdentity`]: the id, plus the cluster the founder's membership record named
//!   when it formed this one ([`ClusterIdentity::reformed_from`]).
//! - [`MembershipRecord`]: what the runtime read from the node's data directory at start —
//!   "this node was a member of a cluster (with this id)". A node with a record never
//!   forms a new cluster because its seed nodes did not answer within `seed-node-timeout`
//!   (Akka's first-seed rule, which makes islands after a restart inside a partition); it
//!   keeps trying to join ([`may_join_self_after_seed_timeout`]).
//!
//! Concord-specific (Akka has no cluster identity; see docs/MEMBERSHIP.md, "Island
//! clusters").

use std::fmt;

use serde::{Deserialize, Serialize};

/// A cluster's identity number, chosen at random by the node that formed it. Displayed as
/// 16 hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClusterId(pub u64);

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for ClusterId {
    type Err = std::num::ParseIntError;

    /// Parses the 16-hex-digit form of [`fmt::Display`].
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(s, 16).map(ClusterId)
    }
}

/// The identity of a cluster, carried in its gossip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ClusterIdentity {
    /// Random, chosen by the founder.
    pub id: ClusterId,
    /// When the founder formed this cluster while its membership record named another
    /// cluster (every other seed node answered that it was not in a cluster, or an
    /// operator or Cluster Bootstrap made it join itself): that cluster. `None` for a
    /// cluster formed by a node with no record.
    pub reformed_from: Option<ClusterId>,
}

impl ClusterIdentity {
    /// True if this cluster can prove it is not the original one when it meets `other`
    /// (a cluster of the same system name): it was re-formed by a node whose membership
    /// record named `other`, so `other` existed first and is still running. Such a
    /// cluster's members leave it and join their seed nodes again. In every other case neither side can
    /// prove it (two clusters formed by nodes without a record, or re-formed from a third
    /// cluster): both only report the other.
    pub fn yields_to(&self, other: &ClusterIdentity) -> bool {
        self.id != other.id && self.reformed_from == Some(other.id)
    }
}

impl fmt::Display for ClusterIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reformed_from {
            Some(p) => write!(f, "{} (re-formed from {p})", self.id),
            None => write!(f, "{}", self.id),
        }
    }
}

/// What a member does when it finds that its cluster is the island
/// ([`ClusterIdentity::yields_to`]): `cluster.island-resolution`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IslandResolution {
    /// Stop (reason `IslandCluster`, its coordinated shutdown runs and the process exits),
    /// so that its supervisor restarts it and it joins its seed nodes again — the
    /// original cluster. The default.
    #[default]
    Rejoin,
    /// Only report it (log, metric, readiness, `GET /cluster/members`).
    Report,
}

/// What the node's membership record says: this node (its address, an earlier
/// incarnation) was a member of a cluster. The runtime writes it in the data directory
/// when the node becomes Up and reads it at start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipRecord {
    /// The identity of that cluster, when it had one (clusters formed by older versions
    /// have none).
    pub cluster: Option<ClusterId>,
}

/// May a node form a new cluster by joining itself because no other seed node answered
/// within `seed-node-timeout` (Akka's first-seed rule)? Only without a membership record:
/// silence is no evidence that the cluster it was a member of is gone (it may be cut off
/// by a partition), so a node that was a member keeps trying to join. It still forms one
/// when every other seed node answers that it is not in a cluster (InitJoinNack: the seeds
/// are reachable and clusterless, e.g. after the whole cluster was stopped), when its only
/// seed node is itself, and when told to join itself (operator, Cluster Bootstrap).
pub fn may_join_self_after_seed_timeout(record: Option<&MembershipRecord>) -> bool {
    record.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_with_a_record_never_joins_itself_on_seed_timeout() {
        assert!(may_join_self_after_seed_timeout(None));
        assert!(!may_join_self_after_seed_timeout(Some(
            &MembershipRecord::default()
        )));
        assert!(!may_join_self_after_seed_timeout(Some(&MembershipRecord {
            cluster: Some(ClusterId(7))
        })));
    }

    #[test]
    fn only_a_cluster_reformed_from_the_other_yields() {
        let a = ClusterIdentity {
            id: ClusterId(1),
            reformed_from: None,
        };
        let b = ClusterIdentity {
            id: ClusterId(2),
            reformed_from: Some(ClusterId(1)),
        };
        let c = ClusterIdentity {
            id: ClusterId(3),
            reformed_from: Some(ClusterId(9)),
        };
        assert!(b.yields_to(&a));
        assert!(!a.yields_to(&b));
        assert!(!c.yields_to(&a) && !a.yields_to(&c));
        assert!(!b.yields_to(&b));
    }

    #[test]
    fn cluster_id_round_trips_as_hex() {
        let id = ClusterId(0x00ab_cdef_0123_4567);
        assert_eq!(id.to_string(), "00abcdef01234567");
        assert_eq!("00abcdef01234567".parse::<ClusterId>().unwrap(), id);
    }
}
