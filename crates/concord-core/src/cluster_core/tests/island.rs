//! Island clusters: a restarted first seed node with a membership record does not form a
//! cluster of its own while it cannot reach the other seeds (issue 24), and still forms one
//! when they all answer that they are not in a cluster.

use super::*;
use crate::cluster_identity::{ClusterId, MembershipRecord};

/// Forms a, b, c (seeds a and b), crashes a and starts a new incarnation of it with
/// `record`, cut off from b and c, joining the seeds [a, b].
fn restart_first_seed_in_a_partition(record: Option<MembershipRecord>) -> (Net, Vec<Address>) {
    let (mut net, addrs) = form(3);
    let a = addrs[0].clone();
    net.crashed.insert(a.clone());
    net.run_for(300);
    net.start(1, 4242, ClusterSettings::fast());
    net.core(&a).set_membership_record(record);
    net.partition(
        std::slice::from_ref(&a),
        &[addrs[1].clone(), addrs[2].clone()],
    );
    let now = net.now;
    net.core(&a)
        .join_seed_nodes(now, &[a.clone(), addrs[1].clone()])
        .unwrap();
    (net, addrs)
}

#[test]
fn without_a_record_the_restarted_first_seed_forms_an_island_as_in_akka() {
    let (mut net, addrs) = restart_first_seed_in_a_partition(None);
    assert!(net.run_until(5_000, |n| n.nodes[&addrs[0]].is_initialized()));
    assert_eq!(net.nodes[&addrs[0]].latest_gossip().members.len(), 1);
}

#[test]
fn a_restarted_first_seed_with_a_record_keeps_trying_and_joins_after_the_partition_heals() {
    let record = MembershipRecord {
        cluster: Some(ClusterId(77)),
    };
    let (mut net, addrs) = restart_first_seed_in_a_partition(Some(record));
    let a = addrs[0].clone();
    // Many seed-node timeouts (fast: 500 ms) pass: it never joins itself.
    net.run_for(10_000);
    assert!(
        !net.nodes[&a].is_initialized(),
        "formed an island cluster despite its membership record"
    );
    assert!(net.nodes[&a].stats().self_joins_refused >= 1);
    net.heal();
    assert!(
        net.run_until(30_000, |n| n.all_up(3)),
        "did not join the original cluster after the heal: {:?}",
        net.status_everywhere(&a)
    );
    let g = net.nodes[&addrs[1]].latest_gossip();
    assert!(g.members.keys().any(|u| u.address == a && u.uid == 4242));
}

#[test]
fn a_first_seed_with_a_record_forms_a_cluster_when_every_other_seed_says_it_is_in_none() {
    // The whole cluster was stopped; both seeds restart with records. b answers InitJoin
    // with InitJoinNack (it is not in a cluster), so a forms the cluster and b joins it.
    let mut net = Net::new();
    let a = net.start(1, 11, ClusterSettings::fast());
    let b = net.start(2, 22, ClusterSettings::fast());
    let record = Some(MembershipRecord {
        cluster: Some(ClusterId(5)),
    });
    net.core(&a).set_membership_record(record);
    net.core(&b).set_membership_record(record);
    let now = net.now;
    for x in [&a, &b] {
        net.core(x)
            .join_seed_nodes(now, &[a.clone(), b.clone()])
            .unwrap();
    }
    assert!(net.run_until(20_000, |n| n.all_up(2)));
}

#[test]
fn a_record_does_not_stop_an_explicit_join_to_itself_or_a_single_self_seed() {
    let mut net = Net::new();
    let a = net.start(1, 11, ClusterSettings::fast());
    net.core(&a)
        .set_membership_record(Some(MembershipRecord::default()));
    let now = net.now;
    net.core(&a).join(now, &a.clone()).unwrap();
    assert!(net.nodes[&a].is_initialized());
    let b = net.start(2, 22, ClusterSettings::fast());
    net.core(&b)
        .set_membership_record(Some(MembershipRecord::default()));
    net.core(&b)
        .join_seed_nodes(now, std::slice::from_ref(&b))
        .unwrap();
    assert!(net.nodes[&b].is_initialized());
}

#[test]
fn every_member_learns_the_identity_chosen_by_the_founder() {
    let (net, addrs) = form(3);
    let ids: BTreeSet<_> = addrs
        .iter()
        .map(|a| net.nodes[a].cluster_identity())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids.into_iter().next().unwrap().expect("an identity");
    assert_eq!(id.reformed_from, None);
}

