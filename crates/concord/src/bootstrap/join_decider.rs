//! The join decision of Cluster Bootstrap: pure logic over what discovery and probing have
//! observed, so it is unit-tested without I/O and can be replaced by users.
//!
//! Source: cluster-bootstrap-details.md ("Case 1: Initial bootstrap", "Case 2: existing
//! cluster", "Customising join behavior") and Akka Management's `LowestAddressJoinDecider`.

use std::collections::{BTreeMap, BTreeSet};

use concord_core::Address;

use crate::discovery::ResolvedTarget;

/// What one contact point answered to its latest successful probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedNodesObservation {
    /// When the answer arrived, ms.
    pub observed_at_ms: u64,
    /// The node behind the contact point (`selfNode` of its answer).
    pub source_address: Address,
    /// The seed nodes it reported (empty: it is not in a cluster).
    pub seed_nodes: BTreeSet<Address>,
}

/// Everything a [`JoinDecider`] decides on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedNodesInformation {
    /// Now, ms.
    pub now_ms: u64,
    /// When the set of discovered contact points last changed, ms.
    pub contact_points_changed_at_ms: u64,
    /// The discovered contact points (ports filled in), this node's own included.
    pub contact_points: BTreeSet<ResolvedTarget>,
    /// This node's own contact point.
    pub self_contact_point: ResolvedTarget,
    /// The latest answer of each contact point that answered (and has not failed since).
    pub seed_nodes_observations: BTreeMap<ResolvedTarget, SeedNodesObservation>,
}

/// Whether `a` and `b` are the same contact point: same port and the same IP address or
/// host name.
pub fn same_contact_point(a: &ResolvedTarget, b: &ResolvedTarget) -> bool {
    a.port == b.port && (a.host == b.host || (a.address.is_some() && a.address == b.address))
}

impl SeedNodesInformation {
    /// Whether `target` is this node's contact point: same port and the same IP address
    /// or host name.
    pub fn is_self(&self, target: &ResolvedTarget) -> bool {
        same_contact_point(&self.self_contact_point, target)
    }

    /// Seed nodes reported by any contact point.
    pub fn reported_seed_nodes(&self) -> BTreeSet<Address> {
        self.seed_nodes_observations
            .values()
            .flat_map(|o| o.seed_nodes.iter().cloned())
            .collect()
    }
}

/// The outcome of one decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JoinDecision {
    /// Not yet: keep discovering and probing.
    KeepProbing,
    /// A cluster exists: join these seed nodes ("epidemic joining").
    JoinOtherSeedNodes(BTreeSet<Address>),
    /// No cluster exists and this node is the lowest contact point: form a new cluster.
    JoinSelf,
}

/// Decides when and what a bootstrapping node joins (Akka's `JoinDecider`). Replace it with
/// [`crate::NodeBuilder::join_decider`].
pub trait JoinDecider: Send + Sync {
    /// One decision; called after every discovery and probe result.
    fn decide(&self, info: &SeedNodesInformation) -> JoinDecision;
}

/// Settings of [`LowestAddressJoinDecider`] (`[bootstrap]` keys).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinDeciderSettings {
    /// `contact-point-discovery.stable-margin`, ms.
    pub stable_margin_ms: u64,
    /// `contact-point-discovery.required-contact-point-nr`.
    pub required_contact_point_nr: usize,
    /// `contact-point-discovery.contact-with-all-contact-points`.
    pub contact_with_all_contact_points: bool,
    /// `new-cluster-enabled`.
    pub new_cluster_enabled: bool,
}

impl Default for JoinDeciderSettings {
    fn default() -> Self {
        JoinDeciderSettings {
            stable_margin_ms: 5000,
            required_contact_point_nr: 2,
            contact_with_all_contact_points: true,
            new_cluster_enabled: true,
        }
    }
}

/// The default decider: join reported seed nodes at once; otherwise, once discovery has
/// been stable for the stable margin, enough contact points are known and answered (all of
/// them by default), the node whose contact point is lowest in [`ResolvedTarget`] order
/// joins itself — if new clusters may be formed.
#[derive(Clone, Debug, Default)]
pub struct LowestAddressJoinDecider {
    settings: JoinDeciderSettings,
}

impl LowestAddressJoinDecider {
    /// A decider with `settings`.
    pub fn new(settings: JoinDeciderSettings) -> Self {
        LowestAddressJoinDecider { settings }
    }
}

