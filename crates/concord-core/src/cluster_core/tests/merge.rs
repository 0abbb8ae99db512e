//! Merging concurrent gossip: what a merge takes from the other side stays, whatever the
//! vector clock entries the merge prunes.

use super::*;
use crate::vector_clock::VectorClock;

fn node(i: u16) -> UniqueAddress {
    UniqueAddress::new(addr(i), u64::from(i) * 1000 + 7)
}

fn up(i: u16, up_number: u32) -> Member {
    Member::joining(node(i), BTreeSet::new(), "1.0.0").with_up(up_number)
}

fn status_of(c: &ClusterCore, n: &UniqueAddress) -> Option<MemberStatus> {
    c.latest_gossip().member(n).map(|m| m.status)
}

/// Seed 491 of `concord-sim --seeds 1000`, reduced. The cluster (c, b) removed x while x
/// was cut off; x, still running with its old view, admitted the restarted node j and moved
/// it to WeaklyUp (x's own counter). The cluster admitted j too (Joining). b merges j's
/// gossip (j WeaklyUp, x's entry in its version) with its own: the merge prunes x's entry,
/// which left b's very version on a state with j WeaklyUp. The cluster's next state (c's
/// counter incremented, j Joining) was then After it and replaced it: j went back from
/// WeaklyUp to Joining in b's view (and in j's own, which took b's state the same way).
#[test]
fn a_merge_that_prunes_a_removed_nodes_changes_keeps_them_against_the_next_state() {
    let (c, b, j, x) = (node(1), node(2), node(3), node(4));
    let now = 1_000_000;
    // The cluster's state: c (the leader: lowest address), b, j Joining; x removed.
    let mut cluster = Gossip::single(up(1, 1));
    cluster.members.insert(b.clone(), up(2, 2));
    cluster.members.insert(
        j.clone(),
        Member::joining(j.clone(), BTreeSet::new(), "1.0.0"),
    );
    cluster.tombstones.insert(x.clone(), now - 5_000);
    cluster.version = VectorClock::from_entries([(b.clone(), 3), (c.clone(), 1)]);
    let mut core = ClusterCore::new(
        b.clone(),
        BTreeSet::new(),
        "1.0.0",
        ClusterSettings::fast(),
        now,
        7,
    );
    assert!(core.adopt_initial_state(now, cluster.clone()));

    // x's view as j got it: everyone Up, j WeaklyUp, versioned by x alone.
    let mut island = Gossip::single(up(4, 1));
    for (n, m) in [(c.clone(), up(1, 2)), (b.clone(), up(2, 3))] {
        island.members.insert(n, m);
    }
    island.members.insert(
        j.clone(),
        Member::joining(j.clone(), BTreeSet::new(), "1.0.0").with_status(MemberStatus::WeaklyUp),
    );
    island.version = VectorClock::from_entries([(x.clone(), 12)]);
    core.handle_message(
        now,
        &j,
        ClusterMessage::GossipEnvelope {
            to: b.clone(),
            gossip: island,
        },
    );
    assert_eq!(status_of(&core, &j), Some(MemberStatus::WeaklyUp));
    assert!(!core.latest_gossip().has_member(&x), "x stays removed");

    // c's next state: the cluster's, one change of c's later, j still Joining there.
    let mut next = cluster.clone();
    next.version = next.version.increment(&c);
    next.overview.seen = BTreeSet::from([c.clone()]);
    core.handle_message(
        now + 10,
        &c,
        ClusterMessage::GossipEnvelope {
            to: b.clone(),
            gossip: next,
        },
    );
    assert_eq!(
        status_of(&core, &j),
        Some(MemberStatus::WeaklyUp),
        "j's status must not go back from WeaklyUp to Joining"
    );
}
