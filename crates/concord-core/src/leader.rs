//! Leader actions: the membership transitions only the leader performs.
//!
//! Spec: cluster-membership-service.md, "Leader", "WeaklyUp Members", "Full cluster
//! shutdown" and "Leader Actions"; cluster-specification.md, "Membership Lifecycle".
//! On convergence the leader moves Joining/WeaklyUp → Up (when `min-nr-of-members`, also
//! per role, is reached and no full shutdown is being prepared), Leaving → Exiting,
//! PreparingForShutdown → ReadyForShutdown, and removes Exiting (once it has seen that
//! it is Exiting, or is unreachable) and Down members. Without convergence it may only
//! move Joining → WeaklyUp, after the member has been Joining for `weakly-up-after`.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus, UP_NUMBER_UNSET};
use crate::membership_state::MembershipState;

/// Settings that shape leader actions.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LeaderSettings {
    /// `min-nr-of-members`: members needed before the leader moves anyone to Up (default 1).
    pub min_nr_of_members: usize,
    /// `role.<role>.min-nr-of-members`.
    pub min_nr_of_members_of_role: BTreeMap<String, usize>,
}

/// What a round of leader actions changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderActionsResult {
    /// The new gossip (version bumped by the leader, seen only by it).
    pub gossip: Gossip,
    /// Members whose status changed (new state).
    pub changed: Vec<Member>,
    /// Members removed (their last state).
    pub removed: Vec<Member>,
}

/// True when `min-nr-of-members` (overall and per role) is reached.
pub fn is_min_nr_of_members_fulfilled(gossip: &Gossip, settings: &LeaderSettings) -> bool {
    gossip.members.len() >= settings.min_nr_of_members
        && settings
            .min_nr_of_members_of_role
            .iter()
            .all(|(role, min)| gossip.members.values().filter(|m| m.has_role(role)).count() >= *min)
}

/// Leader actions on convergence. `None` if nothing changes. The caller must have checked
/// that self is the leader and the state has converged.
pub fn leader_actions_on_convergence(
    state: &MembershipState,
    settings: &LeaderSettings,
    now_ms: u64,
) -> Option<LeaderActionsResult> {
    let g = &state.latest_gossip;
    let me = &state.self_unique_address;
    let reach = state.reachability_excluding_downed_observers();
    let enough = is_min_nr_of_members_fulfilled(g, settings);
    let preparing_for_shutdown = g.members.values().any(|m| {
        matches!(
            m.status,
            MemberStatus::PreparingForShutdown | MemberStatus::ReadyForShutdown
        )
    });

    let removed: Vec<Member> = g
        .members
        .values()
        .filter(|m| match m.status {
            MemberStatus::Down => true,
            MemberStatus::Exiting => {
                g.seen_by_node(&m.unique_address) || !reach.is_reachable(&m.unique_address)
            }
            _ => false,
        })
        .cloned()
        .collect();

    let mut next_up = g.youngest_up_number().map_or(1, |n| n.saturating_add(1));
    let mut changed = Vec::new();
    for m in g.members.values() {
        let updated = match m.status {
            MemberStatus::Joining | MemberStatus::WeaklyUp if enough && !preparing_for_shutdown => {
                let up = if m.up_number == UP_NUMBER_UNSET {
                    let n = next_up;
                    next_up = next_up.saturating_add(1);
                    n
                } else {
                    m.up_number
                };
                Some(m.with_up(up))
            }
            MemberStatus::Leaving => Some(m.with_status(MemberStatus::Exiting)),
            MemberStatus::PreparingForShutdown => {
                Some(m.with_status(MemberStatus::ReadyForShutdown))
            }
            _ => None,
        };
        if let Some(u) = updated {
            changed.push(u);
        }
    }
    if removed.is_empty() && changed.is_empty() {
        return None;
    }
    let mut next = g.clone();
    for m in &changed {
        next.members.insert(m.unique_address.clone(), m.clone());
    }
    for m in &removed {
        next = next.remove(&m.unique_address, now_ms);
    }
    Some(LeaderActionsResult {
        gossip: next.bump(me),
        changed,
        removed,
    })
}

