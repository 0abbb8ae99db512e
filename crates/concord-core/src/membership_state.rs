//! [`MembershipState`]: one node's view — the latest [`Gossip`] plus who "self" is — and the
//! questions every node answers from it locally: convergence, leader, oldest, gossip peer.
//!
//! Spec: cluster-specification.md, "Gossip Convergence", "Leader", "Gossip Protocol";
//! cluster-membership-service.md, "Leader". Akka's `MembershipState` and
//! `GossipTargetSelector`.

use std::collections::BTreeSet;

use rand::Rng;

use crate::address::UniqueAddress;
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};
use crate::reachability::Reachability;

/// Members that must be in the seen set for convergence.
pub const CONVERGENCE_MEMBER_STATUS: [MemberStatus; 4] = [
    MemberStatus::Up,
    MemberStatus::Leaving,
    MemberStatus::PreparingForShutdown,
    MemberStatus::ReadyForShutdown,
];

/// Unreachable members with these statuses do not block convergence.
pub const CONVERGENCE_SKIP_UNREACHABLE_WITH_MEMBER_STATUS: [MemberStatus; 2] =
    [MemberStatus::Down, MemberStatus::Exiting];

/// Statuses preferred for the leader role.
pub const LEADER_MEMBER_STATUS: [MemberStatus; 4] = [
    MemberStatus::Up,
    MemberStatus::Leaving,
    MemberStatus::PreparingForShutdown,
    MemberStatus::ReadyForShutdown,
];

/// A node's view of the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipState {
    /// The latest gossip this node holds.
    pub latest_gossip: Gossip,
    /// This node.
    pub self_unique_address: UniqueAddress,
}

impl MembershipState {
    /// A view of `gossip` from `self_unique_address`.
    pub fn new(latest_gossip: Gossip, self_unique_address: UniqueAddress) -> Self {
        MembershipState {
            latest_gossip,
            self_unique_address,
        }
    }

    /// This node's member entry, if it is a member.
    pub fn self_member(&self) -> Option<&Member> {
        self.latest_gossip.member(&self.self_unique_address)
    }

    /// Reachability without the rows of observers that are Down: a downed node's opinion
    /// does not count.
    pub fn reachability_excluding_downed_observers(&self) -> Reachability {
        let downed: BTreeSet<UniqueAddress> = self
            .latest_gossip
            .members
            .values()
            .filter(|m| m.status == MemberStatus::Down)
            .map(|m| m.unique_address.clone())
            .collect();
        self.latest_gossip
            .overview
            .reachability
            .remove_observers(&downed)
    }

    /// Gossip convergence: no member is unreachable (by a non-downed observer) unless it
    /// is Down or Exiting, and every member in Up, Leaving, PreparingForShutdown or
    /// ReadyForShutdown has seen this version.
    pub fn convergence(&self) -> bool {
        let g = &self.latest_gossip;
        let reach = self.reachability_excluding_downed_observers();
        let unreachable_ok = reach.all_unreachable_or_terminated().iter().all(|node| {
            node == &self.self_unique_address
                || g.member(node)
                    .map(|m| CONVERGENCE_SKIP_UNREACHABLE_WITH_MEMBER_STATUS.contains(&m.status))
                    .unwrap_or(true)
        });
        unreachable_ok
            && g.members.values().all(|m| {
                !CONVERGENCE_MEMBER_STATUS.contains(&m.status) || g.seen_by_node(&m.unique_address)
            })
    }

