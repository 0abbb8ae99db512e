//! Pekko's own scenarios with indirectly connected members, keep-majority and keep-oldest
//! (Apache Pekko `cluster/src/test/.../sbr/SplitBrainResolverSpec.scala`, the "down
//! indirectly connected ..." cases, and the multi-node `IndirectlyConnected3NodeSpec` and
//! `IndirectlyConnected5NodeSpec`), re-expressed here: what Akka's rules down on each side
//! is the bound. Concord may down fewer (rule 6 keeps some of the indirectly connected), never
//! a member that Akka keeps running, and never two sides.
//!
//! Pekko's set-up: members A..G (here 1..7) with its ages (E the oldest, then D, C, B, A and
//! F, G); each side's view holds the records between the indirectly connected members plus
//! the side's first member observing every member of the other sides, and the side's members
//! have seen its gossip. Every member of a side that is the leader in its own view decides
//! (a member observed unreachable counts itself as a leader candidate, so a side can have
//! several).

use super::*;

const A: u16 = 1;
const B: u16 = 2;
const C: u16 = 3;
const D: u16 = 4;
const E: u16 = 5;
const F: u16 = 6;
const G: u16 = 7;

const KEEP_OLDEST: DowningStrategy = DowningStrategy::KeepOldest {
    down_if_alone: true,
    role: None,
};

/// Member `i` Up with Pekko's up-number (`TestAddresses`: E oldest).
fn pekko_member(i: u16) -> Member {
    let mut x = m(i, MemberStatus::Up);
    x.up_number = [5, 4, 3, 2, 1, 5, 6][usize::from(i - 1)];
    x
}

/// The membership state of `me` on side `this` of `all`, as Pekko's `strategy(side)` builds
/// it: the `indirect` records, `this[0]` observing every member of the other sides, seen by
/// `this`.
fn pekko_state(me: u16, all: &[u16], this: &[u16], indirect: &[(u16, u16)]) -> MembershipState {
    let mut g = Gossip::empty();
    for x in all.iter().map(|i| pekko_member(*i)) {
        g.members.insert(x.unique_address.clone(), x);
    }
    let others = all.iter().filter(|x| !this.contains(x));
    let records = indirect
        .iter()
        .copied()
        .chain(others.map(|o| (this[0], *o)));
    for (o, s) in records {
        g.overview.reachability = g.overview.reachability.unreachable(&n(o), &n(s));
    }
    g.overview.seen = this.iter().map(|i| n(*i)).collect();
    MembershipState::new(g, n(me))
}

/// Side `this` of `all` decides with `indirect` records and `strategy`: each of its
/// deciders downs no member that Akka's rules keep (`akka_downs` is Pekko's expectation).
/// Returns the members of `this` that no decider downs.
fn side_downs_at_most(
    strategy: &DowningStrategy,
    all: &[u16],
    this: &[u16],
    indirect: &[(u16, u16)],
    akka_downs: &[u16],
) -> BTreeSet<u16> {
    let akka = set(akka_downs);
    let mut survivors: BTreeSet<u16> = this.iter().copied().collect();
    let mut deciders = 0;
    for me in this {
        let st = pekko_state(*me, all, this, indirect);
        if !st.is_leader(&n(*me)) {
            continue;
        }
        deciders += 1;
        let (d, downed) = outcome(strategy, &SbrView::from_state(&st));
        assert!(
            downed.is_subset(&akka),
            "{} on side {this:?} with records {indirect:?}, decided by {me}: {d:?} downs {downed:?}; Akka downs only {akka:?}",
            strategy.name()
        );
        survivors.retain(|x| !downed.contains(x));
    }
    assert!(deciders > 0, "side {this:?} has a leader");
    survivors
}

/// At most one of the sides keeps running members.
fn one_side_at_most(survivors: &[BTreeSet<u16>]) {
    assert!(
        survivors.iter().filter(|s| !s.is_empty()).count() <= 1,
        "two sides keep running: {survivors:?}"
    );
}

