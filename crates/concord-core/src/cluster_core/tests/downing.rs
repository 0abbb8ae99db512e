//! Downing through the split brain resolver, and removed nodes that come back.

use super::*;

fn sbr_settings(strategy: crate::split_brain_resolver::DowningStrategy) -> ClusterSettings {
    let mut s = ClusterSettings::fast();
    s.downing = Some(crate::split_brain_resolver::SbrSettings {
        strategy,
        stable_after_ms: 1000,
        down_all_when_unstable_ms: Some(4000),
        rules: crate::split_brain_resolver::SbrRules::Concord,
    });
    s
}

fn form_with(n: u16, settings: ClusterSettings) -> (Net, Vec<Address>) {
    let mut net = Net::new();
    let addrs: Vec<Address> = (1..=n)
        .map(|i| net.start(i, u64::from(i) * 1000 + 7, settings.clone()))
        .collect();
    let now = net.now;
    for a in &addrs {
        net.core(a).join_seed_nodes(now, &addrs[..1]).unwrap();
    }
    assert!(net.run_until(20_000, |x| x.all_up(n as usize)));
    (net, addrs)
}

#[test]
fn keep_majority_downs_the_minority_of_a_3_2_partition() {
    let (mut net, addrs) = form_with(
        5,
        sbr_settings(crate::split_brain_resolver::DowningStrategy::KeepMajority { role: None }),
    );
    net.partition(&addrs[..3], &addrs[3..]);
    assert!(
        net.run_until(20_000, |x| addrs[3..]
            .iter()
            .all(|a| x.nodes[a].shutdown_reason().is_some())),
        "minority shuts down"
    );
    assert!(addrs[3..]
        .iter()
        .all(|a| net.nodes[a].shutdown_reason() == Some(ShutdownReason::Downed)));
    assert!(
        net.run_until(20_000, |x| x.all_up(3)),
        "majority removes the minority and converges"
    );
    assert!(addrs[..3]
        .iter()
        .all(|a| net.nodes[a].shutdown_reason().is_none()));
}

#[test]
fn sbr_downs_a_crashed_node_without_manual_down() {
    let (mut net, addrs) = form_with(
        4,
        sbr_settings(crate::split_brain_resolver::DowningStrategy::KeepMajority { role: None }),
    );
    net.crashed.insert(addrs[3].clone());
    assert!(net.run_until(20_000, |x| x.all_up(3)));
}

#[test]
fn downing_provider_none_never_downs() {
    let mut s = ClusterSettings::fast();
    s.downing = None;
    let (mut net, addrs) = form_with(3, s);
    net.crashed.insert(addrs[2].clone());
    net.run_for(10_000);
    assert!(net.nodes[&addrs[0]]
        .latest_gossip()
        .members
        .values()
        .all(|m| m.status == MemberStatus::Up));
}

#[test]
fn a_removed_node_that_comes_back_learns_its_removal_from_the_gossip_it_sends() {
    let (mut net, addrs) = form(3);
    let frozen = addrs[2].clone();
    // Frozen (a long pause): the others down and remove it.
    net.crashed.insert(frozen.clone());
    let now = net.now;
    net.core(&addrs[0]).down(now, &frozen).unwrap();
    assert!(net.run_until(10_000, |n| n.live().all(|(a, c)| a == &frozen
        || !c
            .latest_gossip()
            .members
            .keys()
            .any(|m| m.address == frozen))));
    // It wakes up still believing it is Up; its first gossip is answered with the gossip
    // that holds its tombstone, and it shuts down instead of acting on its old view.
    net.crashed.remove(&frozen);
    assert!(
        net.run_until(5_000, |n| n.nodes[&frozen].shutdown_reason().is_some()),
        "the returning node learns that it was removed"
    );
}
