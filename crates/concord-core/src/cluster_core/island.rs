//! Island clusters: a member probes its seed nodes outside its cluster — and the addresses
//! the runtime learned from Cluster Bootstrap's contact points
//! ([`ClusterCore::set_island_probe_targets`]) — for another cluster of the same system
//! name, reports what it finds ([`ClusterCore::other_clusters`]), and
//! stops when its own cluster can prove it is the island
//! ([`ClusterIdentity::yields_to`], with [`IslandResolution::Rejoin`]).
//!
//! The probe is the seed-node process's InitJoin, carrying the prober's cluster identity; a
//! member answers InitJoinAck with its own. Both sides learn of each other: the prober from
//! the answer, the probed node from the InitJoin. Concord-specific (Akka has neither cluster
//! identities nor probes); see docs/MEMBERSHIP.md, "Island clusters".

use std::collections::BTreeSet;

use tracing::warn;

use super::cluster_timer::ClusterTimer;
use super::other_cluster::{
    OtherCluster, ISLAND_PROBE_INTERVAL_MS, MAX_ISLAND_PROBE_TARGETS, MAX_OTHER_CLUSTERS,
    OTHER_CLUSTER_FORGOTTEN_AFTER_MS,
};
use super::shutdown_reason::ShutdownReason;
use super::ClusterCore;
use crate::address::{Address, UniqueAddress};
use crate::cluster_identity::{ClusterIdentity, IslandResolution};
use crate::message::ClusterMessage;

impl ClusterCore {
    /// Other clusters of this system name found through the island probe (confirmed within
    /// [`OTHER_CLUSTER_FORGOTTEN_AFTER_MS`]), by id.
    pub fn other_clusters(&self) -> impl Iterator<Item = &OtherCluster> {
        self.other_clusters.values()
    }

    /// Replaces the island probe's extra targets: addresses, learned outside the seed-node
    /// process, where a member of another cluster of this system name may run — Cluster
    /// Bootstrap's island watch hands over the seed nodes its contact points report
    /// (docs/MEMBERSHIP.md, "Island clusters"). This node's own address, addresses of
    /// another system name, members of this node's cluster and duplicates are dropped;
    /// at most [`MAX_ISLAND_PROBE_TARGETS`] are kept (the first ones given). They are
    /// probed like the seed nodes, from the next probe on (every
    /// [`ISLAND_PROBE_INTERVAL_MS`]), and their InitJoinAck answers are taken as probe
    /// answers. Concord-specific.
    pub fn set_island_probe_targets(&mut self, targets: impl IntoIterator<Item = Address>) {
        let me = self.self_address().clone();
        let members: BTreeSet<Address> = self
            .state
            .latest_gossip
            .members
            .keys()
            .map(|m| m.address.clone())
            .collect();
        self.island_probe_targets.clear();
        for t in targets {
            if self.island_probe_targets.len() >= MAX_ISLAND_PROBE_TARGETS {
                break;
            }
            if t != me && t.system == me.system && !members.contains(&t) {
                self.island_probe_targets.insert(t);
            }
        }
    }

    /// The island probe's extra targets ([`ClusterCore::set_island_probe_targets`]).
    pub fn island_probe_targets(&self) -> impl Iterator<Item = &Address> {
        self.island_probe_targets.iter()
    }

    /// Whether the island probe goes to `address` (a seed node or an extra target), so
    /// that its InitJoinAck is a probe answer.
    pub(super) fn is_island_probe_target(&self, address: &Address) -> bool {
        self.seed_nodes.contains(address) || self.island_probe_targets.contains(address)
    }

    /// The island probe: InitJoin (with this cluster's identity) to every seed node and
    /// extra target ([`ClusterCore::set_island_probe_targets`]) whose address is not a
    /// member of this node's cluster; re-armed every [`ISLAND_PROBE_INTERVAL_MS`].
    pub(super) fn island_probe(&mut self, now_ms: u64) {
        self.outputs.timers.set(
            ClusterTimer::IslandProbe,
            now_ms.saturating_add(ISLAND_PROBE_INTERVAL_MS),
        );
        self.other_clusters.retain(|_, o| {
            now_ms.saturating_sub(o.last_seen_ms) <= OTHER_CLUSTER_FORGOTTEN_AFTER_MS
        });
        let Some(identity) = self.cluster_identity() else {
            return;
        };
        let members: BTreeSet<&Address> = self
            .state
            .latest_gossip
            .members
            .keys()
            .map(|m| &m.address)
            .collect();
        // The seed nodes first, in their order, then the extra targets not among them.
        let mut targets: Vec<Address> = Vec::new();
        for s in self
            .seed_nodes
            .iter()
            .chain(self.island_probe_targets.iter())
        {
            if s != self.self_address() && !members.contains(s) && !targets.contains(s) {
                targets.push(s.clone());
            }
        }
        for t in targets {
            self.send_to_address(
                &t,
                ClusterMessage::InitJoin {
                    cluster: Some(identity),
                },
            );
        }
    }

    /// `from`, not a member of this node's cluster, is a member of the cluster `other`
    /// (its InitJoin or InitJoinAck said so): record and report it, and stop if this
    /// cluster is the island and `island-resolution = rejoin`.
    pub(super) fn found_cluster(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        other: ClusterIdentity,
    ) {
        let Some(mine) = self.cluster_identity() else {
            return;
        };
        if other.id == mine.id || self.state.latest_gossip.has_member(from) {
            return;
        }
        let yields = mine.yields_to(&other);
        let full = self.other_clusters.len() >= MAX_OTHER_CLUSTERS;
        match self.other_clusters.get_mut(&other.id) {
            Some(o) => {
                o.last_seen_ms = now_ms;
                o.seen_via = from.clone();
            }
            None if full => return,
            None => {
                warn!(
                    this_cluster = %mine, other_cluster = %other, via = %from,
                    this_cluster_yields = yields,
                    "found another cluster of this system name (island)"
                );
                self.other_clusters.insert(
                    other.id,
                    super::OtherCluster {
                        identity: other,
                        seen_via: from.clone(),
                        first_seen_ms: now_ms,
                        last_seen_ms: now_ms,
                        this_cluster_yields: yields,
                    },
                );
                self.state_changes += 1;
            }
        }
        if yields && self.settings.island_resolution == IslandResolution::Rejoin {
            warn!(
                this_cluster = %mine, original = %other,
                "this cluster was re-formed from a cluster that is still running: this node stops so that it joins its seed nodes again when restarted (island-resolution = rejoin)"
            );
            self.shut_down(ShutdownReason::IslandCluster);
        }
    }
}