/// Joining → WeaklyUp without convergence, for members that are reachable and have been
/// Joining (as first seen by this leader, `joining_since_ms`) for at least
/// `weakly_up_after_ms`. `None` if nothing changes.
pub fn move_joining_to_weakly_up(
    state: &MembershipState,
    settings: &LeaderSettings,
    joining_since_ms: &BTreeMap<UniqueAddress, u64>,
    weakly_up_after_ms: u64,
    now_ms: u64,
) -> Option<LeaderActionsResult> {
    let g = &state.latest_gossip;
    if !is_min_nr_of_members_fulfilled(g, settings) {
        return None;
    }
    let reach = state.reachability_excluding_downed_observers();
    let changed: Vec<Member> = g
        .members
        .values()
        .filter(|m| m.status == MemberStatus::Joining && reach.is_reachable(&m.unique_address))
        .filter(|m| {
            joining_since_ms
                .get(&m.unique_address)
                .is_some_and(|since| now_ms.saturating_sub(*since) >= weakly_up_after_ms)
        })
        .map(|m| m.with_status(MemberStatus::WeaklyUp))
        .collect();
    if changed.is_empty() {
        return None;
    }
    let mut next = g.clone();
    for m in &changed {
        next.members.insert(m.unique_address.clone(), m.clone());
    }
    Some(LeaderActionsResult {
        gossip: next.bump(&state.self_unique_address),
        changed,
        removed: Vec::new(),
    })
}

