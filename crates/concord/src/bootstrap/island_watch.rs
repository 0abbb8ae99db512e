//! The island watch: Cluster Bootstrap's contact points after this node is a member.
//!
//! A cluster formed through bootstrap has no seed nodes, so the seed-node island probe
//! (`concord_core::cluster_core::ClusterCore::set_island_probe_targets`, docs/MEMBERSHIP.md
//! "Island clusters") has nothing to probe. Every `bootstrap.island-watch-interval` (30 s
//! by default, ± `contact-point.probe-interval-jitter`) the watch looks the contact points
//! up again, probes them as bootstrap does (`GET /bootstrap/seed-nodes`), and hands the
//! seed nodes they report that are not members of this node's cluster to the island
//! probe ([`Cluster::set_island_probe_targets`]), replacing the previous ones. The island
//! probe then sends them InitJoin with this cluster's identity: another cluster of this
//! system name behind a contact point is found and reported, and the side that can prove
//! it is the island stops (`cluster.island-resolution = "rejoin"`).
//!
//! Concord-specific: Akka's bootstrap ends once the node has joined.

use std::collections::BTreeSet;
use std::sync::Arc;

use concord_core::cluster_core::MAX_ISLAND_PROBE_TARGETS;
use concord_core::{Address, UniqueAddress};
use rand::seq::SliceRandom;
use tokio::task::JoinSet;
use tracing::{debug, info};

use super::backoff::jittered;
use super::contact_point::{self, with_fallback_port, SeedNodesJson, MAX_SEED_NODES};
use super::join_decider::same_contact_point;
use super::settings::BootstrapSettings;
use crate::cluster::Cluster;
use crate::discovery::{ResolvedTarget, ServiceDiscovery};

/// Contact points probed in one round, at most (a random choice when discovery finds
/// more, so that every one is probed over the rounds).
pub const MAX_WATCHED_CONTACT_POINTS: usize = 64;

/// What the watch needs from the bootstrap process that preceded it.
pub(super) struct IslandWatch {
    pub(super) cluster: Cluster,
    pub(super) settings: BootstrapSettings,
    pub(super) discovery: Arc<dyn ServiceDiscovery>,
    pub(super) http: reqwest::Client,
    pub(super) self_contact_point: ResolvedTarget,
    pub(super) system: String,
    pub(super) rng: rand::rngs::StdRng,
}

impl IslandWatch {
    /// Runs rounds every `island-watch-interval` until the node's membership ends; returns
    /// at once when the interval is zero (watch off).
    pub(super) async fn run(mut self) {
        let interval = self.settings.island_watch_interval;
        if interval.is_zero() {
            return;
        }
        info!(
            interval_ms = interval.as_millis() as u64,
            "cluster bootstrap: island watch of the contact points started"
        );
        loop {
            let wait = jittered(interval, self.settings.probe_interval_jitter, &mut self.rng);
            tokio::time::sleep(wait).await;
            if self.cluster.membership_ended().is_some() {
                return;
            }
            let targets = self.round().await;
            if !targets.is_empty() {
                debug!(
                    targets = ?targets.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                    "island watch: contact points report nodes outside this cluster"
                );
            }
            if self
                .cluster
                .set_island_probe_targets(targets)
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// One round: lookup, probes, and the reported seed nodes that are not members of
    /// this node's cluster (at most [`MAX_ISLAND_PROBE_TARGETS`]).
    async fn round(&mut self) -> Vec<Address> {
        let s = &self.settings;
        let found = match self.discovery.lookup(&s.lookup, s.resolve_timeout).await {
            Ok(r) => r.addresses,
            Err(e) => {
                debug!(error = %e, "island watch: contact point discovery failed");
                return Vec::new();
            }
        };
        let mut points: Vec<ResolvedTarget> = with_fallback_port(found, s.fallback_port)
            .into_iter()
            .filter(|t| !same_contact_point(&self.self_contact_point, t))
            .collect();
        points.shuffle(&mut self.rng);
        points.truncate(MAX_WATCHED_CONTACT_POINTS);
        let mut probes = JoinSet::new();
        for target in points {
            let http = self.http.clone();
            let (scheme, port, timeout) = (s.scheme(), s.fallback_port, s.probing_failure_timeout);
            probes.spawn(async move {
                contact_point::probe(&http, scheme, &target, port, timeout).await
            });
        }
        let view = self.cluster.view();
        let members: BTreeSet<&UniqueAddress> = view.members.keys().collect();
        let mut targets: Vec<Address> = Vec::new();
        while let Some(joined) = probes.join_next().await {
            match joined {
                Ok(Ok(answer)) => {
                    for a in outside_seed_nodes(&answer, &self.system, &members) {
                        if targets.len() < MAX_ISLAND_PROBE_TARGETS && !targets.contains(&a) {
                            targets.push(a);
                        }
                    }
                }
                Ok(Err(e)) => debug!(error = %e, "island watch: probe failed"),
                Err(e) => debug!(error = %e, "island watch: probe task failed"),
            }
        }
        targets
    }
}

/// The seed nodes of a contact point's answer (its first [`MAX_SEED_NODES`]; unparsable
/// ones and other system names skipped) that are not `members` (address and uid) of this
/// node's cluster.
pub fn outside_seed_nodes(
    answer: &SeedNodesJson,
    system: &str,
    members: &BTreeSet<&UniqueAddress>,
) -> Vec<Address> {
    answer
        .seed_nodes
        .iter()
        .take(MAX_SEED_NODES)
        .filter_map(|s| {
            let a = crate::config::parse_node_address(&s.node, system).ok()?;
            (a.system == system).then_some(UniqueAddress::new(a, s.node_uid))
        })
        .filter(|u| !members.contains(u))
        .map(|u| u.address)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::SeedNodeJson;

    fn seed(node: &str, uid: u64) -> SeedNodeJson {
        SeedNodeJson {
            node: node.into(),
            node_uid: uid,
            status: "Up".into(),
            roles: Vec::new(),
        }
    }

    #[test]
    fn only_parsable_seed_nodes_of_this_system_outside_this_cluster_are_kept() {
        let member = UniqueAddress::new(Address::new("sys", "10.0.0.1", 2552), 7);
        let members: BTreeSet<&UniqueAddress> = [&member].into_iter().collect();
        let answer = SeedNodesJson {
            self_node: "garbage".into(),
            seed_nodes: vec![
                seed("concord://sys@10.0.0.1:2552", 7),
                // Same address, another incarnation: not this cluster's member.
                seed("concord://sys@10.0.0.1:2552", 8),
                seed("concord://other@10.0.0.2:2552", 1),
                seed("not an address", 1),
                seed("concord://sys@10.0.0.3:2552", 1),
            ],
        };
        let kept = outside_seed_nodes(&answer, "sys", &members);
        assert_eq!(
            kept,
            vec![
                Address::new("sys", "10.0.0.1", 2552),
                Address::new("sys", "10.0.0.3", 2552)
            ]
        );
    }

    #[test]
    fn an_answer_with_too_many_seed_nodes_is_cut_to_the_reported_maximum() {
        let answer = SeedNodesJson {
            self_node: String::new(),
            seed_nodes: (0..1000)
                .map(|i| seed(&format!("concord://sys@10.0.0.1:{}", 3000 + i), 1))
                .collect(),
        };
        let kept = outside_seed_nodes(&answer, "sys", &BTreeSet::new());
        assert_eq!(kept.len(), MAX_SEED_NODES);
    }
}
