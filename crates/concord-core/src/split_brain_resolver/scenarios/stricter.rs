//! Scenario tests of Concord's rules that are stricter than Akka's (docs/SPLIT_BRAIN_RESOLVER.md,
//! "Where Concord is stricter than Akka"), each from the view of the side deciding.

use super::*;

#[test]
fn an_indirectly_connected_decision_never_keeps_a_side_this_node_sees_as_losing() {
    // {1,3} | {2,4}, right after a different partition: 1's and 3's observations of 2
    // reached 2 through 4 before this partition settled, and 2's of 1 reached 1. By Akka's
    // rules alone 2 sees the cycle 1-2-3, downs {1,2,3} and keeps 4; 1 sees the cycle 1-2,
    // downs {1,2,4} and keeps 3: two clusters (simulator seed 220). Concord adds: the side
    // this node observes itself ({2,4} against {1,3}: the tie goes to the lowest address,
    // 1) must be one the strategy keeps, otherwise down its own side: 2 itself and the
    // members nobody observes unreachable (4), and none of the members it cannot reach.
    let members = ups(1..=4);
    let b = side(
        2,
        &members,
        &[(2, 1), (2, 3), (4, 1), (4, 3), (1, 2), (3, 2)],
        &[2, 4],
    );
    assert!(!b.indirectly_connected().is_empty());
    let (db, downed_b) = outcome(&KEEP_MAJORITY, &b);
    assert_eq!(
        (db, downed_b.clone()),
        (Decision::DownOwnSide, set(&[2, 4]))
    );
    let a = side(
        1,
        &members,
        &[(1, 2), (1, 4), (3, 2), (3, 4), (2, 1)],
        &[1, 3],
    );
    let (da, downed_a) = outcome(&KEEP_MAJORITY, &a);
    assert_eq!(
        da,
        Decision::DownIndirectlyConnected,
        "1 sees its side kept"
    );
    assert_eq!(downed_a, set(&[1, 2, 4]));
    assert_eq!(
        survivors(&[(&[1, 3], &downed_a), (&[2, 4], &downed_b)]),
        vec![set(&[3])]
    );
}

#[test]
fn a_member_downed_here_but_not_seen_over_there_still_counts_there() {
    // 1 was cut off and this side downed it; 3 and 4 were partitioned away from {2,5}
    // before they saw that. Over there 1 still counts, so {3,4} may count 1 as theirs; here
    // the 2|2 tie (lowest address 2) would keep {2,5}: two clusters (simulator seed 181).
    // Counting 1 over there, {2,5} loses: it downs itself and leaves {3,4} to decide (only
    // Concord's rule 3 turned Akka's keep into a loss, so not a down-all).
    let settings = keep_majority_settings(None);
    let records = [(2, 1), (5, 1), (2, 3), (2, 4), (5, 3), (5, 4)];
    let st = state_of(2, &records, &[1], &[2, 5]);
    let mut sbr = SplitBrainResolver::new(settings.clone());
    assert_eq!(sbr.tick(0, &st), None);
    assert_eq!(
        downing(sbr.tick(1000, &st)),
        (Decision::DownOwnSide, [n(2), n(5)].into())
    );
    // Had 3 and 4 seen 1 Down before the partition, the tie keeps this side.
    let mut sbr = SplitBrainResolver::new(settings);
    let before = state_of(2, &[(2, 1), (5, 1)], &[1], &[2, 3, 4, 5]);
    assert_eq!(sbr.tick(0, &before), None);
    assert_eq!(sbr.tick(100, &st), None);
    assert_eq!(
        sbr.tick(1100, &st),
        Some(SbrAction::Down {
            decision: Decision::DownUnreachable,
            nodes: [n(3), n(4)].into(),
            cause: DecisionCause::Stable,
        })
    );
}

