//! Failure detection across changes of the heartbeat ring.

use super::*;
use crate::heartbeat_ring::HeartbeatNodeRing;
use crate::reachability::ReachabilityStatus;

/// Seed 7143: a crashed member seen unreachable only by observers that are then downed
/// (and gone) must be detected by a live member, and stay unreachable. Before the fix the
/// ring counted it unreachable from the raw records (Down observers included), so no live
/// member took it as a receiver, while the view everything else acts on (records of Down
/// observers left out) counted it reachable: a crashed member reachable forever, no
/// convergence and nothing for the resolver to act on.
#[test]
fn a_crashed_member_seen_unreachable_only_by_downed_observers_is_detected_by_a_live_one() {
    let mut settings = ClusterSettings::fast();
    settings.failure_detector.monitored_by_nr_of_members = 2;
    settings.downing = None;
    let mut net = Net::new();
    let addrs: Vec<Address> = (1..=5)
        .map(|i| net.start(i, u64::from(i) * 1000 + 7, settings.clone()))
        .collect();
    let now = net.now;
    for a in &addrs {
        net.core(a).join_seed_nodes(now, &addrs[..1]).unwrap();
    }
    assert!(
        net.run_until(20_000, |x| x.all_up(5)),
        "cluster did not form"
    );
    let uniques: Vec<UniqueAddress> = addrs
        .iter()
        .map(|a| net.nodes[a].self_unique_address().clone())
        .collect();
    let unique_of = |a: &Address| uniques.iter().find(|u| &u.address == a).unwrap().clone();

    // The victim and the two members that monitor it (k = 2 of 5: the others do not).
    let victim = addrs[4].clone();
    let victim_u = unique_of(&victim);
    let ring_of = |me: &UniqueAddress| {
        HeartbeatNodeRing::new(me.clone(), uniques.clone(), BTreeSet::new(), 2)
    };
    let observers: Vec<Address> = uniques
        .iter()
        .filter(|u| ring_of(u).my_receivers().contains(&victim_u))
        .map(|u| u.address.clone())
        .collect();
    assert_eq!(observers.len(), 2);
    let live: Vec<Address> = addrs
        .iter()
        .filter(|a| **a != victim && !observers.contains(a))
        .cloned()
        .collect();
    assert!(live
        .iter()
        .all(|a| !net.nodes[a].heartbeat_receivers().contains(&victim_u)));

    net.crashed.insert(victim.clone());
    assert!(
        net.run_until(10_000, |n| live.iter().all(|a| {
            let g = n.nodes[a].latest_gossip();
            observers.iter().all(|o| {
                g.overview
                    .reachability
                    .status_from(&unique_of(o), &victim_u)
                    == ReachabilityStatus::Unreachable
            })
        })),
        "the observers see the victim unreachable, and the others know it"
    );
    // The observers go away and are downed.
    for o in &observers {
        net.crashed.insert(o.clone());
    }
    for o in &observers {
        let now = net.now;
        net.core(&live[0]).down(now, o).unwrap();
    }
    let victim_unreachable_everywhere = |n: &Net| {
        live.iter().all(|a| {
            let c = &n.nodes[a];
            c.latest_gossip()
                .members
                .values()
                .filter(|m| observers.contains(m.address()))
                .all(|m| m.status == MemberStatus::Down)
                && !c
                    .membership_state()
                    .reachability_excluding_downed_observers()
                    .is_reachable(&victim_u)
        })
    };
    assert!(
        net.run_until(10_000, victim_unreachable_everywhere),
        "a live member detects the crashed victim"
    );
    assert!(
        !net.run_until(10_000, |n| !victim_unreachable_everywhere(n)),
        "and it stays unreachable (no flapping)"
    );
}