// ------------------------------------------------------------------------ keep-majority

#[test]
fn pekko_keep_majority_indirectly_connected_a_b() {
    let all = [A, B];
    side_downs_at_most(&KEEP_MAJORITY, &all, &all, &[(A, B), (B, A)], &[A, B]);
}

#[test]
fn pekko_keep_majority_indirectly_connected_a_b_keeps_c() {
    let all = [A, B, C];
    let kept = side_downs_at_most(&KEEP_MAJORITY, &all, &all, &[(A, B), (B, A)], &[A, B]);
    assert!(kept.contains(&C));
}

#[test]
fn pekko_keep_majority_indirectly_connected_cycle_a_b_c() {
    let all = [A, B, C];
    let cycle = [(A, B), (B, C), (C, A)];
    side_downs_at_most(&KEEP_MAJORITY, &all, &all, &cycle, &[A, B, C]);
}

#[test]
fn pekko_keep_majority_indirectly_connected_two_pairs() {
    let all = [A, B, C, D];
    let pairs = [(A, D), (D, A), (B, C), (C, B)];
    side_downs_at_most(&KEEP_MAJORITY, &all, &all, &pairs, &[A, B, C, D]);
}

#[test]
fn pekko_keep_majority_indirectly_connected_cycle_keeps_d_e() {
    let all = [A, B, C, D, E];
    let cycle = [(A, B), (B, C), (C, A)];
    let kept = side_downs_at_most(&KEEP_MAJORITY, &all, &all, &cycle, &[A, B, C]);
    assert!(kept.contains(&D) && kept.contains(&E));
}

#[test]
fn pekko_keep_majority_two_groups_of_indirectly_connected_keep_a_d_g() {
    let all = [A, B, C, D, E, F, G];
    let pairs = [(B, C), (C, B), (E, F), (F, E)];
    let kept = side_downs_at_most(&KEEP_MAJORITY, &all, &all, &pairs, &[B, C, E, F]);
    assert!([A, D, G].iter().all(|x| kept.contains(x)), "{kept:?}");
}

#[test]
fn pekko_keep_majority_indirectly_connected_detected_via_seen() {
    let all = [A, B, C];
    side_downs_at_most(&KEEP_MAJORITY, &all, &all, &[(A, B), (A, C)], &[A, B, C]);
}

#[test]
fn pekko_keep_majority_indirectly_connected_detected_via_seen_keeps_e() {
    let all = [A, B, C, D, E];
    let records = [(B, C), (C, B), (A, D)];
    let kept = side_downs_at_most(&KEEP_MAJORITY, &all, &all, &records, &[A, B, C, D]);
    assert!(kept.contains(&E));
}

#[test]
fn pekko_keep_majority_indirectly_connected_combined_with_crashed() {
    // {(A, B), D, E} | {C}: C crashed.
    let all = [A, B, C, D, E];
    let kept = side_downs_at_most(
        &KEEP_MAJORITY,
        &all,
        &[A, B, D, E],
        &[(A, B), (B, A)],
        &[A, B, C],
    );
    assert!(kept.contains(&D) && kept.contains(&E));
}

#[test]
fn pekko_keep_majority_indirectly_connected_combined_with_clean_partition() {
    // {A, (B, C)} | {D, E}: the majority side keeps A.
    let all = [A, B, C, D, E];
    let bc = [(B, C), (C, B)];
    let one = side_downs_at_most(&KEEP_MAJORITY, &all, &[A, B, C], &bc, &[B, C, D, E]);
    assert!(one.contains(&A));
    // The other side, the clean partition first (no indirect records), or after.
    let two = side_downs_at_most(&KEEP_MAJORITY, &all, &[D, E], &[], &[D, E]);
    one_side_at_most(&[one.clone(), two]);
    let two = side_downs_at_most(&KEEP_MAJORITY, &all, &[D, E], &bc, &[B, C, D, E]);
    one_side_at_most(&[one, two]);
}