#[test]
fn a_decision_that_keeps_this_side_waits_while_suspects_could_overturn_it() {
    // 5 crashed and everyone observes it; the leader 1 would down it and keep {1,2,3,4}.
    // But {1,2} | {3,4} has just begun: 3 and 4 are only suspect (silent, not unreachable
    // yet). Were they cut off, {1,2} would be the minority against {3,4,5}: 1 waits; once
    // the suspects are detected, the records change and stable-after starts over. (The
    // simulator's seed 692 was this shape with stale indirectly-connected records.)
    let st = state_of(1, &clean(&[1, 2, 3, 4], &[5]), &[], &[1, 2, 3, 4]);
    let sbr_settings = keep_majority_settings(None);
    let mut sbr = SplitBrainResolver::new(sbr_settings.clone());
    assert_eq!(sbr.tick(0, &st), None);
    // Without suspects it decides on the records.
    assert_eq!(
        downing(sbr.tick(1000, &st)),
        (Decision::DownUnreachable, [n(5)].into())
    );
    let mut sbr = SplitBrainResolver::new(sbr_settings);
    assert_eq!(sbr.tick(0, &st), None);
    sbr.set_suspects([n(3), n(4)].into_iter().collect());
    assert_eq!(sbr.tick(1000, &st), None);
    assert_eq!(sbr.tick(5000, &st), None);
}

#[test]
fn an_indirectly_connected_decision_that_the_downed_could_overturn_downs_fewer_or_all() {
    // The sharding simulation's seed 904 in a 5-member shape: 4 and 5 crashed (everyone
    // observes it), 2 and 3 cannot hear each other. Akka downs 2, 3 (indirectly connected),
    // 4 and 5, keeping 1 alone; were 2 and 3 cut off from 1 as the decision is taken, with
    // their own link healed, they would be the majority of {1,2,3} and keep themselves.
    // Downing only 3 (the higher address of the pair) leaves no record between the kept
    // 1 and 2, and {1,2} outnumbers 3.
    let mut records = clean(&[1, 2, 3], &[4, 5]);
    records.extend([(2, 3), (3, 2)]);
    let v = side(1, &ups(1..=5), &records, &[1, 2, 3]);
    assert_eq!(
        v.indirectly_connected_to_down(),
        [n(3)].into_iter().collect()
    );
    let (d, downed) = outcome(&KEEP_MAJORITY, &v);
    assert_eq!(d, Decision::DownSomeIndirectlyConnected);
    assert_eq!(downed, set(&[3, 4, 5]));
    // With 1 and 4 on this side instead (only 5 crashed), keeping {1,4} against {2,3}
    // wins the tie by the lowest address whatever 2 and 3 do: Akka's decision stands.
    let mut records = clean(&[1, 2, 3, 4], &[5]);
    records.extend([(2, 3), (3, 2)]);
    let v = side(1, &ups(1..=5), &records, &[1, 2, 3, 4]);
    let (d, downed) = outcome(&KEEP_MAJORITY, &v);
    assert_eq!(d, Decision::DownIndirectlyConnected);
    assert_eq!(downed, set(&[2, 3, 5]));
    // 2, 3 and 4 each cannot hear the next (a cycle), 5 crashed, this is 1: all three
    // downed, {1} alone loses against them; two of them must go (each is in two records),
    // and {1, the one kept} against the two ties, won by the lowest address.
    let mut records = clean(&[1, 2, 3, 4], &[5]);
    records.extend([(2, 3), (3, 4), (4, 2)]);
    let v = side(1, &ups(1..=5), &records, &[1, 2, 3, 4]);
    let fewer = v.indirectly_connected_to_down();
    assert_eq!(fewer.len(), 2);
    let (d, downed) = outcome(&KEEP_MAJORITY, &v);
    assert_eq!(d, Decision::DownSomeIndirectlyConnected);
    assert_eq!(downed.len(), 3);
    assert!(downed.contains(&5));
    // The same seen from 2, a member of the cycle: Akka's decision downs 2 itself, and
    // nothing here overrides a decision that does not keep this node.
    let v = side(2, &ups(1..=5), &records, &[1, 2, 3, 4]);
    assert_eq!(
        outcome(&KEEP_MAJORITY, &v).0,
        Decision::DownIndirectlyConnected
    );
}

