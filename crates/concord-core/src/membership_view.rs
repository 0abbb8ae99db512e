//! [`MembershipView`]: the immutable view of the cluster that one node publishes to the
//! layers above membership (singleton, distributed data, sharding) and to applications.
//!
//! It is what Akka hands a subscriber as `CurrentClusterState`, plus the questions those
//! layers ask of it: the oldest member of a role (where a singleton runs), the leader of a
//! role, convergence and reachability. The runtime publishes a new view atomically after
//! each state change; `version` orders them. Spec: cluster-membership-service.md ("Member
//! Events", "Leader"); Akka `ClusterEvent.CurrentClusterState`.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::{Address, UniqueAddress};
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;

/// Statuses of members that count for "oldest" (Akka's singleton and
/// `CurrentClusterState.oldest`): Up or later, not yet Exiting or Down.
pub const OLDEST_CANDIDATE_STATUS: [MemberStatus; 4] = [
    MemberStatus::Up,
    MemberStatus::Leaving,
    MemberStatus::PreparingForShutdown,
    MemberStatus::ReadyForShutdown,
];

/// One node's view of the cluster at one moment. Cheap to share behind an `Arc`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MembershipView {
    /// The node this view belongs to.
    pub self_unique_address: UniqueAddress,
    /// Increases with every change this node publishes; 0 before the node joins.
    pub version: u64,
    /// Members in address order, with status, roles, up-number and app-version.
    pub members: BTreeMap<UniqueAddress, Member>,
    /// Unreachable members (self excluded) → the observers that see them unreachable
    /// (observers that are Down do not count).
    pub unreachable: BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>>,
    /// Nodes that have seen the current gossip version.
    pub seen_by: BTreeSet<UniqueAddress>,
    /// The leader, as this node sees it.
    pub leader: Option<UniqueAddress>,
    /// Role → the leader among members with that role.
    pub role_leaders: BTreeMap<String, Option<UniqueAddress>>,
    /// Whether the gossip has converged (see [`MembershipState::convergence`]).
    pub convergence: bool,
}

impl MembershipView {
    /// The view of a node that is not in a cluster yet: no members, no leader.
    pub fn empty(self_unique_address: UniqueAddress) -> Self {
        MembershipView {
            self_unique_address,
            version: 0,
            members: BTreeMap::new(),
            unreachable: BTreeMap::new(),
            seen_by: BTreeSet::new(),
            leader: None,
            role_leaders: BTreeMap::new(),
            convergence: false,
        }
    }

    /// The view of `state`, numbered `version`.
    pub fn of(state: &MembershipState, version: u64) -> Self {
        let g = &state.latest_gossip;
        let unreachable = state
            .reachability_excluding_downed_observers()
            .observers_by_unreachable_or_terminated_subject()
            .into_iter()
            .filter(|(s, _)| *s != state.self_unique_address && g.has_member(s))
            .collect();
        MembershipView {
            self_unique_address: state.self_unique_address.clone(),
            version,
            members: g.members.clone(),
            unreachable,
            seen_by: g.overview.seen.clone(),
            leader: state.leader().cloned(),
            role_leaders: state
                .all_roles()
                .into_iter()
                .map(|r| {
                    let l = state.role_leader(&r).cloned();
                    (r, l)
                })
                .collect(),
            convergence: state.convergence(),
        }
    }

    /// This node's member entry; `None` before it joined (and after its removal).
    pub fn self_member(&self) -> Option<&Member> {
        self.members.get(&self.self_unique_address)
    }

    /// The member with this incarnation.
    pub fn member(&self, node: &UniqueAddress) -> Option<&Member> {
        self.members.get(node)
    }

    /// True if `node` is in the view and not Removed: a member the layers still talk to.
    pub fn is_member(&self, node: &UniqueAddress) -> bool {
        self.members
            .get(node)
            .is_some_and(|m| m.status != MemberStatus::Removed)
    }

    /// The member at `address` (whatever its uid).
    pub fn member_at(&self, address: &Address) -> Option<&Member> {
        self.members.values().find(|m| m.address() == address)
    }

