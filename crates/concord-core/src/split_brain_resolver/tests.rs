//! Table-driven tests of every strategy's decision, and of the resolver's timing.

use std::collections::BTreeSet;

use super::*;
use crate::address::Address;
use crate::gossip::Gossip;
use crate::member::{Member, UP_NUMBER_UNSET};

fn n(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), 1)
}

fn m(i: u16, status: MemberStatus, up: u32, roles: &[&str]) -> Member {
    Member {
        unique_address: n(i),
        status,
        roles: roles.iter().map(|r| r.to_string()).collect(),
        up_number: up,
        app_version: "0".into(),
    }
}

fn up(i: u16) -> Member {
    m(i, MemberStatus::Up, u32::from(i), &[])
}

/// A clean view: `unreachable` seen from a node of the other members, no indirect records.
fn view(members: Vec<Member>, unreachable: &[u16]) -> SbrView {
    let unreachable: BTreeSet<UniqueAddress> = unreachable.iter().map(|i| n(*i)).collect();
    let self_node = members
        .iter()
        .map(|m| m.unique_address.clone())
        .find(|a| !unreachable.contains(a))
        .unwrap_or_else(|| n(0));
    SbrView {
        self_node,
        members,
        unreachable,
        records: BTreeSet::new(),
        seen_by: BTreeSet::new(),
        down_unseen_by_other_side: BTreeSet::new(),
    }
}

use Decision::*;

const KM: DowningStrategy = DowningStrategy::KeepMajority { role: None };

#[test]
fn keep_majority_table() {
    let five = || (1..=5).map(up).collect::<Vec<_>>();
    let cases: Vec<(&str, SbrView, Decision)> = vec![
        (
            "majority side 3 of 5",
            view(five(), &[4, 5]),
            DownUnreachable,
        ),
        (
            "minority side 2 of 5",
            view(five(), &[1, 2, 3]),
            DownReachable,
        ),
        ("single crash", view(five(), &[5]), DownUnreachable),
        (
            "tie 2|2, our side has the lowest address",
            view((1..=4).map(up).collect(), &[3, 4]),
            DownUnreachable,
        ),
        (
            "tie 2|2, other side has the lowest address",
            view((1..=4).map(up).collect(), &[1, 2]),
            DownReachable,
        ),
        (
            "tie 2|2 plus a Joining member on our side: joining is not counted",
            view(
                vec![
                    up(1),
                    up(2),
                    up(3),
                    up(4),
                    m(5, MemberStatus::Joining, UP_NUMBER_UNSET, &[]),
                ],
                &[1, 2],
            ),
            DownReachable,
        ),
        (
            "WeaklyUp members are not counted",
            view(
                vec![
                    up(1),
                    up(2),
                    up(3),
                    m(4, MemberStatus::WeaklyUp, UP_NUMBER_UNSET, &[]),
                    m(5, MemberStatus::WeaklyUp, UP_NUMBER_UNSET, &[]),
                ],
                &[1, 2],
            ),
            DownReachable,
        ),
    ];
    for (name, v, want) in cases {
        assert_eq!(decide(&KM, &v), want, "{name}");
    }
}

#[test]
fn keep_majority_with_role_counts_only_that_role() {
    let members = vec![
        m(1, MemberStatus::Up, 1, &["db"]),
        m(2, MemberStatus::Up, 2, &[]),
        m(3, MemberStatus::Up, 3, &[]),
        m(4, MemberStatus::Up, 4, &["db"]),
        m(5, MemberStatus::Up, 5, &["db"]),
    ];
    let s = DowningStrategy::KeepMajority {
        role: Some("db".into()),
    };
    // Our side {1,2,3} has 1 of 3 db members: minority by role although 3 of 5 overall.
    assert_eq!(decide(&s, &view(members.clone(), &[4, 5])), DownReachable);
    assert_eq!(decide(&s, &view(members, &[1, 2, 3])), DownUnreachable);
}

#[test]
fn static_quorum_table() {
    let s = DowningStrategy::StaticQuorum {
        quorum_size: 3,
        role: None,
    };
    let five = || (1..=5).map(up).collect::<Vec<_>>();
    assert_eq!(decide(&s, &view(five(), &[4, 5])), DownUnreachable);
    assert_eq!(decide(&s, &view(five(), &[1, 2, 3])), DownReachable);
    assert_eq!(
        decide(&s, &view((1..=6).map(up).collect(), &[6])),
        DownAll,
        "more than quorum*2-1 members"
    );
}