#[test]
fn a_member_observed_by_a_member_outside_the_indirectly_connected_is_always_downed() {
    // 1 cannot hear 2, and 2 cannot hear 3 (which has seen the gossip): 2 and 3 are
    // indirectly connected, and 1, outside them, observes 2. Downing 2 leaves no record
    // between the kept.
    let v = side(4, &ups(1..=5), &[(1, 2), (2, 3)], &[1, 3, 4, 5]);
    assert_eq!(v.indirectly_connected(), [n(2), n(3)].into_iter().collect());
    assert_eq!(
        v.indirectly_connected_to_down(),
        [n(2)].into_iter().collect()
    );
}

#[test]
fn the_wait_for_suspects_restarts_the_down_all_when_unstable_clock_once() {
    // The shape above: 5 unreachable since 0 ms, {3, 4} suspect from 1000 ms, when Akka's
    // leader would decide and restart its down-all-when-unstable clock. Concord waits
    // instead, so its clock restarts there too — on the leader 1 and on 2, which would
    // wait as well — : no down-all at 0 + 1000 + 4000 ms, only at 1000 + 1000 + 4000 ms
    // (the suspects never settled). Once per unstable period: not again at 6000 ms.
    let st = |me| state_of(me, &clean(&[1, 2, 3, 4], &[5]), &[], &[1, 2, 3, 4]);
    for me in [1, 2] {
        let mut sbr = SplitBrainResolver::new(keep_majority_settings(Some(4000)));
        sbr.set_suspects([n(3), n(4)].into_iter().collect());
        assert_eq!(sbr.tick(0, &st(me)), None);
        for t in (1000..=6000).step_by(500) {
            assert_eq!(sbr.tick(t, &st(me)), None, "node {me} at {t} ms");
        }
        let action = sbr.tick(6001, &st(me));
        assert!(
            matches!(
                action,
                Some(SbrAction::Down {
                    cause: DecisionCause::Unstable,
                    ..
                })
            ),
            "node {me}: {action:?}"
        );
        assert_down_all(action, 5);
    }
}

#[test]
fn a_suspect_that_cannot_overturn_the_decision_does_not_delay_it() {
    // 5 crashed (everyone observes it); 3 is merely slow. Keeping {1,2,3,4} holds even if
    // 3 were gone ({1,2,4} is still a majority): the leader downs 5 at once.
    let st = state_of(1, &clean(&[1, 2, 3, 4], &[5]), &[], &[1, 2, 3, 4]);
    let mut sbr = SplitBrainResolver::new(keep_majority_settings(None));
    sbr.set_suspects([n(3)].into_iter().collect());
    assert_eq!(sbr.tick(0, &st), None);
    match sbr.tick(1000, &st) {
        Some(SbrAction::Down { nodes, .. }) => assert_eq!(nodes, [n(5)].into_iter().collect()),
        other => panic!("expected 5 downed, got {other:?}"),
    }
}

#[test]
fn where_no_indirectly_connected_decision_holds_this_node_downs_its_own_side_not_all() {
    // 6 and 7 crashed (everyone observes it); 1, 2, 3 and 4 cannot hear each other at all;
    // this is 5. Akka downs 1..4 as indirectly connected, 6 and 7, and keeps 5 alone. Cut off
    // together, {1,2,3,4} would outnumber 5 (rule 6); downing three of them to break every
    // record still leaves {5, 1} against {2,3,4}. No decision that keeps 5 holds: 5 downs its
    // side — itself, as everyone else is observed unreachable by someone — and leaves 1..4,
    // 6 and 7 to decide for themselves. Until stop 27 this was a down-all; at stop 27 it
    // also downed the indirectly connected 1..4.
    let mut records = clean(&[1, 2, 3, 4, 5], &[6, 7]);
    for o in 1..=4 {
        records.extend((1..=4).filter(|s| *s != o).map(|s| (o, s)));
    }
    let v = side(5, &ups(1..=7), &records, &[1, 2, 3, 4, 5]);
    assert_eq!(v.indirectly_connected(), set_n(&[1, 2, 3, 4]));
    assert_eq!(v.indirectly_connected_to_down().len(), 3);
    let (d, downed) = outcome(&KEEP_MAJORITY, &v);
    assert_eq!((d, downed), (Decision::DownOwnSide, set(&[5])));
    // By Akka's rules alone 5 is kept.
    assert_eq!(
        decide_with(SbrRules::Akka, &KEEP_MAJORITY, &v),
        Decision::DownIndirectlyConnected
    );
}

