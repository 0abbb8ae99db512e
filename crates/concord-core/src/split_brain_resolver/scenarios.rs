//! Scenario tests: one test per behaviour of Akka's Split Brain Resolver that Concord
//! matches, each evaluated on both sides of the partition from that side's own view (its
//! own member statuses, its own reachability records, its own seen set).

use std::collections::BTreeSet;

use super::*;
use crate::address::Address;
use crate::gossip::Gossip;
use crate::member::{Member, UP_NUMBER_UNSET};

fn n(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), 1)
}

/// Member `i` with `status`; Up members get up-number `i` (lower = older).
fn m(i: u16, status: MemberStatus) -> Member {
    let up_number = match status {
        MemberStatus::Joining | MemberStatus::WeaklyUp => UP_NUMBER_UNSET,
        _ => u32::from(i),
    };
    Member {
        unique_address: n(i),
        status,
        roles: BTreeSet::new(),
        up_number,
        app_version: "0".into(),
    }
}

fn ups(ids: impl IntoIterator<Item = u16>) -> Vec<Member> {
    ids.into_iter().map(|i| m(i, MemberStatus::Up)).collect()
}

/// A side's view: `members` as this side sees them, `records` (observer, subject) of
/// unreachability, `seen` the members that have seen this side's current gossip.
fn side(me: u16, members: &[Member], records: &[(u16, u16)], seen: &[u16]) -> SbrView {
    let mut g = Gossip::empty();
    for x in members {
        g.members.insert(x.unique_address.clone(), x.clone());
    }
    for (o, s) in records {
        g.overview.reachability = g.overview.reachability.unreachable(&n(*o), &n(*s));
    }
    g.overview.seen = seen.iter().map(|i| n(*i)).collect();
    SbrView::from_state(&MembershipState::new(g, n(me)))
}

/// The records of a clean partition seen from side `this`: each of its members observes
/// each member of `other` unreachable.
fn clean(this: &[u16], other: &[u16]) -> Vec<(u16, u16)> {
    this.iter()
        .flat_map(|o| other.iter().map(move |s| (*o, *s)))
        .collect()
}

/// The membership state of node `me` among members 1..=5 (Up, or Down if in `down`).
fn state_of(me: u16, records: &[(u16, u16)], down: &[u16], seen: &[u16]) -> MembershipState {
    let mut g = Gossip::empty();
    for mut x in ups(1..=5) {
        if down.contains(&(x.unique_address.address.port - 2550)) {
            x.status = MemberStatus::Down;
        }
        g.members.insert(x.unique_address.clone(), x);
    }
    for (o, s) in records {
        g.overview.reachability = g.overview.reachability.unreachable(&n(*o), &n(*s));
    }
    g.overview.seen = seen.iter().map(|i| n(*i)).collect();
    MembershipState::new(g, n(me))
}

/// The members `strategy` downs from `view`, as numbers, with the decision.
fn outcome(strategy: &DowningStrategy, view: &SbrView) -> (Decision, BTreeSet<u16>) {
    let d = decide(strategy, view);
    let (d, nodes) = match nodes_to_down(strategy, view, d) {
        Ok(nodes) => (d, nodes),
        Err(DoubleDecision) => (
            Decision::DownAll,
            nodes_to_down(strategy, view, Decision::DownAll).unwrap(),
        ),
    };
    let ids = nodes.iter().map(|a| a.address.port - 2550).collect();
    (d, ids)
}

/// keep-majority with Concord's rules, stable-after 1 s, and `down_all_when_unstable_ms`.
fn keep_majority_settings(down_all_when_unstable_ms: Option<u64>) -> SbrSettings {
    SbrSettings {
        strategy: KEEP_MAJORITY,
        stable_after_ms: 1000,
        down_all_when_unstable_ms,
        rules: SbrRules::Concord,
    }
}

/// The decision and the members of `action`, which must be a downing.
fn downing(action: Option<SbrAction>) -> (Decision, BTreeSet<UniqueAddress>) {
    match action {
        Some(SbrAction::Down {
            decision, nodes, ..
        }) => (decision, nodes),
        other => panic!("expected a downing, got {other:?}"),
    }
}