#[test]
fn pekko_keep_majority_indirectly_connected_on_the_minority_side_of_a_clean_partition() {
    // {A, (B, C)} | {D, E, F, G}.
    let all = [A, B, C, D, E, F, G];
    let bc = [(B, C), (C, B)];
    let one = side_downs_at_most(&KEEP_MAJORITY, &all, &[A, B, C], &bc, &[A, B, C]);
    for records in [&[][..], &bc[..]] {
        let two = side_downs_at_most(&KEEP_MAJORITY, &all, &[D, E, F, G], records, &[A, B, C]);
        assert_eq!(two, set(&[D, E, F, G]));
        one_side_at_most(&[one.clone(), two]);
    }
}

#[test]
fn pekko_keep_majority_indirectly_connected_on_the_majority_side_of_a_clean_partition() {
    // {A, B, C} | {(D, E), F, G}: F and G keep running.
    let all = [A, B, C, D, E, F, G];
    let de = [(D, E), (E, D)];
    let two = side_downs_at_most(&KEEP_MAJORITY, &all, &[D, E, F, G], &de, &[A, B, C, D, E]);
    assert!(two.contains(&F) && two.contains(&G), "{two:?}");
    let one = side_downs_at_most(&KEEP_MAJORITY, &all, &[A, B, C], &[], &[A, B, C]);
    one_side_at_most(&[one, two.clone()]);
    let one = side_downs_at_most(&KEEP_MAJORITY, &all, &[A, B, C], &de, &[A, B, C, D, E]);
    one_side_at_most(&[one, two]);
}

#[test]
fn pekko_keep_majority_indirectly_connected_spanning_a_clean_partition() {
    // {A, (B), C} | {D, (E, F), G}: D and G keep running.
    let all = [A, B, C, D, E, F, G];
    let cycle = [(B, E), (E, F), (F, B)];
    let akka = [A, B, C, E, F];
    let one = side_downs_at_most(&KEEP_MAJORITY, &all, &[A, B, C], &cycle, &akka);
    let two = side_downs_at_most(&KEEP_MAJORITY, &all, &[D, E, F, G], &cycle, &akka);
    assert!(two.contains(&D) && two.contains(&G), "{two:?}");
    one_side_at_most(&[one, two]);
}

#[test]
fn pekko_keep_majority_indirectly_connected_via_seen_combined_with_clean_partition() {
    // {A, B, C} | {(D, E), (F, G)}: Akka downs all.
    let all = [A, B, C, D, E, F, G];
    let one = side_downs_at_most(&KEEP_MAJORITY, &all, &[A, B, C], &[], &[A, B, C]);
    let records = [(D, E), (G, F)];
    let two = side_downs_at_most(&KEEP_MAJORITY, &all, &[D, E, F, G], &records, &all);
    one_side_at_most(&[one, two]);
}

#[test]
fn pekko_keep_majority_double_indirectly_connected_downs_all() {
    // {A, B, C} | {(D, E), (F, G)}, the indirect records before the clean partition: the
    // minority side's second decision is indirectly connected again (Akka downs all).
    let all = [A, B, C, D, E, F, G];
    let records = [(D, E), (G, F)];
    let one = side_downs_at_most(&KEEP_MAJORITY, &all, &[A, B, C], &records, &all);
    let two = side_downs_at_most(&KEEP_MAJORITY, &all, &[D, E, F, G], &records, &all);
    one_side_at_most(&[one, two]);
}

// ------------------------------------------------------------------------ keep-oldest

#[test]
fn pekko_keep_oldest_indirectly_connected_a_b_keeps_c() {
    let all = [A, B, C];
    let kept = side_downs_at_most(&KEEP_OLDEST, &all, &all, &[(A, B), (B, A)], &[A, B]);
    assert!(kept.contains(&C));
}