fn set_n(ids: &[u16]) -> BTreeSet<UniqueAddress> {
    ids.iter().map(|i| n(*i)).collect()
}

#[test]
fn records_restart_stable_after_only_while_members_are_indirectly_connected() {
    let settings = keep_majority_settings(None);
    // A clean partition {1,2,3} | {4,5}: more members of this side observe 4 and 5 as the
    // detection spreads. The unreachable set is the same, so the decision is taken 1 s
    // after it last changed, as Akka does.
    let mut sbr = SplitBrainResolver::new(settings.clone());
    let seen = [1, 2, 3];
    assert_eq!(
        sbr.tick(0, &state_of(1, &[(1, 4), (1, 5)], &[], &seen)),
        None
    );
    let more = clean(&[1, 2, 3], &[4, 5]);
    assert_eq!(sbr.tick(600, &state_of(1, &more, &[], &seen)), None);
    assert_eq!(
        sbr.tick(1000, &state_of(1, &more, &[], &seen)),
        Some(SbrAction::Down {
            decision: Decision::DownUnreachable,
            nodes: [n(4), n(5)].into(),
            cause: DecisionCause::Stable,
        })
    );
    // 2 and 3 cannot hear each other: who observes whom decides who is downed, so a new
    // record restarts stable-after (rule 1).
    let mut sbr = SplitBrainResolver::new(settings);
    let all = [1, 2, 3, 4, 5];
    assert_eq!(sbr.tick(0, &state_of(1, &[(2, 3)], &[], &all)), None);
    let both = [(2, 3), (3, 2)];
    assert_eq!(sbr.tick(600, &state_of(1, &both, &[], &all)), None);
    assert_eq!(sbr.tick(1000, &state_of(1, &both, &[], &all)), None);
    assert!(sbr.tick(1600, &state_of(1, &both, &[], &all)).is_some());
}

#[test]
fn the_wait_for_records_to_settle_does_not_count_against_down_all_when_unstable() {
    // 3 and 4 cannot hear each other; this is 2, not the leader. Akka's stable-after ends
    // 1 s after the unreachable set last changed (0 ms), and down-all-when-unstable 1 s
    // later; the record 5 → 4 at 600 ms (4 was unreachable already) holds Concord's
    // decision back by 600 ms more
    // (rule 1), so the down-all comes 600 ms later too — once.
    let settings = keep_majority_settings(Some(1000));
    let all = [1, 2, 3, 4, 5];
    let mut sbr = SplitBrainResolver::new(settings);
    assert_eq!(
        sbr.tick(0, &state_of(2, &[(3, 4), (4, 3)], &[], &all)),
        None
    );
    let both = state_of(2, &[(3, 4), (4, 3), (5, 4)], &[], &all);
    assert_eq!(sbr.tick(600, &both), None);
    assert_eq!(sbr.tick(2001, &both), None, "Akka's horizon alone");
    assert_down_all(sbr.tick(2601, &both), 5);
}

#[test]
fn downing_its_own_side_never_downs_a_member_this_node_cannot_reach() {
    // Simulator, sharding seed 3324 (sim nodes 0..4 are 1..5 here): 3 was paused, then
    // {2, 3} were cut off from {1, 4, 5}. This is 2: it observes everyone unreachable, and
    // 1, 4 and 5 observe 3 unreachable, so 1, 4 and 5 are indirectly connected and the
    // decision is a double one (rule 7). 2 downs its own side. At stop 27 that also downed
    // the indirectly connected 1, 4 and 5: when 3 woke up, 2's gossip told it that 1, 2, 4
    // and 5 were down, and 3 kept running alone beside {1, 4, 5}. Now 2 downs itself only,
    // and 3 decides for itself (a minority).
    let records = [(1, 3), (2, 1), (2, 3), (2, 4), (2, 5), (4, 3), (5, 3)];
    let st = state_of(2, &records, &[], &[2]);
    assert_eq!(
        SbrView::from_state(&st).indirectly_connected(),
        set_n(&[1, 4, 5])
    );
    let mut sbr = SplitBrainResolver::new(keep_majority_settings(None));
    assert_eq!(sbr.tick(0, &st), None);
    // 3 hears only from 2: it must not learn that the other side is gone.
    assert_eq!(
        downing(sbr.tick(1000, &st)),
        (Decision::DownOwnSide, [n(2)].into())
    );
}