    /// Members with `status`, in address order.
    pub fn members_with_status(&self, status: MemberStatus) -> impl Iterator<Item = &Member> {
        self.members.values().filter(move |m| m.status == status)
    }

    /// True if no (non-downed) observer sees `node` as unreachable.
    pub fn is_reachable(&self, node: &UniqueAddress) -> bool {
        !self.unreachable.contains_key(node)
    }

    /// The unreachable members.
    pub fn unreachable_members(&self) -> impl Iterator<Item = &Member> {
        self.unreachable.keys().filter_map(|n| self.members.get(n))
    }

    /// Whether the gossip has converged.
    pub fn is_converged(&self) -> bool {
        self.convergence
    }

    /// True if this node is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader.as_ref() == Some(&self.self_unique_address)
    }

    /// The leader of the members with `role`.
    pub fn role_leader(&self, role: &str) -> Option<&UniqueAddress> {
        self.role_leaders.get(role).and_then(|l| l.as_ref())
    }

    /// The oldest member (smallest up-number, ties by address) among those that are Up,
    /// Leaving, PreparingForShutdown or ReadyForShutdown, optionally only with `role`.
    /// This is where a cluster singleton runs.
    pub fn oldest(&self, role: Option<&str>) -> Option<&Member> {
        self.members
            .values()
            .filter(|m| OLDEST_CANDIDATE_STATUS.contains(&m.status))
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .min_by(|a, b| a.age_cmp(b))
    }

    /// Members (optionally with `role`) sorted oldest first, by the same rule as
    /// [`MembershipView::oldest`].
    pub fn by_age(&self, role: Option<&str>) -> Vec<&Member> {
        let mut v: Vec<&Member> = self
            .members
            .values()
            .filter(|m| OLDEST_CANDIDATE_STATUS.contains(&m.status))
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .collect();
        v.sort_by(|a, b| a.age_cmp(b));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::Gossip;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), u64::from(i))
    }

    fn view(ms: &[(u16, MemberStatus, u32, &str)]) -> MembershipView {
        let mut g = Gossip::empty();
        for (i, st, up, role) in ms {
            let m = Member::joining(n(*i), [role.to_string()].into(), "1")
                .with_up(*up)
                .with_status(*st);
            g.members.insert(n(*i), m);
        }
        MembershipView::of(&MembershipState::new(g, n(1)), 7)
    }

    #[test]
    fn oldest_per_role_ignores_joining_exiting_and_down() {
        use MemberStatus::*;
        let v = view(&[
            (1, Up, 3, "a"),
            (2, Up, 2, "b"),
            (3, Exiting, 1, "a"),
            (4, Leaving, 4, "a"),
            (5, Joining, 0, "b"),
        ]);
        assert_eq!(v.oldest(None).unwrap().unique_address, n(2));
        assert_eq!(v.oldest(Some("a")).unwrap().unique_address, n(1));
        assert_eq!(
            v.by_age(Some("a"))
                .iter()
                .map(|m| m.unique_address.clone())
                .collect::<Vec<_>>(),
            vec![n(1), n(4)]
        );
        assert!(v.oldest(Some("none")).is_none());
        assert_eq!(v.version, 7);
        assert!(v.is_leader(), "node 1 is the lowest Up address");
    }

    #[test]
    fn unreachable_lists_observers_and_excludes_self() {
        let mut g = Gossip::empty();
        for i in 1..=3 {
            g.members.insert(
                n(i),
                Member::joining(n(i), BTreeSet::new(), "1").with_up(u32::from(i)),
            );
        }
        g.overview.reachability = g
            .overview
            .reachability
            .unreachable(&n(2), &n(3))
            .unreachable(&n(3), &n(1));
        let v = MembershipView::of(&MembershipState::new(g, n(1)), 1);
        assert_eq!(v.unreachable.len(), 1);
        assert_eq!(v.unreachable[&n(3)], [n(2)].into());
        assert!(!v.is_reachable(&n(3)) && v.is_reachable(&n(1)));
        assert!(!v.is_converged());
    }
}