#[test]
fn pekko_keep_oldest_indirectly_connected_on_the_younger_side_of_a_clean_partition() {
    // {A, (B, C)} | {D, E, F, G}: E, the oldest, is on the second side.
    let all = [A, B, C, D, E, F, G];
    let bc = [(B, C), (C, B)];
    let one = side_downs_at_most(&KEEP_OLDEST, &all, &[A, B, C], &bc, &[A, B, C]);
    for records in [&[][..], &bc[..]] {
        let two = side_downs_at_most(&KEEP_OLDEST, &all, &[D, E, F, G], records, &[A, B, C]);
        assert_eq!(two, set(&[D, E, F, G]));
        one_side_at_most(&[one.clone(), two]);
    }
}

#[test]
fn pekko_keep_oldest_indirectly_connected_on_the_oldest_side_of_a_clean_partition() {
    // {A, B, C} | {(D, E), F, G}: the oldest E is indirectly connected; F and G keep running.
    let all = [A, B, C, D, E, F, G];
    let de = [(D, E), (E, D)];
    let two = side_downs_at_most(&KEEP_OLDEST, &all, &[D, E, F, G], &de, &[A, B, C, D, E]);
    assert!(two.contains(&F) && two.contains(&G), "{two:?}");
    let one = side_downs_at_most(&KEEP_OLDEST, &all, &[A, B, C], &[], &[A, B, C]);
    one_side_at_most(&[one, two.clone()]);
    let one = side_downs_at_most(&KEEP_OLDEST, &all, &[A, B, C], &de, &[A, B, C, D, E]);
    one_side_at_most(&[one, two]);
}

// ------------------------------------------------------------------------ multi-node specs

/// The view of `me` when every member of `seen` (the members its gossip reaches) observes
/// each member it cannot hear (`cut`, both ways).
fn observed(me: u16, all: &[u16], cut: &[(u16, u16)], seen: &[u16]) -> MembershipState {
    let mut records: Vec<(u16, u16)> = Vec::new();
    for (x, y) in cut {
        records.extend([(*x, *y), (*y, *x)]);
    }
    records.retain(|(o, _)| seen.contains(o));
    let mut g = Gossip::empty();
    for x in all.iter().map(|i| pekko_member(*i)) {
        g.members.insert(x.unique_address.clone(), x);
    }
    for (o, s) in records {
        g.overview.reachability = g.overview.reachability.unreachable(&n(o), &n(s));
    }
    g.overview.seen = seen.iter().map(|i| n(*i)).collect();
    MembershipState::new(g, n(me))
}

#[test]
fn pekko_multi_node_3_nodes_two_unreachable_but_talking_through_the_third() {
    // Node 1 keeps running; Akka downs 2 and 3.
    let st = observed(1, &[1, 2, 3], &[(2, 3)], &[1, 2, 3]);
    let (d, downed) = outcome(&KEEP_MAJORITY, &SbrView::from_state(&st));
    assert!(
        downed.is_subset(&set(&[2, 3])) && !downed.is_empty(),
        "{d:?} {downed:?}"
    );
}

#[test]
fn pekko_multi_node_5_nodes_indirectly_connected_combined_with_clean_partition() {
    // {1, 2, 3} | {4, 5}, then 2 and 3 cannot hear each other: 1 keeps running.
    let all = [1, 2, 3, 4, 5];
    let cut = [(1, 4), (1, 5), (2, 4), (2, 5), (3, 4), (3, 5), (2, 3)];
    let mut one = set(&[1, 2, 3]);
    for me in [1, 2, 3] {
        let st = observed(me, &all, &cut, &[1, 2, 3]);
        if st.is_leader(&n(me)) {
            let (d, downed) = outcome(&KEEP_MAJORITY, &SbrView::from_state(&st));
            assert!(
                downed.is_subset(&set(&[2, 3, 4, 5])),
                "{me}: {d:?} {downed:?}"
            );
            one.retain(|x| !downed.contains(x));
        }
    }
    assert!(one.contains(&1));
    let members: Vec<Member> = all.iter().map(|i| pekko_member(*i)).collect();
    let two = side(4, &members, &clean(&[4, 5], &[1, 2, 3]), &[4, 5]);
    assert_eq!(outcome(&KEEP_MAJORITY, &two).1, set(&[4, 5]));
}