#[test]
fn keep_oldest_table() {
    let s = DowningStrategy::KeepOldest {
        down_if_alone: true,
        role: None,
    };
    let five = || (1..=5).map(up).collect::<Vec<_>>(); // member 1 is the oldest (up-number 1)
    assert_eq!(
        decide(&s, &view(five(), &[4, 5])),
        DownUnreachable,
        "oldest on our side"
    );
    assert_eq!(
        decide(&s, &view(five(), &[1, 2])),
        DownReachable,
        "oldest on the other side, even if we are more"
    );
    assert_eq!(
        decide(&s, &view(five(), &[2, 3, 4, 5])),
        DownReachable,
        "oldest alone downs itself"
    );
    assert_eq!(
        decide(&s, &view(five(), &[1])),
        DownUnreachable,
        "the others down the lone oldest"
    );
    let no_alone = DowningStrategy::KeepOldest {
        down_if_alone: false,
        role: None,
    };
    assert_eq!(
        decide(&no_alone, &view(five(), &[2, 3, 4, 5])),
        DownUnreachable
    );
    assert_eq!(decide(&no_alone, &view(five(), &[1])), DownReachable);
}

#[test]
fn down_all_downs_everyone() {
    assert_eq!(
        decide(
            &DowningStrategy::DownAll,
            &view((1..=3).map(up).collect(), &[3])
        ),
        DownAll
    );
}

fn state(members: Vec<Member>, self_node: u16, unreachable: &[(u16, u16)]) -> MembershipState {
    let mut g = Gossip::empty();
    for x in members {
        g.members.insert(x.unique_address.clone(), x);
    }
    for (o, s) in unreachable {
        g.overview.reachability = g.overview.reachability.unreachable(&n(*o), &n(*s));
    }
    MembershipState::new(g, n(self_node))
}

fn settings(strategy: DowningStrategy) -> SbrSettings {
    SbrSettings {
        strategy,
        stable_after_ms: 1000,
        down_all_when_unstable_ms: Some(4000),
        rules: SbrRules::Concord,
    }
}

#[test]
fn decides_only_after_stable_after_and_only_on_the_leader() {
    let st = state((1..=5).map(up).collect(), 1, &[(1, 5), (2, 5)]);
    let mut sbr = SplitBrainResolver::new(settings(KM));
    assert_eq!(sbr.tick(0, &st), None);
    assert_eq!(sbr.tick(999, &st), None);
    let a = sbr.tick(1000, &st).unwrap();
    assert_eq!(
        a,
        SbrAction::Down {
            decision: DownUnreachable,
            nodes: [n(5)].into(),
            cause: DecisionCause::Stable,
        }
    );
    // A non-leader never acts.
    let st2 = state((1..=5).map(up).collect(), 2, &[(1, 5)]);
    let mut sbr2 = SplitBrainResolver::new(settings(KM));
    assert_eq!(sbr2.tick(0, &st2), None);
    assert_eq!(sbr2.tick(5000, &st2), None);
}

#[test]
fn a_change_restarts_the_stable_period() {
    let mut sbr = SplitBrainResolver::new(settings(KM));
    let a = state((1..=5).map(up).collect(), 1, &[(1, 5)]);
    let b = state((1..=5).map(up).collect(), 1, &[(1, 5), (1, 4)]);
    assert_eq!(sbr.tick(0, &a), None);
    assert_eq!(sbr.tick(900, &b), None);
    assert_eq!(sbr.tick(1500, &b), None, "stable since 900 only");
    assert!(matches!(
        sbr.tick(1900, &b),
        Some(SbrAction::Down {
            decision: DownUnreachable,
            ..
        })
    ));
}

#[test]
fn flapping_for_too_long_downs_all() {
    let mut sbr = SplitBrainResolver::new(settings(KM));
    let a = state((1..=5).map(up).collect(), 1, &[(1, 5)]);
    let b = state((1..=5).map(up).collect(), 1, &[(1, 5), (1, 4)]);
    let mut t = 0;
    let mut last = None;
    while t <= 6000 {
        let s = if (t / 500) % 2 == 0 { &a } else { &b };
        last = sbr.tick(t, s);
        if last.is_some() {
            break;
        }
        t += 500;
    }
    match last {
        Some(SbrAction::Down {
            decision,
            nodes,
            cause,
        }) => {
            assert_eq!(decision, DownAll);
            assert_eq!(cause, DecisionCause::Unstable);
            assert_eq!(nodes.len(), 5);
            assert!(
                t > 1000 + 4000,
                "only after stable-after + down-all-when-unstable (t={t})"
            );
        }
        other => panic!("expected down-all, got {other:?}"),
    }
}

