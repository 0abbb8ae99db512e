//! Cluster domain events: the difference between two [`MembershipState`]s.
//!
//! Spec: cluster-membership-service.md, "Member Events"; Akka `ClusterEvent`. A new
//! subscriber first receives the whole view ([`crate::MembershipView`], Akka's
//! `CurrentClusterState`), then the events.

use std::collections::BTreeSet;

use crate::address::{Address, UniqueAddress};
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;

/// A change in cluster membership, reachability or leadership, as seen by one node.
/// Non-exhaustive: a later version may add events.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClusterEvent {
    /// A member is now Joining.
    MemberJoined(Member),
    /// A member is now WeaklyUp.
    MemberWeaklyUp(Member),
    /// A member is now Up.
    MemberUp(Member),
    /// A member is now Leaving.
    MemberLeft(Member),
    /// A member is now Exiting (it may already have shut down).
    MemberExited(Member),
    /// A member is now Down.
    MemberDowned(Member),
    /// A member was removed; `member.status` is Removed.
    MemberRemoved {
        /// The member, with status Removed.
        member: Member,
        /// Its status before removal.
        previous_status: MemberStatus,
    },
    /// A member is now PreparingForShutdown.
    MemberPreparingForShutdown(Member),
    /// A member is now ReadyForShutdown.
    MemberReadyForShutdown(Member),
    /// A member became unreachable (some observer's failure detector fired).
    UnreachableMember(Member),
    /// A member is reachable again (all observers agree).
    ReachableMember(Member),
    /// The leader changed (`None`: no leader).
    LeaderChanged(Option<Address>),
    /// The leader of members with `role` changed.
    RoleLeaderChanged {
        /// The role.
        role: String,
        /// New role leader, if any.
        leader: Option<Address>,
    },
}

impl ClusterEvent {
    /// Event type name, as in Akka (`"MemberUp"`, ...), used for filtering.
    pub fn type_name(&self) -> &'static str {
        match self {
            ClusterEvent::MemberJoined(_) => "MemberJoined",
            ClusterEvent::MemberWeaklyUp(_) => "MemberWeaklyUp",
            ClusterEvent::MemberUp(_) => "MemberUp",
            ClusterEvent::MemberLeft(_) => "MemberLeft",
            ClusterEvent::MemberExited(_) => "MemberExited",
            ClusterEvent::MemberDowned(_) => "MemberDowned",
            ClusterEvent::MemberRemoved { .. } => "MemberRemoved",
            ClusterEvent::MemberPreparingForShutdown(_) => "MemberPreparingForShutdown",
            ClusterEvent::MemberReadyForShutdown(_) => "MemberReadyForShutdown",
            ClusterEvent::UnreachableMember(_) => "UnreachableMember",
            ClusterEvent::ReachableMember(_) => "ReachableMember",
            ClusterEvent::LeaderChanged(_) => "LeaderChanged",
            ClusterEvent::RoleLeaderChanged { .. } => "RoleLeaderChanged",
        }
    }

    /// The member this event is about, if any.
    pub fn member(&self) -> Option<&Member> {
        match self {
            ClusterEvent::MemberJoined(m)
            | ClusterEvent::MemberWeaklyUp(m)
            | ClusterEvent::MemberUp(m)
            | ClusterEvent::MemberLeft(m)
            | ClusterEvent::MemberExited(m)
            | ClusterEvent::MemberDowned(m)
            | ClusterEvent::MemberPreparingForShutdown(m)
            | ClusterEvent::MemberReadyForShutdown(m)
            | ClusterEvent::UnreachableMember(m)
            | ClusterEvent::ReachableMember(m) => Some(m),
            ClusterEvent::MemberRemoved { member, .. } => Some(member),
            _ => None,
        }
    }
}

fn status_event(m: &Member) -> Option<ClusterEvent> {
    let m = m.clone();
    Some(match m.status {
        MemberStatus::Joining => ClusterEvent::MemberJoined(m),
        MemberStatus::WeaklyUp => ClusterEvent::MemberWeaklyUp(m),
        MemberStatus::Up => ClusterEvent::MemberUp(m),
        MemberStatus::Leaving => ClusterEvent::MemberLeft(m),
        MemberStatus::Exiting => ClusterEvent::MemberExited(m),
        MemberStatus::Down => ClusterEvent::MemberDowned(m),
        MemberStatus::PreparingForShutdown => ClusterEvent::MemberPreparingForShutdown(m),
        MemberStatus::ReadyForShutdown => ClusterEvent::MemberReadyForShutdown(m),
        MemberStatus::Removed => return None,
    })
}