    fn leader_of<'a>(
        &'a self,
        members: impl Iterator<Item = &'a Member>,
    ) -> Option<&'a UniqueAddress> {
        let reach = self.reachability_excluding_downed_observers();
        let all_reachable = reach.is_all_reachable();
        let candidates: Vec<&Member> = members
            .filter(|m| m.status != MemberStatus::Down)
            .filter(|m| {
                all_reachable
                    || m.unique_address == self.self_unique_address
                    || reach.is_reachable(&m.unique_address)
            })
            .collect();
        // Members iterate in address order, so `find` gives the first in the total order.
        candidates
            .iter()
            .find(|m| LEADER_MEMBER_STATUS.contains(&m.status))
            .or_else(|| {
                candidates
                    .iter()
                    .find(|m| m.status != MemberStatus::Exiting)
                    .or_else(|| candidates.first())
            })
            .map(|m| &m.unique_address)
    }

    /// The leader as this node sees it: among members reachable from here (self counts as
    /// reachable) that are not Down, the first in address order whose status is Up,
    /// Leaving, PreparingForShutdown or ReadyForShutdown; failing that the first other
    /// one. No election: every node with the same converged view computes the same leader.
    pub fn leader(&self) -> Option<&UniqueAddress> {
        self.leader_of(self.latest_gossip.members.values())
    }

    /// The leader among members with `role`.
    pub fn role_leader(&self, role: &str) -> Option<&UniqueAddress> {
        self.leader_of(
            self.latest_gossip
                .members
                .values()
                .filter(|m| m.has_role(role)),
        )
    }

    /// True if `node` is the leader in this view.
    pub fn is_leader(&self, node: &UniqueAddress) -> bool {
        self.leader() == Some(node)
    }

    /// All roles of all members.
    pub fn all_roles(&self) -> BTreeSet<String> {
        self.latest_gossip
            .members
            .values()
            .flat_map(|m| m.roles.iter().cloned())
            .collect()
    }

    /// The oldest Up (or later, not Down/Removed) member: smallest up-number, ties by address.
    pub fn oldest(&self) -> Option<&Member> {
        self.latest_gossip
            .members
            .values()
            .filter(|m| {
                m.status == MemberStatus::Up
                    || m.status == MemberStatus::Leaving
                    || m.status == MemberStatus::PreparingForShutdown
                    || m.status == MemberStatus::ReadyForShutdown
            })
            .min_by(|a, b| a.age_cmp(b))
    }

    /// Members that some non-downed observer considers unreachable (self excluded).
    pub fn unreachable_members(&self) -> Vec<&Member> {
        let reach = self.reachability_excluding_downed_observers();
        reach
            .all_unreachable_or_terminated()
            .iter()
            .filter(|n| **n != self.self_unique_address)
            .filter_map(|n| self.latest_gossip.member(n))
            .collect()
    }

    /// A node we may gossip to: a member other than self that we do not see as unreachable.
    pub fn valid_node_for_gossip(&self, node: &UniqueAddress) -> bool {
        node != &self.self_unique_address
            && self.latest_gossip.has_member(node)
            && self
                .latest_gossip
                .overview
                .reachability
                .is_reachable_from(&self.self_unique_address, node)
    }

    /// Whether to gossip three times per interval: fewer than half the members have seen
    /// the latest state, or a member is on its way out (Down, Leaving, Exiting).
    pub fn is_gossip_speedup_needed(&self) -> bool {
        let g = &self.latest_gossip;
        g.overview.seen.len() < g.members.len() / 2
            || g.members.values().any(|m| {
                matches!(
                    m.status,
                    MemberStatus::Down | MemberStatus::Leaving | MemberStatus::Exiting
                )
            })
    }

    /// Picks the gossip peer: with probability `different_view_probability` (already
    /// adjusted for cluster size, see [`adjusted_gossip_different_view_probability`]) a
    /// random valid node that has not seen this version, else (or when all have seen) any
    /// random valid node. `None` when there is nobody to gossip to.
    pub fn select_gossip_target<R: Rng + ?Sized>(
        &self,
        different_view_probability: f64,
        rng: &mut R,
    ) -> Option<UniqueAddress> {
        let g = &self.latest_gossip;
        if rng.random::<f64>() < different_view_probability {
            let preferred: Vec<&UniqueAddress> = g
                .members
                .keys()
                .filter(|n| !g.seen_by_node(n) && self.valid_node_for_gossip(n))
                .collect();
            if !preferred.is_empty() {
                return Some(preferred[rng.random_range(0..preferred.len())].clone());
            }
        }
        let all: Vec<&UniqueAddress> = g
            .members
            .keys()
            .filter(|n| self.valid_node_for_gossip(n))
            .collect();
        if all.is_empty() {
            None
        } else {
            Some(all[rng.random_range(0..all.len())].clone())
        }
    }
}

