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