/// The domain events that turn `old` into `new`, in Akka's order: member status events,
/// removals, unreachable, reachable, leader, role leaders — except that the removal of an
/// incarnation whose host:port a new incarnation now holds comes first, so a subscriber
/// keyed by address never ends with the new node missing.
pub fn diff(old: &MembershipState, new: &MembershipState) -> Vec<ClusterEvent> {
    let mut out = Vec::new();
    let og = &old.latest_gossip;
    let ng = &new.latest_gossip;
    let mut later_removals = Vec::new();
    for (k, prev) in &og.members {
        if !ng.has_member(k) {
            let event = ClusterEvent::MemberRemoved {
                member: prev.with_status(MemberStatus::Removed),
                previous_status: prev.status,
            };
            if ng.members.keys().any(|n| n.address == k.address) {
                out.push(event);
            } else {
                later_removals.push(event);
            }
        }
    }
    for (k, m) in &ng.members {
        match og.member(k) {
            Some(prev) if prev.status == m.status => {}
            _ => out.extend(status_event(m)),
        }
    }
    out.extend(later_removals);
    let old_unreachable: BTreeSet<UniqueAddress> = old
        .unreachable_members()
        .into_iter()
        .map(|m| m.unique_address.clone())
        .collect();
    let new_unreachable: BTreeSet<UniqueAddress> = new
        .unreachable_members()
        .into_iter()
        .map(|m| m.unique_address.clone())
        .collect();
    for n in new_unreachable.difference(&old_unreachable) {
        if let Some(m) = ng.member(n) {
            out.push(ClusterEvent::UnreachableMember(m.clone()));
        }
    }
    for n in old_unreachable.difference(&new_unreachable) {
        if let Some(m) = ng.member(n) {
            out.push(ClusterEvent::ReachableMember(m.clone()));
        }
    }
    let ol = old.leader().map(|u| u.address.clone());
    let nl = new.leader().map(|u| u.address.clone());
    if ol != nl {
        out.push(ClusterEvent::LeaderChanged(nl));
    }
    let roles: BTreeSet<String> = old.all_roles().union(&new.all_roles()).cloned().collect();
    for r in roles {
        let a = old.role_leader(&r).map(|u| u.address.clone());
        let b = new.role_leader(&r).map(|u| u.address.clone());
        if a != b {
            out.push(ClusterEvent::RoleLeaderChanged { role: r, leader: b });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::Gossip;
    use crate::member::UP_NUMBER_UNSET;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), 1)
    }

    fn m(i: u16, st: MemberStatus) -> Member {
        Member {
            unique_address: n(i),
            status: st,
            roles: ["r".to_string()].into(),
            up_number: UP_NUMBER_UNSET,
            app_version: "0".into(),
        }
    }

    fn st(ms: &[(u16, MemberStatus)]) -> MembershipState {
        let mut g = Gossip::empty();
        for (i, s) in ms {
            g.members.insert(n(*i), m(*i, *s));
        }
        MembershipState::new(g, n(1))
    }

    use MemberStatus::*;

    #[test]
    fn each_status_change_gives_its_event() {
        let cases = [
            (Joining, "MemberJoined"),
            (WeaklyUp, "MemberWeaklyUp"),
            (Up, "MemberUp"),
            (Leaving, "MemberLeft"),
            (Exiting, "MemberExited"),
            (Down, "MemberDowned"),
            (PreparingForShutdown, "MemberPreparingForShutdown"),
            (ReadyForShutdown, "MemberReadyForShutdown"),
        ];
        for (s, name) in cases {
            let ev = diff(&st(&[(1, Up)]), &st(&[(1, Up), (2, s)]));
            assert_eq!(ev[0].type_name(), name);
        }
    }

    #[test]
    fn removal_carries_the_previous_status() {
        let ev = diff(&st(&[(1, Up), (2, Exiting)]), &st(&[(1, Up)]));
        assert_eq!(
            ev,
            vec![ClusterEvent::MemberRemoved {
                member: m(2, Removed),
                previous_status: Exiting
            }]
        );
    }

    #[test]
    fn a_removed_incarnation_is_reported_before_the_new_one_at_its_address() {
        let old_uid = m(2, Up);
        let mut new_uid = m(2, Joining);
        new_uid.unique_address = UniqueAddress::new(n(2).address, 99);
        let mut g = Gossip::empty();
        g.members.insert(n(1), m(1, Up));
        g.members
            .insert(new_uid.unique_address.clone(), new_uid.clone());
        let new = MembershipState::new(g, n(1));
        let old = st(&[(1, Up), (2, Up)]);
        let names: Vec<&str> = diff(&old, &new).iter().map(|e| e.type_name()).collect();
        assert_eq!(names, ["MemberRemoved", "MemberJoined"]);
        assert_eq!(
            diff(&old, &new)[0].member().map(|x| &x.unique_address),
            Some(&old_uid.unique_address)
        );
    }

    #[test]
    fn unreachable_and_reachable_again() {
        let a = st(&[(1, Up), (2, Up)]);
        let mut b = a.clone();
        b.latest_gossip.overview.reachability = b
            .latest_gossip
            .overview
            .reachability
            .unreachable(&n(1), &n(2));
        let ev = diff(&a, &b);
        assert!(matches!(&ev[0], ClusterEvent::UnreachableMember(x) if x.unique_address == n(2)));
        let mut c = b.clone();
        c.latest_gossip.overview.reachability = c
            .latest_gossip
            .overview
            .reachability
            .reachable(&n(1), &n(2));
        let ev = diff(&b, &c);
        assert!(matches!(&ev[0], ClusterEvent::ReachableMember(x) if x.unique_address == n(2)));
    }

    #[test]
    fn leader_and_role_leader_changes() {
        let ev = diff(&st(&[]), &st(&[(1, Up)]));
        assert!(ev.contains(&ClusterEvent::LeaderChanged(Some(n(1).address))));
        assert!(ev.contains(&ClusterEvent::RoleLeaderChanged {
            role: "r".into(),
            leader: Some(n(1).address)
        }));
    }
}