#[test]
fn indirectly_connected_members_are_downed() {
    // 2 and 3 cannot talk to each other but both talk to 1 (the leader): both report the
    // other unreachable.
    let st = state((1..=4).map(up).collect(), 1, &[(2, 3), (3, 2)]);
    assert_eq!(
        SbrView::from_state(&st).indirectly_connected(),
        [n(2), n(3)].into()
    );
    let mut sbr = SplitBrainResolver::new(settings(KM));
    sbr.tick(0, &st);
    assert_eq!(
        sbr.tick(1000, &st),
        Some(SbrAction::Down {
            decision: DownIndirectlyConnected,
            nodes: [n(2), n(3)].into(),
            cause: DecisionCause::Stable,
        })
    );
}

#[test]
fn indirectly_connected_members_that_could_keep_themselves_are_not_all_downed() {
    // Of three members, 2 and 3 cannot talk to each other: Akka downs both and keeps 1
    // alone. Cut off from 1 before they learn of their downing, with their link healed, 2
    // and 3 would be the majority and keep themselves (simulator, seed 904). Concord downs
    // only 3: {1,2} stays the majority, and no record is left between them.
    let st = state((1..=3).map(up).collect(), 1, &[(2, 3), (3, 2)]);
    let mut sbr = SplitBrainResolver::new(settings(KM));
    sbr.tick(0, &st);
    assert_eq!(
        sbr.tick(1000, &st),
        Some(SbrAction::Down {
            decision: DownSomeIndirectlyConnected,
            nodes: [n(3)].into(),
            cause: DecisionCause::Stable,
        })
    );
}

#[test]
fn indirectly_connected_with_a_real_partition() {
    // 5 is cut off; 3 and 4 cannot see each other.
    let st = state((1..=5).map(up).collect(), 1, &[(1, 5), (3, 4), (4, 3)]);
    let mut sbr = SplitBrainResolver::new(settings(KM));
    sbr.tick(0, &st);
    let Some(SbrAction::Down {
        decision, nodes, ..
    }) = sbr.tick(1000, &st)
    else {
        panic!()
    };
    // 3 and 4 are downed as indirectly connected; for the rest the decision is taken as if
    // their observations of each other did not exist: {1,2} of {1,2,5} keep 5 out.
    assert_eq!(decision, DownIndirectlyConnected);
    assert_eq!(nodes, [n(3), n(4), n(5)].into());
}

#[test]
fn lease_majority_asks_for_the_lease_with_a_delay_for_the_minority() {
    let lm = DowningStrategy::LeaseMajority {
        role: None,
        acquire_lease_delay_for_minority_ms: 2000,
        release_after_ms: 40_000,
    };
    let maj = state((1..=5).map(up).collect(), 1, &[(1, 4), (1, 5)]);
    let mut sbr = SplitBrainResolver::new(settings(lm.clone()));
    sbr.tick(0, &maj);
    assert_eq!(
        sbr.tick(1000, &maj),
        Some(SbrAction::AcquireLease { delay_ms: 0 })
    );
    assert_eq!(sbr.tick(1100, &maj), None, "waiting for the lease");
    sbr.on_lease_result(true);
    assert_eq!(
        sbr.tick(1200, &maj),
        Some(SbrAction::Down {
            decision: AcquireLeaseAndDownUnreachable { delay_ms: 0 },
            nodes: [n(4), n(5)].into(),
            cause: DecisionCause::Lease,
        })
    );
    assert_eq!(
        sbr.tick(1300, &maj),
        None,
        "the lease is kept while the downed members are still in the gossip"
    );
    let removed = state((1..=3).map(up).collect(), 1, &[]);
    assert_eq!(
        sbr.tick(2000, &removed),
        None,
        "kept for release-after once they are removed, so the other side is refused"
    );
    assert!(sbr.holds_lease());
    assert_eq!(sbr.tick(41_000, &removed), None);
    assert_eq!(sbr.tick(42_000, &removed), Some(SbrAction::ReleaseLease));
    assert!(!sbr.holds_lease());
    assert_eq!(sbr.tick(43_000, &removed), None, "released once");

    let min = state((1..=5).map(up).collect(), 4, &[(4, 1), (4, 2), (4, 3)]);
    let mut sbr = SplitBrainResolver::new(settings(lm));
    sbr.tick(0, &min);
    assert_eq!(
        sbr.tick(1000, &min),
        Some(SbrAction::AcquireLease { delay_ms: 2000 })
    );
    sbr.on_lease_result(false);
    let Some(SbrAction::Down {
        decision, nodes, ..
    }) = sbr.tick(3100, &min)
    else {
        panic!()
    };
    assert_eq!(decision, DownReachable);
    assert_eq!(nodes, [n(4), n(5)].into());
}

#[test]
fn nothing_to_do_when_everyone_is_reachable() {
    let st = state((1..=3).map(up).collect(), 1, &[]);
    let mut sbr = SplitBrainResolver::new(settings(KM));
    for t in [0, 1000, 100_000] {
        assert_eq!(sbr.tick(t, &st), None);
    }
}