/// Asserts that `action` downs all `n` members.
fn assert_down_all(action: Option<SbrAction>, n: usize) {
    match action {
        Some(SbrAction::Down {
            decision, nodes, ..
        }) => {
            assert_eq!(decision, Decision::DownAll);
            assert_eq!(nodes.len(), n);
        }
        other => panic!("expected down-all, got {other:?}"),
    }
}

fn set(ids: &[u16]) -> BTreeSet<u16> {
    ids.iter().copied().collect()
}

/// The members that keep running after both sides carried out their decisions: a side
/// survives if it does not down itself.
fn survivors(sides: &[(&[u16], &BTreeSet<u16>)]) -> Vec<BTreeSet<u16>> {
    sides
        .iter()
        .map(|(members, downed_by_side)| {
            members
                .iter()
                .copied()
                .filter(|x| !downed_by_side.contains(x))
                .collect::<BTreeSet<u16>>()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

const KEEP_MAJORITY: DowningStrategy = DowningStrategy::KeepMajority { role: None };

// ---------------------------------------------------------------- 1. membership changes

#[test]
fn keep_majority_member_moved_up_on_the_other_side_during_the_partition_downs_all_here() {
    // 1..4 Up, 5 Joining; B's leader moved 5 to Up just before the partition; A did not
    // see it. A = {1,2}, B = {3,4,5}.
    let a_members = [ups(1..=4), vec![m(5, MemberStatus::Joining)]].concat();
    let b_members = ups(1..=5);
    let a = side(1, &a_members, &clean(&[1, 2], &[3, 4, 5]), &[1, 2]);
    let b = side(3, &b_members, &clean(&[3, 4, 5], &[1, 2]), &[3, 4, 5]);
    // Without the guard A would keep {1,2} (2|2 tie, lowest address) and B {3,4,5}.
    let (da, downed_a) = outcome(&KEEP_MAJORITY, &a);
    assert_eq!(da, Decision::DownAll);
    assert!(downed_a.contains(&1) && downed_a.contains(&2));
    let (db, downed_b) = outcome(&KEEP_MAJORITY, &b);
    assert_eq!(
        (db, downed_b.clone()),
        (Decision::DownUnreachable, set(&[1, 2]))
    );
    assert_eq!(
        survivors(&[(&[1, 2], &downed_a), (&[3, 4, 5], &downed_b)]),
        vec![set(&[3, 4, 5])]
    );
}

#[test]
fn keep_majority_leaving_member_exiting_on_the_other_side_downs_all_here() {
    // 6 members; 3 is Leaving and B's leader already moved it to Exiting.
    // A = {1,2,3}, B = {4,5,6}.
    let mut a_members = ups(1..=6);
    a_members[2] = m(3, MemberStatus::Leaving);
    let mut b_members = ups(1..=6);
    b_members[2] = m(3, MemberStatus::Exiting);
    let a = side(1, &a_members, &clean(&[1, 2, 3], &[4, 5, 6]), &[1, 2, 3]);
    let b = side(4, &b_members, &clean(&[4, 5, 6], &[1, 2, 3]), &[4, 5, 6]);
    let (da, downed_a) = outcome(&KEEP_MAJORITY, &a);
    assert_eq!(
        da,
        Decision::DownAll,
        "3|3 by the first count, 2|3 without Leaving"
    );
    assert!(
        !downed_a.contains(&3) || a_members[2].status != MemberStatus::Exiting,
        "a Leaving member is downed with its side"
    );
    let (db, downed_b) = outcome(&KEEP_MAJORITY, &b);
    assert_eq!(db, Decision::DownUnreachable);
    assert!(!downed_b.contains(&3), "Exiting members are not downed");
    assert_eq!(
        survivors(&[(&[1, 2, 3], &downed_a), (&[4, 5, 6], &downed_b)]),
        vec![set(&[4, 5, 6])]
    );
}

#[test]
fn keep_oldest_oldest_leaving_alone_downs_itself_when_it_may_be_exiting_over_there() {
    let s = DowningStrategy::KeepOldest {
        down_if_alone: false,
        role: None,
    };
    // The oldest (1) is Leaving; B already sees it Exiting. A = {1}, B = {2,3,4,5}.
    let mut a_members = ups(1..=5);
    a_members[0] = m(1, MemberStatus::Leaving);
    let mut b_members = ups(1..=5);
    b_members[0] = m(1, MemberStatus::Exiting);
    let a = side(1, &a_members, &clean(&[1], &[2, 3, 4, 5]), &[1]);
    let b = side(2, &b_members, &clean(&[2, 3, 4, 5], &[1]), &[2, 3, 4, 5]);
    let (da, downed_a) = outcome(&s, &a);
    assert_eq!(da, Decision::DownAll);
    let (db, downed_b) = outcome(&s, &b);
    assert_eq!(
        db,
        Decision::DownUnreachable,
        "B's oldest is 2, on its side"
    );
    assert!(
        downed_b.is_empty(),
        "1 is Exiting: not downed, removed normally"
    );
    assert_eq!(
        survivors(&[(&[1], &downed_a), (&[2, 3, 4, 5], &downed_b)]),
        vec![set(&[2, 3, 4, 5])]
    );
}

#[test]
fn keep_oldest_down_if_alone_joining_member_up_on_the_other_side_downs_all_here() {
    let s = DowningStrategy::KeepOldest {
        down_if_alone: true,
        role: None,
    };
    // 1 (oldest) and 2 Up; 3 Joining, moved to Up by B. A = {1}, B = {2,3}.
    let a_members = [ups(1..=2), vec![m(3, MemberStatus::Joining)]].concat();
    let b_members = ups(1..=3);
    let a = side(1, &a_members, &clean(&[1], &[2, 3]), &[1]);
    let b = side(2, &b_members, &clean(&[2, 3], &[1]), &[2, 3]);
    // Without the guard A keeps itself (1|1: the oldest is kept) and B downs the lone
    // oldest (2|1 with down-if-alone).
    let (da, downed_a) = outcome(&s, &a);
    assert_eq!(da, Decision::DownAll);
    let (db, downed_b) = outcome(&s, &b);
    assert_eq!(
        (db, downed_b.clone()),
        (Decision::DownUnreachable, set(&[1]))
    );
    assert_eq!(
        survivors(&[(&[1], &downed_a), (&[2, 3], &downed_b)]),
        vec![set(&[2, 3])]
    );
}

#[test]
fn static_quorum_joining_and_leaving_during_a_partition_never_keep_two_sides() {
    // static-quorum has no second evaluation in Akka: its size bound (at most
    // quorum-size * 2 - 1 members) already keeps at most one side. Checked for each
    // split of 5 members with 3 Up on both sides seen differently.
    let s = DowningStrategy::StaticQuorum {
        quorum_size: 3,
        role: None,
    };
    for joining_up_on_b in [false, true] {
        let a_members = [ups(1..=4), vec![m(5, MemberStatus::Joining)]].concat();
        let b_members = if joining_up_on_b {
            ups(1..=5)
        } else {
            a_members.clone()
        };
        for split in 1..=4u16 {
            let a_ids: Vec<u16> = (1..=split).collect();
            let b_ids: Vec<u16> = (split + 1..=5).collect();
            let a = side(1, &a_members, &clean(&a_ids, &b_ids), &a_ids);
            let b = side(b_ids[0], &b_members, &clean(&b_ids, &a_ids), &b_ids);
            let (_, da) = outcome(&s, &a);
            let (_, db) = outcome(&s, &b);
            assert!(
                survivors(&[(&a_ids, &da), (&b_ids, &db)]).len() <= 1,
                "split {split}, joining up on B: {joining_up_on_b}"
            );
        }
    }
}

// ---------------------------------------------------------------- 2. indirectly connected

#[test]
fn a_single_asymmetric_link_downs_only_the_two_nodes_of_that_link() {
    // 2 cannot hear 3; 3 still receives gossip (it has seen the current state).
    let v = side(1, &ups(1..=5), &[(2, 3)], &[1, 2, 3, 4, 5]);
    let (d, downed) = outcome(&KEEP_MAJORITY, &v);
    assert_eq!(d, Decision::DownIndirectlyConnected);
    assert_eq!(downed, set(&[2, 3]));
    // Seen from 2 and from 3 themselves: the same decision.
    for me in [2, 3] {
        let v = side(me, &ups(1..=5), &[(2, 3)], &[1, 2, 3, 4, 5]);
        assert_eq!(outcome(&KEEP_MAJORITY, &v).1, set(&[2, 3]));
    }
}

#[test]
fn indirectly_connected_plus_a_crash_downs_those_and_the_crashed_never_the_rest() {
    // 5 crashed (everyone observes it); 3 and 4 cannot hear each other.
    let mut records = clean(&[1, 2, 3, 4], &[5]);
    records.extend([(3, 4), (4, 3)]);
    let v = side(1, &ups(1..=5), &records, &[1, 2, 3, 4]);
    let (d, downed) = outcome(&KEEP_MAJORITY, &v);
    assert_eq!(d, Decision::DownIndirectlyConnected);
    assert_eq!(downed, set(&[3, 4, 5]));
}

#[test]
fn a_clean_partition_plus_an_indirectly_connected_node_keeps_the_majority_running() {
    // {1,2,3,4} | {5,6,7}; inside the majority 3 cannot hear 4 (4 has seen the gossip).
    let mut a_records = clean(&[1, 2, 3, 4], &[5, 6, 7]);
    a_records.push((3, 4));
    let a = side(1, &ups(1..=7), &a_records, &[1, 2, 3, 4]);
    let (da, downed_a) = outcome(&KEEP_MAJORITY, &a);
    assert_eq!(da, Decision::DownIndirectlyConnected);
    assert_eq!(downed_a, set(&[3, 4, 5, 6, 7]), "1 and 2 keep running");
    // The minority never saw the link between 3 and 4: it downs itself.
    let b = side(
        5,
        &ups(1..=7),
        &clean(&[5, 6, 7], &[1, 2, 3, 4]),
        &[5, 6, 7],
    );
    let (db, downed_b) = outcome(&KEEP_MAJORITY, &b);
    assert_eq!(
        (db, downed_b.clone()),
        (Decision::DownReachable, set(&[5, 6, 7]))
    );
    assert_eq!(
        survivors(&[(&[1, 2, 3, 4], &downed_a), (&[5, 6, 7], &downed_b)]),
        vec![set(&[1, 2])]
    );
}

#[test]
fn an_indirect_node_seen_only_through_the_seen_table_is_handled_the_same_way() {
    // 4 observes 5 unreachable; 5 has seen the current gossip; no cycle.
    let v = side(1, &ups(1..=5), &[(4, 5)], &[1, 2, 3, 5]);
    assert_eq!(v.indirectly_connected(), [n(4), n(5)].into());
    assert_eq!(outcome(&KEEP_MAJORITY, &v).1, set(&[4, 5]));
    // Not seen: an ordinary unreachable member, downed alone by the majority.
    let v = side(1, &ups(1..=5), &[(4, 5)], &[1, 2, 3, 4]);
    assert!(v.indirectly_connected().is_empty());
    assert_eq!(
        outcome(&KEEP_MAJORITY, &v),
        (Decision::DownUnreachable, set(&[5]))
    );
}

#[test]
fn lease_majority_with_indirectly_connected_asks_at_once_and_the_holder_downs_them() {
    let s = DowningStrategy::LeaseMajority {
        role: None,
        acquire_lease_delay_for_minority_ms: 2000,
        release_after_ms: 40_000,
    };
    // 1 and 2 cannot hear 3, 4, 5 but 3, 4, 5 have seen the gossip: five indirect
    // observations; by plain counting {1,2} would be a minority and wait.
    let v = side(
        1,
        &ups(1..=5),
        &clean(&[1, 2], &[3, 4, 5]),
        &[1, 2, 3, 4, 5],
    );
    let d = decide(&s, &v);
    assert_eq!(d, Decision::AcquireLeaseAndDownIndirectlyConnected);
    let nodes = nodes_to_down(&s, &v, d).unwrap();
    assert_eq!(nodes.len(), 5, "every end of an indirect link: {nodes:?}");
    // Refused: this side and the indirectly connected members.
    let reversed = nodes_to_down(&s, &v, d.reversed()).unwrap();
    assert!(reversed.contains(&n(1)) && reversed.contains(&n(2)));
    // A single asymmetric link: the holder downs only that link.
    let v = side(1, &ups(1..=5), &[(2, 3)], &[1, 2, 3, 4, 5]);
    let d = decide(&s, &v);
    assert_eq!(d, Decision::AcquireLeaseAndDownIndirectlyConnected);
    assert_eq!(nodes_to_down(&s, &v, d).unwrap(), [n(2), n(3)].into());
}

// ---------------------------------------------------------------- 3. double decision

/// A chain of asymmetric links (3 cannot hear 4, 4 cannot hear 5) and a seen set that is
/// not current yet: 4 is an observer and a subject; leaving out the observations between
/// indirectly connected members (none: the cycle set is 4 alone) still finds 4.
fn chain_of_asymmetric_links() -> MembershipState {
    state_of(1, &[(3, 4), (4, 5)], &[], &[1, 2])
}

#[test]
fn indirectly_connected_found_again_after_leaving_out_their_links_downs_all() {
    let v = SbrView::from_state(&chain_of_asymmetric_links());
    let d = decide(&KEEP_MAJORITY, &v);
    assert_eq!(d, Decision::DownIndirectlyConnected);
    assert_eq!(
        nodes_to_down(&KEEP_MAJORITY, &v, d),
        Err(DoubleDecision),
        "the additional decision is indirectly connected again"
    );
    let (d, downed) = outcome(&KEEP_MAJORITY, &v);
    assert_eq!(d, Decision::DownAll);
    assert_eq!(downed, set(&[1, 2, 3, 4, 5]));
}

#[test]
fn a_double_decision_downs_all_with_akka_rules_and_its_own_side_with_concords() {
    let st = chain_of_asymmetric_links();
    let akka = SbrSettings {
        rules: SbrRules::Akka,
        ..keep_majority_settings(None)
    };
    let mut sbr = SplitBrainResolver::new(akka);
    assert_eq!(sbr.tick(0, &st), None);
    let action = sbr.tick(1000, &st);
    assert!(matches!(
        action,
        Some(SbrAction::Down {
            cause: DecisionCause::DoubleDecision,
            ..
        })
    ));
    assert_down_all(action, 5);
    // Rule 7: 1 downs its side {1, 2, 3} (not the indirectly connected 4, which it cannot
    // reach), keeping nobody it can reach, and leaves 4 and 5 to decide for themselves.
    let mut sbr = SplitBrainResolver::new(keep_majority_settings(None));
    assert_eq!(sbr.tick(0, &st), None);
    assert_eq!(
        sbr.tick(1000, &st),
        Some(SbrAction::Down {
            decision: Decision::DownOwnSide,
            nodes: [n(1), n(2), n(3)].into(),
            cause: DecisionCause::DoubleDecision,
        })
    );
}

// ---------------------------------------------------------------- 4. down-all-when-unstable

#[test]
fn down_all_when_unstable_counts_from_the_first_change_until_now() {
    // A non-leader (it never takes the ordinary decision) sees reachability change from
    // 0 to 2000 ms, then nothing new: still unstable, it downs all once
    // stable-after + down-all-when-unstable has passed since the first change.
    let settings = keep_majority_settings(Some(4000));
    let mk = |records: &[(u16, u16)]| state_of(5, records, &[], &[5]);
    // 1 (the leader) is unreachable from 5 and so is 2, then 3, in turn.
    let a = mk(&[(5, 1)]);
    let b = mk(&[(5, 1), (5, 2)]);
    let c = mk(&[(5, 1), (5, 2), (5, 3)]);
    let mut sbr = SplitBrainResolver::new(settings);
    assert_eq!(sbr.tick(0, &a), None);
    assert_eq!(sbr.tick(1000, &b), None);
    assert_eq!(sbr.tick(2000, &c), None);
    assert_eq!(sbr.tick(4000, &c), None);
    assert_eq!(sbr.tick(5000, &c), None, "exactly at the limit: not yet");
    match sbr.tick(5001, &c) {
        Some(SbrAction::Down {
            decision, nodes, ..
        }) => {
            assert_eq!(decision, Decision::DownAll);
            assert_eq!(nodes.len(), 5);
        }
        other => panic!("expected down-all on a non-leader, got {other:?}"),
    }
}

// ---------------------------------------------------------------- 5. exiting members

#[test]
fn exiting_members_are_not_downed_by_a_partition_decision() {
    let mut members = ups(1..=5);
    members[3] = m(4, MemberStatus::Exiting);
    // Minority side {4,5}: 5 downs its side, but 4 is leaving anyway.
    let v = side(5, &members, &clean(&[5], &[1, 2, 3]), &[4, 5]);
    let (d, downed) = outcome(&KEEP_MAJORITY, &v);
    assert_eq!(d, Decision::DownReachable);
    assert_eq!(downed, set(&[5]));
    // Majority side: 4 unreachable while Exiting is left to the normal removal.
    let v = side(1, &members, &clean(&[1, 2, 3], &[4, 5]), &[1, 2, 3]);
    assert_eq!(
        outcome(&KEEP_MAJORITY, &v),
        (Decision::DownUnreachable, set(&[5]))
    );
    // Down-all leaves it too.
    assert_eq!(outcome(&DowningStrategy::DownAll, &v).1, set(&[1, 2, 3, 5]));
}

// ---------------------------------------------------------------- 6. down-if-alone

#[test]
fn keep_oldest_down_if_alone_only_when_alone_against_at_least_two() {
    let s = DowningStrategy::KeepOldest {
        down_if_alone: true,
        role: None,
    };
    // Two members: both sides keep the oldest (the other side is no better).
    let a = side(1, &ups(1..=2), &clean(&[1], &[2]), &[1]);
    let b = side(2, &ups(1..=2), &clean(&[2], &[1]), &[2]);
    assert_eq!(outcome(&s, &a), (Decision::DownUnreachable, set(&[2])));
    assert_eq!(outcome(&s, &b), (Decision::DownReachable, set(&[2])));
    // Three members, the oldest alone: it downs itself and the other two keep running.
    let a = side(1, &ups(1..=3), &clean(&[1], &[2, 3]), &[1]);
    let b = side(2, &ups(1..=3), &clean(&[2, 3], &[1]), &[2, 3]);
    assert_eq!(outcome(&s, &a), (Decision::DownReachable, set(&[1])));
    assert_eq!(outcome(&s, &b), (Decision::DownUnreachable, set(&[1])));
    // The oldest with company: its side is kept.
    let a = side(1, &ups(1..=5), &clean(&[1, 2], &[3, 4, 5]), &[1, 2]);
    let b = side(3, &ups(1..=5), &clean(&[3, 4, 5], &[1, 2]), &[3, 4, 5]);
    assert_eq!(
        outcome(&s, &a),
        (Decision::DownUnreachable, set(&[3, 4, 5]))
    );
    assert_eq!(outcome(&s, &b), (Decision::DownReachable, set(&[3, 4, 5])));
}

// ---------------------------------------------------------------- 7. roles

#[test]
fn a_role_that_no_member_has_downs_all_with_keep_majority_and_keep_oldest() {
    let role = Some("nobody".to_string());
    for s in [
        DowningStrategy::KeepMajority { role: role.clone() },
        DowningStrategy::KeepOldest {
            down_if_alone: false,
            role: role.clone(),
        },
    ] {
        let v = side(1, &ups(1..=5), &clean(&[1, 2, 3], &[4, 5]), &[1, 2, 3]);
        assert_eq!(
            outcome(&s, &v),
            (Decision::DownAll, set(&[1, 2, 3, 4, 5])),
            "{s:?}"
        );
    }
    // static-quorum counts nobody: below the quorum, its side goes.
    let s = DowningStrategy::StaticQuorum {
        quorum_size: 2,
        role,
    };
    let v = side(1, &ups(1..=5), &clean(&[1, 2, 3], &[4, 5]), &[1, 2, 3]);
    assert_eq!(outcome(&s, &v), (Decision::DownReachable, set(&[1, 2, 3])));
}

#[test]
fn a_role_counts_only_its_members_but_the_decision_downs_every_member_of_the_side() {
    let mut members = ups(1..=5);
    for x in members.iter_mut().skip(3) {
        x.roles.insert("db".into());
    }
    let s = DowningStrategy::KeepMajority {
        role: Some("db".into()),
    };
    // {1,2,3} has no db member: it downs itself although it is 3 of 5.
    let a = side(1, &members, &clean(&[1, 2, 3], &[4, 5]), &[1, 2, 3]);
    assert_eq!(outcome(&s, &a), (Decision::DownReachable, set(&[1, 2, 3])));
    let b = side(4, &members, &clean(&[4, 5], &[1, 2, 3]), &[4, 5]);
    assert_eq!(
        outcome(&s, &b),
        (Decision::DownUnreachable, set(&[1, 2, 3]))
    );
}

mod pekko;
mod stricter;
