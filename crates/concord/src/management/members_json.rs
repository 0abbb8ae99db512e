//! The JSON of Akka Management's `GET /cluster/members`: members, unreachable members
//! and the island clusters found.

use concord_core::{Address, Member, MembershipView};
use serde::{Deserialize, Serialize};

/// `ClusterMember` JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMemberJson {
    /// Full address.
    pub node: String,
    /// Uid, as a string (Akka Management's shape).
    pub node_uid: String,
    /// Status name.
    pub status: String,
    /// Roles, sorted.
    pub roles: Vec<String>,
    /// The member's application version (`cluster.app-version`; Concord-specific, absent
    /// from Akka Management's shape — a reader of that shape ignores it).
    #[serde(default)]
    pub app_version: String,
}

/// `ClusterUnreachableMember` JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUnreachableMemberJson {
    /// Full address.
    pub node: String,
    /// Observers that see it unreachable, sorted.
    pub observed_by: Vec<String>,
}

/// `ClusterMembers` JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMembersJson {
    /// This node.
    pub self_node: String,
    /// Members sorted by `node`.
    pub members: Vec<ClusterMemberJson>,
    /// Unreachable members.
    pub unreachable: Vec<ClusterUnreachableMemberJson>,
    /// Leader, omitted when none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub leader: Option<String>,
    /// Oldest Up member, omitted when none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub oldest: Option<String>,
    /// Warnings about this node's configuration, omitted when none (e.g.
    /// `remote.insecure`: remoting reachable beyond loopback without TLS or a secret).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub warnings: Vec<String>,
    /// This node's cluster identity (16 hex digits), omitted before it is a member of a
    /// cluster that has one (Concord-specific; docs/MEMBERSHIP.md).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cluster_id: Option<String>,
    /// Other clusters of this system name found through the seed nodes or the bootstrap
    /// contact points (island clusters),
    /// omitted when none. While any is listed, `GET /ready` fails.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub other_clusters: Vec<OtherClusterJson>,
}

/// One other cluster of this system name (`otherClusters` of `GET /cluster/members`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OtherClusterJson {
    /// Its identity, 16 hex digits.
    pub cluster_id: String,
    /// The cluster it was re-formed from, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reformed_from: Option<String>,
    /// The member of it that told this node (`address#uid`).
    pub seen_via: String,
    /// True if this node's cluster proved to be the island (it was re-formed from that
    /// one): with `cluster.island-resolution = rejoin` this node is stopping.
    pub this_cluster_yields: bool,
}

/// `clusterId` and `otherClusters` of `GET /cluster/members` from an island report.
pub fn island_json(r: &crate::cluster::IslandReport) -> (Option<String>, Vec<OtherClusterJson>) {
    (
        r.identity.map(|i| i.id.to_string()),
        r.other_clusters
            .iter()
            .map(|o| OtherClusterJson {
                cluster_id: o.identity.id.to_string(),
                reformed_from: o.identity.reformed_from.map(|c| c.to_string()),
                seen_via: o.seen_via.to_string(),
                this_cluster_yields: o.this_cluster_yields,
            })
            .collect(),
    )
}

/// The JSON of one member.
pub fn member_json(m: &Member) -> ClusterMemberJson {
    ClusterMemberJson {
        node: m.address().to_string(),
        node_uid: m.unique_address.uid.to_string(),
        status: m.status.to_string(),
        roles: m.roles.iter().cloned().collect(),
        app_version: m.app_version.clone(),
    }
}

/// The `GET /cluster/members` body for a view.
pub fn members_json(self_node: &Address, v: &MembershipView) -> ClusterMembersJson {
    let mut members: Vec<ClusterMemberJson> = v.members.values().map(member_json).collect();
    members.sort_by(|a, b| a.node.cmp(&b.node));
    let mut unreachable: Vec<ClusterUnreachableMemberJson> = v
        .unreachable
        .iter()
        .filter_map(|(node, obs)| {
            let m = v.member(node)?;
            let mut observed_by: Vec<String> = obs.iter().map(|o| o.address.to_string()).collect();
            observed_by.sort();
            Some(ClusterUnreachableMemberJson {
                node: m.address().to_string(),
                observed_by,
            })
        })
        .collect();
    unreachable.sort_by(|a, b| a.node.cmp(&b.node));
    ClusterMembersJson {
        self_node: self_node.to_string(),
        members,
        unreachable,
        leader: v.leader.as_ref().map(|a| a.address.to_string()),
        oldest: v.oldest(None).map(|m| m.address().to_string()),
        warnings: Vec::new(),
        cluster_id: None,
        other_clusters: Vec::new(),
    }
}