/// A restarted first seed with a record of the original cluster, cut off, is joined to
/// itself (as an operator may), which forms a cluster re-formed from the original; then
/// the partition heals.
fn reformed_island(resolution: crate::cluster_identity::IslandResolution) -> (Net, Vec<Address>) {
    let (net0, addrs) = form(3);
    let original = net0.nodes[&addrs[1]].cluster_identity().unwrap();
    let mut net = net0;
    let a = addrs[0].clone();
    net.crashed.insert(a.clone());
    net.run_for(300);
    let mut s = ClusterSettings::fast();
    s.island_resolution = resolution;
    net.start(1, 4242, s);
    net.core(&a).set_membership_record(Some(MembershipRecord {
        cluster: Some(original.id),
    }));
    net.partition(
        std::slice::from_ref(&a),
        &[addrs[1].clone(), addrs[2].clone()],
    );
    let now = net.now;
    net.core(&a)
        .join_seed_nodes(now, &[a.clone(), addrs[1].clone()])
        .unwrap();
    net.run_for(2_000);
    net.core(&a).join(now, &a.clone()).unwrap();
    let island = net.nodes[&a].cluster_identity().unwrap();
    assert_eq!(island.reformed_from, Some(original.id));
    net.heal();
    (net, addrs)
}

#[test]
fn an_island_reformed_from_a_running_cluster_stops_and_the_original_reports_it() {
    let (mut net, addrs) = reformed_island(crate::cluster_identity::IslandResolution::Rejoin);
    let a = addrs[0].clone();
    assert!(
        net.run_until(3 * ISLAND_PROBE_INTERVAL_MS, |n| {
            n.nodes[&a].shutdown_reason() == Some(ShutdownReason::IslandCluster)
        }),
        "the island did not stop"
    );
    let seen: Vec<_> = net.nodes[&addrs[1]].other_clusters().cloned().collect();
    assert_eq!(seen.len(), 1, "the original cluster reports the island");
    assert!(!seen[0].this_cluster_yields);
    assert!(net.nodes[&addrs[1]].shutdown_reason().is_none());
}

#[test]
fn with_island_resolution_report_the_island_only_reports() {
    let (mut net, addrs) = reformed_island(crate::cluster_identity::IslandResolution::Report);
    let a = addrs[0].clone();
    assert!(net.run_until(3 * ISLAND_PROBE_INTERVAL_MS, |n| {
        n.nodes[&a].other_clusters().any(|o| o.this_cluster_yields)
    }));
    assert!(net.nodes[&a].shutdown_reason().is_none());
}

#[test]
fn islands_that_cannot_prove_anything_report_each_other_and_forget_after_the_island_is_gone() {
    // No record: the restarted first seed forms an island by Akka's rule.
    let (mut net, addrs) = restart_first_seed_in_a_partition(None);
    let (a, b) = (addrs[0].clone(), addrs[1].clone());
    assert!(net.run_until(5_000, |n| n.nodes[&a].is_initialized()));
    net.heal();
    assert!(
        net.run_until(3 * ISLAND_PROBE_INTERVAL_MS, |n| {
            n.nodes[&a].other_clusters().count() == 1 && n.nodes[&b].other_clusters().count() == 1
        }),
        "both sides report the other cluster"
    );
    assert!(net.nodes[&a].shutdown_reason().is_none());
    assert!(!net.nodes[&a]
        .other_clusters()
        .any(|o| o.this_cluster_yields));
    // The island goes away: the report is forgotten.
    net.crashed.insert(a.clone());
    assert!(net.run_until(
        OTHER_CLUSTER_FORGOTTEN_AFTER_MS + 2 * ISLAND_PROBE_INTERVAL_MS,
        |n| n.nodes[&b].other_clusters().count() == 0
    ));
}

/// Two one-node clusters formed by joining themselves (as Cluster Bootstrap does), with no
/// seed nodes: `x` formed the original, `y` re-formed from it (its record names `x`'s
/// cluster). Neither has anything to probe yet.
fn two_bootstrapped_clusters() -> (Net, Address, Address) {
    let mut net = Net::new();
    let x = net.start(1, 11, ClusterSettings::fast());
    let now = net.now;
    net.core(&x).join(now, &x.clone()).unwrap();
    let original = net.nodes[&x].cluster_identity().unwrap();
    let y = net.start(2, 22, ClusterSettings::fast());
    net.core(&y).set_membership_record(Some(MembershipRecord {
        cluster: Some(original.id),
    }));
    net.core(&y).join(now, &y.clone()).unwrap();
    assert_eq!(
        net.nodes[&y].cluster_identity().unwrap().reformed_from,
        Some(original.id)
    );
    (net, x, y)
}