#[test]
fn two_deciders_that_down_themselves_never_keep_two_lone_members() {
    // Distributed Data simulation, seed 1801 (simulator nodes 0..4 are 1..5 here). After
    // the partitions {2,3} | {1,4,5}, {1,5} | {2,3,4} and now {1,2,5} | {3,4}, 3 holds
    // records that crossed the earlier partitions: everyone but 4 is both an observer and
    // a subject. By Akka's rules 3 downs {1,2,3,5} as indirectly connected and keeps 4,
    // whose own observations ({2,3,4} against {1,5}) make its side the majority. Two
    // seconds later 1, on the other side, downs {1,3,4,5} and keeps 2 by the same
    // reasoning: two lone members kept, 4 and 2.
    let members = ups(1..=5);
    let three = side(
        3,
        &members,
        &[
            (1, 2),
            (1, 3),
            (2, 1),
            (2, 5),
            (3, 1),
            (3, 5),
            (4, 1),
            (4, 5),
            (5, 2),
            (5, 3),
        ],
        &[3, 4],
    );
    let one = side(
        1,
        &members,
        &[
            (1, 3),
            (1, 4),
            (2, 3),
            (2, 4),
            (3, 1),
            (3, 5),
            (4, 1),
            (4, 5),
            (5, 3),
            (5, 4),
        ],
        &[1, 2],
    );
    let akka = |view: &SbrView| {
        let d = decide_with(SbrRules::Akka, &KEEP_MAJORITY, view);
        let nodes = nodes_to_down(&KEEP_MAJORITY, view, d).unwrap();
        (
            d,
            nodes
                .iter()
                .map(|a| a.address.port - 2550)
                .collect::<BTreeSet<u16>>(),
        )
    };
    assert_eq!(
        akka(&three),
        (Decision::DownIndirectlyConnected, set(&[1, 2, 3, 5]))
    );
    assert_eq!(
        akka(&one),
        (Decision::DownIndirectlyConnected, set(&[1, 3, 4, 5]))
    );
    assert_eq!(
        survivors(&[
            (&[1, 2, 5], &set(&[1, 3, 4, 5])),
            (&[3, 4], &set(&[1, 2, 3, 5]))
        ]),
        vec![set(&[2]), set(&[4])],
        "Akka's rules keep two lone members"
    );
    // Concord's: the kept member must also win against the others downed as indirectly
    // connected, were those cut off together ({3,4} against {1,2,5}; {1,2} against
    // {3,4,5}). Neither does; downing as few as break every record keeps each decider
    // and its own observations' majority: 3 keeps {2,3,4}, 1 keeps {1,2,5}.
    let (d3, downed3) = outcome(&KEEP_MAJORITY, &three);
    assert_eq!(
        (d3, downed3),
        (Decision::DownSomeIndirectlyConnected, set(&[1, 5]))
    );
    let (d1, downed1) = outcome(&KEEP_MAJORITY, &one);
    assert_eq!(
        (d1, downed1),
        (
            Decision::DownSomeIndirectlyConnected,
            set(&[1, 3, 4, 5])
                .difference(&set(&[1, 5]))
                .cloned()
                .collect()
        )
    );
    // 2 is with 1 in truth. Once 3 and 4 hear that 2 is unreachable, they are two against
    // 2 and the downed 1 and 5, which 2 has not seen downed (rule 3, as the resolver
    // tracks it): they down themselves, and {1,2,5} is the one side left.
    let mut later = SbrView::from_state(&state_of(3, &[(3, 2), (4, 2)], &[1, 5], &[3, 4]));
    later.down_unseen_by_other_side = [n(1), n(5)].into();
    assert_eq!(
        outcome(&KEEP_MAJORITY, &later),
        (Decision::DownOwnSide, set(&[3, 4]))
    );
}