impl JoinDecider for LowestAddressJoinDecider {
    fn decide(&self, info: &SeedNodesInformation) -> JoinDecision {
        let s = &self.settings;
        let seeds = info.reported_seed_nodes();
        if !seeds.is_empty() {
            return JoinDecision::JoinOtherSeedNodes(seeds);
        }
        if info.contact_points.len() < s.required_contact_point_nr {
            return JoinDecision::KeepProbing;
        }
        if info.now_ms < info.contact_points_changed_at_ms + s.stable_margin_ms {
            return JoinDecision::KeepProbing;
        }
        let Some(lowest) = info.contact_points.iter().next() else {
            return JoinDecision::KeepProbing;
        };
        if !info.is_self(lowest) {
            return JoinDecision::KeepProbing;
        }
        let others: Vec<&ResolvedTarget> = info
            .contact_points
            .iter()
            .filter(|t| !info.is_self(t))
            .collect();
        let answered = others
            .iter()
            .filter(|t| info.seed_nodes_observations.contains_key(**t))
            .count();
        // This node answers for itself.
        if answered + 1 < s.required_contact_point_nr {
            return JoinDecision::KeepProbing;
        }
        if s.contact_with_all_contact_points && answered < others.len() {
            return JoinDecision::KeepProbing;
        }
        if !s.new_cluster_enabled {
            return JoinDecision::KeepProbing;
        }
        JoinDecision::JoinSelf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(host: &str, port: u16) -> ResolvedTarget {
        ResolvedTarget::new(host, Some(port))
    }

    fn obs(node: &str, seeds: &[&str]) -> SeedNodesObservation {
        SeedNodesObservation {
            observed_at_ms: 10_000,
            source_address: Address::new("c", node, 25520),
            seed_nodes: seeds.iter().map(|h| Address::new("c", *h, 25520)).collect(),
        }
    }

    /// `me` among `points`; every other point answered with no seeds; discovery stable for 6 s.
    fn info(me: ResolvedTarget, points: &[ResolvedTarget]) -> SeedNodesInformation {
        let mut i = SeedNodesInformation {
            now_ms: 10_000,
            contact_points_changed_at_ms: 4_000,
            contact_points: points.iter().cloned().collect(),
            self_contact_point: me.clone(),
            seed_nodes_observations: BTreeMap::new(),
        };
        for p in points {
            if *p != me {
                i.seed_nodes_observations
                    .insert(p.clone(), obs(&p.host, &[]));
            }
        }
        i
    }

    fn decider() -> LowestAddressJoinDecider {
        LowestAddressJoinDecider::default()
    }

    #[test]
    fn the_lowest_contact_point_joins_itself_and_no_other_does() {
        let pts = [
            t("10.0.0.2", 8558),
            t("10.0.0.10", 8558),
            t("10.0.0.9", 8558),
        ];
        assert_eq!(
            decider().decide(&info(pts[0].clone(), &pts)),
            JoinDecision::JoinSelf
        );
        for other in &pts[1..] {
            assert_eq!(
                decider().decide(&info(other.clone(), &pts)),
                JoinDecision::KeepProbing,
                "{other:?} is not the lowest"
            );
        }
    }

    #[test]
    fn ordering_ipv4_numeric_before_ipv6_host_names_first_then_port() {
        // Numeric, not textual, IPv4 order: 10.0.0.9 < 10.0.0.10.
        let pts = [t("10.0.0.10", 8558), t("10.0.0.9", 8558)];
        assert_eq!(
            decider().decide(&info(t("10.0.0.9", 8558), &pts)),
            JoinDecision::JoinSelf
        );
        // IPv4 before IPv6.
        let pts = [t("::1", 8558), t("192.168.1.1", 8558)];
        assert_eq!(
            decider().decide(&info(t("192.168.1.1", 8558), &pts)),
            JoinDecision::JoinSelf
        );
        assert_eq!(
            decider().decide(&info(t("::1", 8558), &pts)),
            JoinDecision::KeepProbing
        );
        // IPv6 numeric order.
        let pts = [t("fd00::2", 8558), t("fd00::10", 8558)];
        assert_eq!(
            decider().decide(&info(t("fd00::2", 8558), &pts)),
            JoinDecision::JoinSelf
        );
        // Host names (no address) order by name.
        let pts = [t("node-b", 8558), t("node-a", 8558)];
        assert_eq!(
            decider().decide(&info(t("node-a", 8558), &pts)),
            JoinDecision::JoinSelf
        );
        assert_eq!(
            decider().decide(&info(t("node-b", 8558), &pts)),
            JoinDecision::KeepProbing
        );
        // Same host: lowest port.
        let pts = [t("127.0.0.1", 8560), t("127.0.0.1", 8559)];
        assert_eq!(
            decider().decide(&info(t("127.0.0.1", 8559), &pts)),
            JoinDecision::JoinSelf
        );
        assert_eq!(
            decider().decide(&info(t("127.0.0.1", 8560), &pts)),
            JoinDecision::KeepProbing
        );
    }

    #[test]
    fn stable_margin_not_yet_passed_keeps_probing() {
        let pts = [t("10.0.0.1", 8558), t("10.0.0.2", 8558)];
        let mut i = info(pts[0].clone(), &pts);
        i.contact_points_changed_at_ms = i.now_ms - 4_999;
        assert_eq!(decider().decide(&i), JoinDecision::KeepProbing);
        i.contact_points_changed_at_ms = i.now_ms - 5_000;
        assert_eq!(decider().decide(&i), JoinDecision::JoinSelf);
    }

    #[test]
    fn too_few_contact_points_keeps_probing() {
        let pts = [t("10.0.0.1", 8558)];
        assert_eq!(
            decider().decide(&info(pts[0].clone(), &pts)),
            JoinDecision::KeepProbing
        );
        let d = LowestAddressJoinDecider::new(JoinDeciderSettings {
            required_contact_point_nr: 4,
            ..Default::default()
        });
        let pts = [
            t("10.0.0.1", 8558),
            t("10.0.0.2", 8558),
            t("10.0.0.3", 8558),
        ];
        assert_eq!(
            d.decide(&info(pts[0].clone(), &pts)),
            JoinDecision::KeepProbing
        );
        let single = LowestAddressJoinDecider::new(JoinDeciderSettings {
            required_contact_point_nr: 1,
            ..Default::default()
        });
        let pts = [t("10.0.0.1", 8558)];
        assert_eq!(
            single.decide(&info(pts[0].clone(), &pts)),
            JoinDecision::JoinSelf
        );
    }

    #[test]
    fn one_silent_contact_point_blocks_forming_unless_contact_with_all_is_off() {
        let pts = [
            t("10.0.0.1", 8558),
            t("10.0.0.2", 8558),
            t("10.0.0.3", 8558),
        ];
        let mut i = info(pts[0].clone(), &pts);
        i.seed_nodes_observations.remove(&pts[2]);
        assert_eq!(decider().decide(&i), JoinDecision::KeepProbing);
        let relaxed = LowestAddressJoinDecider::new(JoinDeciderSettings {
            contact_with_all_contact_points: false,
            ..Default::default()
        });
        assert_eq!(relaxed.decide(&i), JoinDecision::JoinSelf);
        // ... but still not below required-contact-point-nr answers.
        let strict_nr = LowestAddressJoinDecider::new(JoinDeciderSettings {
            contact_with_all_contact_points: false,
            required_contact_point_nr: 3,
            ..Default::default()
        });
        assert_eq!(strict_nr.decide(&i), JoinDecision::KeepProbing);
    }

    #[test]
    fn reported_seed_nodes_are_joined_at_once() {
        let pts = [
            t("10.0.0.1", 8558),
            t("10.0.0.2", 8558),
            t("10.0.0.3", 8558),
        ];
        // Even the lowest node, before the stable margin, with one silent contact point.
        let mut i = info(pts[0].clone(), &pts);
        i.contact_points_changed_at_ms = i.now_ms;
        i.seed_nodes_observations.remove(&pts[2]);
        i.seed_nodes_observations
            .insert(pts[1].clone(), obs("10.0.0.2", &["10.0.0.7", "10.0.0.8"]));
        let want: BTreeSet<Address> = ["10.0.0.7", "10.0.0.8"]
            .iter()
            .map(|h| Address::new("c", *h, 25520))
            .collect();
        assert_eq!(decider().decide(&i), JoinDecision::JoinOtherSeedNodes(want));
    }

    #[test]
    fn new_cluster_disabled_never_joins_itself_but_joins_existing_clusters() {
        let d = LowestAddressJoinDecider::new(JoinDeciderSettings {
            new_cluster_enabled: false,
            ..Default::default()
        });
        let pts = [t("10.0.0.1", 8558), t("10.0.0.2", 8558)];
        let mut i = info(pts[0].clone(), &pts);
        i.now_ms += 1_000_000;
        assert_eq!(d.decide(&i), JoinDecision::KeepProbing);
        i.seed_nodes_observations
            .insert(pts[1].clone(), obs("10.0.0.2", &["10.0.0.2"]));
        assert!(matches!(d.decide(&i), JoinDecision::JoinOtherSeedNodes(_)));
    }

    #[test]
    fn self_is_recognised_by_address_or_host_name_and_port() {
        let i = info(t("10.0.0.1", 8558), &[t("10.0.0.1", 8558)]);
        assert!(i.is_self(&t("10.0.0.1", 8558)));
        assert!(!i.is_self(&t("10.0.0.1", 8559)));
        let by_ip = ResolvedTarget {
            host: "node-1.svc".into(),
            port: Some(8558),
            address: Some("10.0.0.1".parse().unwrap()),
        };
        assert!(i.is_self(&by_ip));
    }
}