#[test]
fn without_seed_nodes_or_targets_nothing_is_probed_and_nothing_found() {
    let (mut net, x, y) = two_bootstrapped_clusters();
    net.run_for(3 * ISLAND_PROBE_INTERVAL_MS);
    assert_eq!(net.nodes[&x].other_clusters().count(), 0);
    assert_eq!(net.nodes[&y].other_clusters().count(), 0);
    assert!(net.nodes[&y].shutdown_reason().is_none());
}

#[test]
fn an_island_probe_target_of_the_original_makes_the_island_stop_and_is_reported() {
    let (mut net, x, y) = two_bootstrapped_clusters();
    // The original's runtime learned y's address from a contact point.
    net.core(&x).set_island_probe_targets([y.clone()]);
    assert!(
        net.run_until(2 * ISLAND_PROBE_INTERVAL_MS, |n| {
            n.nodes[&y].shutdown_reason() == Some(ShutdownReason::IslandCluster)
        }),
        "the island did not stop"
    );
    // y answered the probe (InitJoinAck from a target): x reports y's cluster.
    let seen: Vec<_> = net.nodes[&x].other_clusters().cloned().collect();
    assert_eq!(seen.len(), 1, "the original reports the island");
    assert_eq!(seen[0].seen_via.address, y);
    assert!(!seen[0].this_cluster_yields);
    assert!(net.nodes[&x].shutdown_reason().is_none());
}

#[test]
fn the_island_probing_a_target_in_the_original_stops_on_its_answer() {
    let (mut net, x, y) = two_bootstrapped_clusters();
    net.core(&y).set_island_probe_targets([x.clone()]);
    assert!(
        net.run_until(2 * ISLAND_PROBE_INTERVAL_MS, |n| {
            n.nodes[&y].shutdown_reason() == Some(ShutdownReason::IslandCluster)
        }),
        "the island did not stop on the original's InitJoinAck"
    );
    // x learned of y from its InitJoin.
    assert_eq!(net.nodes[&x].other_clusters().count(), 1);
}

#[test]
fn an_init_join_ack_from_an_address_that_is_no_longer_a_target_is_refused() {
    let (mut net, x, y) = two_bootstrapped_clusters();
    net.core(&y).set_island_probe_targets([x.clone()]);
    net.core(&y).set_island_probe_targets([]);
    let refused = net.nodes[&y].stats().refused_non_member;
    let now = net.now;
    let from = net.nodes[&x].self_unique_address().clone();
    let identity = net.nodes[&x].cluster_identity();
    net.core(&y).handle_message(
        now,
        &from,
        ClusterMessage::InitJoinAck { cluster: identity },
    );
    assert!(net.nodes[&y].shutdown_reason().is_none());
    assert_eq!(net.nodes[&y].stats().refused_non_member, refused + 1);
}

#[test]
fn island_probe_targets_are_bounded_replaced_and_exclude_self_members_and_other_systems() {
    let (mut net, addrs) = form(3);
    let a = addrs[0].clone();
    let strangers: Vec<Address> = (100..140).map(addr).collect();
    let given = [
        a.clone(),
        addrs[1].clone(),
        Address::new("other", "127.0.0.1", 9),
    ]
    .into_iter()
    .chain(strangers.iter().cloned())
    .chain(strangers.iter().cloned());
    net.core(&a).set_island_probe_targets(given);
    let kept: Vec<Address> = net.nodes[&a].island_probe_targets().cloned().collect();
    assert_eq!(kept.len(), MAX_ISLAND_PROBE_TARGETS);
    assert_eq!(kept, strangers[..MAX_ISLAND_PROBE_TARGETS].to_vec());
    // Each call replaces the set.
    net.core(&a)
        .set_island_probe_targets([strangers[30].clone()]);
    let kept: Vec<Address> = net.nodes[&a].island_probe_targets().cloned().collect();
    assert_eq!(kept, vec![strangers[30].clone()]);
    // The next probe goes to the target only (the seed nodes are members).
    let now = net.now + ISLAND_PROBE_INTERVAL_MS + 1;
    let core = net.core(&a);
    while core.poll_transmit().is_some() {}
    core.handle_timeout(now);
    let probed: Vec<Address> = std::iter::from_fn(|| core.poll_transmit())
        .filter(|t| matches!(t.message, ClusterMessage::InitJoin { .. }))
        .map(|t| t.to)
        .collect();
    assert_eq!(probed, vec![strangers[30].clone()]);
}