/// `gossip-different-view-probability` reduced for large clusters: unchanged up to
/// `reduce_above` members, then linearly down to a tenth of it at three times
/// `reduce_above` members (0.8 at 400 → 0.08 at 1200 with defaults), so a straggler is
/// not swamped by concurrent gossip (cluster-specification.md, "Gossip Protocol").
pub fn adjusted_gossip_different_view_probability(
    probability: f64,
    reduce_above: usize,
    cluster_size: usize,
) -> f64 {
    let low = reduce_above as f64;
    let high = low * 3.0;
    let size = cluster_size as f64;
    if size <= low {
        probability
    } else {
        let min_p = probability / 10.0;
        if size >= high {
            min_p
        } else {
            let k = (min_p - probability) / (high - low);
            probability + (size - low) * k
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::member::UP_NUMBER_UNSET;
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), 1)
    }

    fn member(i: u16, status: MemberStatus) -> Member {
        Member {
            unique_address: n(i),
            status,
            roles: BTreeSet::new(),
            up_number: u32::from(i) + 1,
            app_version: "0".into(),
        }
    }

    fn gossip(ms: &[(u16, MemberStatus)], seen: &[u16]) -> Gossip {
        let mut g = Gossip::empty();
        for (i, st) in ms {
            g.members.insert(n(*i), member(*i, *st));
        }
        g.overview.seen = seen.iter().map(|i| n(*i)).collect();
        g
    }

    #[test]
    fn convergence_needs_every_up_member_in_the_seen_set() {
        use MemberStatus::*;
        let g = gossip(&[(1, Up), (2, Up), (3, Joining)], &[1, 2]);
        assert!(
            MembershipState::new(g.clone(), n(1)).convergence(),
            "joining members need not have seen"
        );
        let g2 = gossip(&[(1, Up), (2, Up), (3, Up)], &[1, 2]);
        assert!(!MembershipState::new(g2, n(1)).convergence());
    }

    #[test]
    fn no_convergence_while_a_member_is_unreachable_unless_down_or_exiting() {
        use MemberStatus::*;
        let mut g = gossip(&[(1, Up), (2, Up), (3, Up)], &[1, 2, 3]);
        g.overview.reachability = g.overview.reachability.unreachable(&n(1), &n(3));
        assert!(!MembershipState::new(g.clone(), n(1)).convergence());
        g.members.insert(n(3), member(3, Down));
        assert!(MembershipState::new(g.clone(), n(1)).convergence());
        g.members.insert(n(3), member(3, Exiting));
        assert!(MembershipState::new(g, n(1)).convergence());
    }

    #[test]
    fn observations_of_downed_observers_do_not_block_convergence() {
        use MemberStatus::*;
        let mut g = gossip(&[(1, Up), (2, Up), (3, Down)], &[1, 2]);
        g.overview.reachability = g.overview.reachability.unreachable(&n(3), &n(2));
        assert!(MembershipState::new(g, n(1)).convergence());
    }

    #[test]
    fn leader_is_first_up_member_in_address_order() {
        use MemberStatus::*;
        let g = gossip(&[(1, Joining), (2, Up), (3, Up)], &[]);
        assert_eq!(MembershipState::new(g, n(3)).leader(), Some(&n(2)));
        let g = gossip(&[(1, Joining), (2, Joining)], &[]);
        assert_eq!(
            MembershipState::new(g, n(2)).leader(),
            Some(&n(1)),
            "falls back to any member"
        );
        let g = gossip(&[(1, Down), (2, Exiting), (3, Up)], &[]);
        assert_eq!(MembershipState::new(g, n(2)).leader(), Some(&n(3)));
    }

    #[test]
    fn unreachable_members_are_not_leader_except_for_themselves() {
        use MemberStatus::*;
        let mut g = gossip(&[(1, Up), (2, Up), (3, Up)], &[]);
        g.overview.reachability = g.overview.reachability.unreachable(&n(2), &n(1));
        assert_eq!(MembershipState::new(g.clone(), n(2)).leader(), Some(&n(2)));
        assert_eq!(
            MembershipState::new(g, n(1)).leader(),
            Some(&n(1)),
            "self counts as reachable"
        );
    }

    #[test]
    fn role_leader_considers_only_members_with_the_role() {
        use MemberStatus::*;
        let mut g = gossip(&[(1, Up), (2, Up)], &[]);
        g.members
            .get_mut(&n(2))
            .unwrap()
            .roles
            .insert("backend".into());
        let s = MembershipState::new(g, n(1));
        assert_eq!(s.role_leader("backend"), Some(&n(2)));
        assert_eq!(s.role_leader("frontend"), None);
    }

    #[test]
    fn oldest_is_smallest_up_number() {
        use MemberStatus::*;
        let mut g = gossip(&[(1, Up), (2, Up), (3, Joining)], &[]);
        g.members.get_mut(&n(1)).unwrap().up_number = 5;
        g.members.get_mut(&n(3)).unwrap().up_number = UP_NUMBER_UNSET;
        assert_eq!(
            MembershipState::new(g, n(1))
                .oldest()
                .map(|m| m.unique_address.clone()),
            Some(n(2))
        );
    }

    #[test]
    fn gossip_target_prefers_nodes_that_have_not_seen() {
        use MemberStatus::*;
        let g = gossip(&[(1, Up), (2, Up), (3, Up), (4, Up)], &[1, 2, 3]);
        let s = MembershipState::new(g, n(1));
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..50 {
            assert_eq!(s.select_gossip_target(1.0, &mut rng), Some(n(4)));
        }
        let mut others = BTreeSet::new();
        for _ in 0..200 {
            others.insert(s.select_gossip_target(0.0, &mut rng).unwrap());
        }
        assert_eq!(
            others.len(),
            3,
            "without bias any other member is chosen; never self"
        );
    }

    #[test]
    fn gossip_target_skips_nodes_we_see_as_unreachable() {
        use MemberStatus::*;
        let mut g = gossip(&[(1, Up), (2, Up)], &[1]);
        g.overview.reachability = g.overview.reachability.unreachable(&n(1), &n(2));
        let mut rng = SmallRng::seed_from_u64(1);
        assert_eq!(
            MembershipState::new(g, n(1)).select_gossip_target(0.8, &mut rng),
            None
        );
    }

    #[test]
    fn different_view_probability_is_reduced_above_the_limit() {
        assert_eq!(
            adjusted_gossip_different_view_probability(0.8, 400, 100),
            0.8
        );
        assert_eq!(
            adjusted_gossip_different_view_probability(0.8, 400, 400),
            0.8
        );
        assert!((adjusted_gossip_different_view_probability(0.8, 400, 800) - 0.44).abs() < 1e-9);
        assert!((adjusted_gossip_different_view_probability(0.8, 400, 5000) - 0.08).abs() < 1e-9);
    }

    fn arb_view() -> impl Strategy<Value = Gossip> {
        (
            proptest::collection::btree_map(
                0u16..6,
                (0usize..8).prop_map(|i| MemberStatus::ALL[i]),
                1..6,
            ),
            proptest::collection::btree_set(0u16..6, 0..6),
            proptest::collection::vec((0u16..6, 0u16..6), 0..3),
        )
            .prop_map(|(ms, seen, unreach)| {
                let mut g = Gossip::empty();
                for (i, st) in ms {
                    g.members.insert(n(i), member(i, st));
                }
                g.overview.seen = seen.into_iter().map(n).collect();
                for (o, s) in unreach {
                    if o != s && g.has_member(&n(o)) && g.has_member(&n(s)) {
                        g.overview.reachability = g.overview.reachability.unreachable(&n(o), &n(s));
                    }
                }
                g
            })
    }

    proptest! {
        #[test]
        fn convergence_is_never_reported_with_a_required_member_missing_or_unreachable(g in arb_view()) {
            for self_node in g.members.keys() {
                let s = MembershipState::new(g.clone(), self_node.clone());
                if s.convergence() {
                    for m in g.members.values() {
                        if CONVERGENCE_MEMBER_STATUS.contains(&m.status) {
                            prop_assert!(g.seen_by_node(&m.unique_address));
                        }
                    }
                    for m in s.unreachable_members() {
                        prop_assert!(CONVERGENCE_SKIP_UNREACHABLE_WITH_MEMBER_STATUS.contains(&m.status));
                    }
                }
            }
        }

        #[test]
        fn all_converged_nodes_compute_the_same_leader(g in arb_view()) {
            let leaders: BTreeSet<Option<UniqueAddress>> = g
                .members
                .values()
                .filter(|m| CONVERGENCE_MEMBER_STATUS.contains(&m.status))
                .map(|m| MembershipState::new(g.clone(), m.unique_address.clone()))
                .filter(|s| s.convergence())
                .map(|s| s.leader().cloned())
                .collect();
            prop_assert!(leaders.len() <= 1, "leaders: {:?}", leaders);
        }
    }
}
