//! Joining: the seed-node process, explicit joins and their retries, lost Welcomes, and a
//! restarted node joining again.

use super::*;

#[test]
fn seed_nodes_form_one_cluster_with_one_leader() {
    let (net, addrs) = form(5);
    let leaders: BTreeSet<_> = net
        .live()
        .map(|(_, c)| c.membership_state().leader().cloned())
        .collect();
    assert_eq!(leaders.len(), 1);
    assert_eq!(
        leaders.into_iter().next().unwrap().unwrap().address,
        addrs[0],
        "leader is the lowest address"
    );
    // Every node got MemberUp for every member.
    for a in &addrs {
        let ups = net.events[a]
            .iter()
            .filter(|e| matches!(e, ClusterEvent::MemberUp(_)))
            .count();
        assert!(ups >= 5, "{a} saw {ups} MemberUp");
    }
    // Up-numbers are distinct; the first seed is the oldest.
    let c = &net.nodes[&addrs[2]];
    let ups: BTreeSet<u32> = c
        .latest_gossip()
        .members
        .values()
        .map(|m| m.up_number)
        .collect();
    assert_eq!(ups.len(), 5);
    assert_eq!(c.membership_state().oldest().unwrap().address(), &addrs[0]);
}

#[test]
fn first_seed_forms_the_cluster_alone_after_seed_node_timeout() {
    let mut net = Net::new();
    let a = net.start(1, 11, ClusterSettings::fast());
    let now = net.now;
    // The second seed never starts: no answer at all.
    net.core(&a)
        .join_seed_nodes(now, &[a.clone(), addr(9)])
        .unwrap();
    net.run_for(500);
    assert!(
        !net.nodes[&a].is_initialized(),
        "waits for seed-node-timeout"
    );
    assert!(net.run_until(3000, |n| n.all_up(1)));
}

#[test]
fn non_first_seed_never_forms_its_own_cluster() {
    let mut net = Net::new();
    let b = net.start(2, 22, ClusterSettings::fast());
    let now = net.now;
    net.core(&b)
        .join_seed_nodes(now, &[addr(1), b.clone()])
        .unwrap();
    net.run_for(10_000);
    assert!(!net.nodes[&b].is_initialized());
}

#[test]
fn a_join_lost_with_the_member_that_welcomed_it_is_learned_from_the_joiners_gossip() {
    let (mut net, addrs) = form(3);
    let (a, b, c) = (addrs[0].clone(), addrs[1].clone(), addrs[2].clone());
    // c welcomes d, but c's gossip about it never reaches a or b, and then c crashes.
    let d = net.start(4, 4007, ClusterSettings::fast());
    net.partition(&[c.clone(), d.clone()], &[a.clone(), b.clone()]);
    let now = net.now;
    net.core(&d).join(now, &c).unwrap();
    net.run_for(300);
    assert!(net.nodes[&d].is_initialized(), "d was welcomed by c");
    assert_eq!(net.status_everywhere(&d)[..2], [None, None]);
    net.crashed.insert(c.clone());
    net.heal();
    // d gossips as a Joining member a and b never heard of; they take it as its Join, the
    // SBR downs the crashed c, and d becomes Up.
    assert!(
        net.run_until(60_000, |n| n.all_up(3)),
        "d stayed in limbo: {:?}",
        net.status_everywhere(&d)
    );
}

#[test]
fn a_joiner_whose_welcome_was_lost_is_welcomed_by_the_clusters_gossip() {
    let (mut net, addrs) = form(3);
    let (a, b, c) = (addrs[0].clone(), addrs[1].clone(), addrs[2].clone());
    // d joins through c; c adds it, but nothing reaches d (the Welcome is lost), and then
    // c crashes: d's retried Joins go to c only.
    let d = net.start(4, 4007, ClusterSettings::fast());
    for x in [&a, &b, &c] {
        net.cut.insert((x.clone(), d.clone()));
    }
    let now = net.now;
    net.core(&d).join(now, &c).unwrap();
    net.run_for(300);
    assert!(!net.nodes[&d].is_initialized(), "the Welcome was lost");
    net.crashed.insert(c.clone());
    net.heal();
    // a and b know d from c's gossip; their gossip to d welcomes it, the SBR downs c, and
    // d becomes Up.
    assert!(
        net.run_until(60_000, |n| n.all_up(3)),
        "d stayed out: {:?}",
        net.status_everywhere(&d)
    );
    assert!(net.nodes[&a]
        .latest_gossip()
        .has_member(net.nodes[&d].self_unique_address()));
    assert!(net.nodes[&b].is_initialized());
}

#[test]
fn gossip_of_another_cluster_does_not_welcome_a_joiner() {
    let (mut net, addrs) = form(2);
    // e asks 9 (nobody) to join; gossip from the formed cluster, which does not hold e,
    // changes nothing.
    let e = net.start(5, 5005, ClusterSettings::fast());
    let now = net.now;
    net.core(&e).join(now, &addr(9)).unwrap();
    let gossip = net.nodes[&addrs[0]].latest_gossip().clone();
    let from = net.nodes[&addrs[0]].self_unique_address().clone();
    let to = net.nodes[&e].self_unique_address().clone();
    net.core(&e)
        .handle_message(now, &from, ClusterMessage::GossipEnvelope { to, gossip });
    assert!(!net.nodes[&e].is_initialized());
}

#[test]
fn explicit_join_is_retried_until_welcomed() {
    let mut net = Net::new();
    let b = net.start(2, 22, ClusterSettings::fast());
    let now = net.now;
    net.core(&b).join(now, &addr(1)).unwrap();
    net.run_for(3000);
    let a = net.start(1, 11, ClusterSettings::fast());
    let now = net.now;
    net.core(&a).join(now, &a).unwrap();
    assert!(
        net.run_until(10_000, |n| n.all_up(2)),
        "retry-unsuccessful-join-after resends Join"
    );
}

#[test]
fn restart_with_new_uid_downs_the_old_incarnation_and_joins() {
    let (mut net, addrs) = form(3);
    let c = addrs[2].clone();
    let old_uid = net.nodes[&c].self_unique_address().uid;
    net.crashed.insert(c.clone());
    net.run_for(300);
    net.start(3, 999, ClusterSettings::fast());
    let now = net.now;
    net.core(&c)
        .join_seed_nodes(now, &[addrs[0].clone(), addrs[1].clone()])
        .unwrap();
    assert!(
        net.run_until(20_000, |n| n.all_up(3)),
        "new incarnation joins without manual down"
    );
    let g = net.nodes[&addrs[0]].latest_gossip();
    assert!(g.members.keys().any(|u| u.address == c && u.uid == 999));
    assert!(!g.members.keys().any(|u| u.uid == old_uid));
    assert!(g.tombstones.keys().any(|u| u.uid == old_uid));
}

#[test]
fn shutdown_after_unsuccessful_join_seed_nodes() {
    let mut s = ClusterSettings::fast();
    s.shutdown_after_unsuccessful_join_seed_nodes_ms = Some(2000);
    let mut net = Net::new();
    let b = net.start(2, 2, s);
    let now = net.now;
    net.core(&b).join_seed_nodes(now, &[addr(1)]).unwrap();
    net.run_for(2500);
    assert_eq!(
        net.nodes[&b].shutdown_reason(),
        Some(ShutdownReason::JoinSeedNodesTimeout)
    );
}