/// Keeps `joining_since_ms` in step with the gossip: records `now_ms` for newly seen
/// Joining members and forgets the others.
pub fn track_joining(
    joining_since_ms: &mut BTreeMap<UniqueAddress, u64>,
    gossip: &Gossip,
    now_ms: u64,
) {
    let joining: BTreeSet<&UniqueAddress> = gossip
        .members
        .values()
        .filter(|m| m.status == MemberStatus::Joining)
        .map(|m| &m.unique_address)
        .collect();
    joining_since_ms.retain(|k, _| joining.contains(k));
    for j in joining {
        joining_since_ms.entry(j.clone()).or_insert(now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), 1)
    }

    fn m(i: u16, st: MemberStatus, up: u32, roles: &[&str]) -> Member {
        Member {
            unique_address: n(i),
            status: st,
            roles: roles.iter().map(|s| s.to_string()).collect(),
            up_number: up,
            app_version: "0".into(),
        }
    }

    fn state(ms: Vec<Member>, seen: &[u16]) -> MembershipState {
        let mut g = Gossip::empty();
        for x in ms {
            g.members.insert(x.unique_address.clone(), x);
        }
        g.overview.seen = seen.iter().map(|i| n(*i)).collect();
        MembershipState::new(g, n(1))
    }

    fn settings(min: usize) -> LeaderSettings {
        LeaderSettings {
            min_nr_of_members: min,
            ..Default::default()
        }
    }

    use MemberStatus::*;

    #[test]
    fn joining_moves_up_with_increasing_up_numbers() {
        let s = state(
            vec![
                m(1, Up, 1, &[]),
                m(2, Joining, UP_NUMBER_UNSET, &[]),
                m(3, Joining, UP_NUMBER_UNSET, &[]),
            ],
            &[1],
        );
        let r = leader_actions_on_convergence(&s, &settings(1), 0).unwrap();
        assert_eq!(r.gossip.members[&n(2)].status, Up);
        assert_eq!(r.gossip.members[&n(2)].up_number, 2);
        assert_eq!(r.gossip.members[&n(3)].up_number, 3);
        assert_eq!(r.gossip.overview.seen, [n(1)].into_iter().collect());
        assert!(
            s.latest_gossip.version.compare(&r.gossip.version)
                == crate::vector_clock::ClockOrdering::Before
        );
    }

    #[test]
    fn min_nr_of_members_holds_joining_members_back() {
        let s = state(
            vec![
                m(1, Joining, UP_NUMBER_UNSET, &[]),
                m(2, Joining, UP_NUMBER_UNSET, &[]),
            ],
            &[],
        );
        assert!(leader_actions_on_convergence(&s, &settings(3), 0).is_none());
        assert!(leader_actions_on_convergence(&s, &settings(2), 0).is_some());
    }

    #[test]
    fn min_nr_of_members_per_role() {
        let s = state(
            vec![
                m(1, Joining, UP_NUMBER_UNSET, &["backend"]),
                m(2, Joining, UP_NUMBER_UNSET, &["frontend"]),
            ],
            &[],
        );
        let mut st = settings(1);
        st.min_nr_of_members_of_role.insert("backend".into(), 2);
        assert!(leader_actions_on_convergence(&s, &st, 0).is_none());
        st.min_nr_of_members_of_role.insert("backend".into(), 1);
        assert!(leader_actions_on_convergence(&s, &st, 0).is_some());
    }

    #[test]
    fn leaving_moves_to_exiting_then_removed_once_it_has_seen() {
        let s = state(vec![m(1, Up, 1, &[]), m(2, Leaving, 2, &[])], &[1, 2]);
        let r = leader_actions_on_convergence(&s, &settings(1), 0).unwrap();
        assert_eq!(r.gossip.members[&n(2)].status, Exiting);
        // Exiting but has not seen the new version: kept.
        let s2 = MembershipState::new(r.gossip.clone(), n(1));
        assert!(leader_actions_on_convergence(&s2, &settings(1), 0).is_none());
        let s3 = MembershipState::new(r.gossip.seen(&n(2)), n(1));
        let r3 = leader_actions_on_convergence(&s3, &settings(1), 42).unwrap();
        assert!(!r3.gossip.has_member(&n(2)));
        assert_eq!(r3.gossip.tombstones.get(&n(2)), Some(&42));
        assert_eq!(r3.removed.len(), 1);
    }

    #[test]
    fn down_members_are_removed() {
        let s = state(vec![m(1, Up, 1, &[]), m(2, Down, 2, &[])], &[1]);
        let r = leader_actions_on_convergence(&s, &settings(1), 0).unwrap();
        assert!(!r.gossip.has_member(&n(2)));
        assert!(r.gossip.tombstones.contains_key(&n(2)));
    }

    #[test]
    fn full_shutdown_moves_preparing_to_ready_and_holds_joiners() {
        let s = state(
            vec![
                m(1, PreparingForShutdown, 1, &[]),
                m(2, Joining, UP_NUMBER_UNSET, &[]),
            ],
            &[1],
        );
        let r = leader_actions_on_convergence(&s, &settings(1), 0).unwrap();
        assert_eq!(r.gossip.members[&n(1)].status, ReadyForShutdown);
        assert_eq!(r.gossip.members[&n(2)].status, Joining);
    }

    #[test]
    fn weakly_up_after_the_configured_delay_and_only_if_reachable() {
        let mut s = state(
            vec![
                m(1, Up, 1, &[]),
                m(2, Joining, UP_NUMBER_UNSET, &[]),
                m(3, Joining, UP_NUMBER_UNSET, &[]),
            ],
            &[1],
        );
        s.latest_gossip.overview.reachability = s
            .latest_gossip
            .overview
            .reachability
            .unreachable(&n(1), &n(3));
        let mut since = BTreeMap::new();
        track_joining(&mut since, &s.latest_gossip, 1000);
        assert!(move_joining_to_weakly_up(&s, &settings(1), &since, 7000, 7999).is_none());
        let r = move_joining_to_weakly_up(&s, &settings(1), &since, 7000, 8000).unwrap();
        assert_eq!(r.gossip.members[&n(2)].status, WeaklyUp);
        assert_eq!(
            r.gossip.members[&n(3)].status,
            Joining,
            "unreachable joiners stay Joining"
        );
        // On convergence WeaklyUp → Up.
        let s2 = MembershipState::new(r.gossip, n(1));
        let r2 = leader_actions_on_convergence(&s2, &settings(1), 0).unwrap();
        assert_eq!(r2.gossip.members[&n(2)].status, Up);
    }
}
