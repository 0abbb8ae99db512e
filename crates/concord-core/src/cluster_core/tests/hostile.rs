//! Hostile input: messages a stranger (or a member gone wrong) sends must not change
//! membership. The transport authenticates peers; these tests check what the protocol
//! itself refuses whatever the transport let through.

use super::*;
use crate::vector_clock::MAX_VECTOR_CLOCK_JUMP;

fn stranger(i: u16) -> UniqueAddress {
    UniqueAddress::new(
        Address::new("sys", "10.9.9.9", 4000 + i),
        666 + u64::from(i),
    )
}

fn members_and_statuses(c: &ClusterCore) -> Vec<(UniqueAddress, MemberStatus)> {
    c.latest_gossip()
        .members
        .values()
        .map(|m| (m.unique_address.clone(), m.status))
        .collect()
}

#[test]
fn a_tombstone_for_the_receiver_from_a_non_member_changes_nothing() {
    let (mut net, addrs) = form(3);
    let now = net.now;
    let victim = net.nodes[&addrs[1]].self_unique_address().clone();
    let mut g = net.nodes[&addrs[1]].latest_gossip().clone();
    g.tombstones.insert(victim.clone(), now);
    g.members.remove(&victim);
    let before = members_and_statuses(&net.nodes[&addrs[1]]);
    net.core(&addrs[1]).handle_message(
        now,
        &stranger(1),
        ClusterMessage::GossipEnvelope {
            to: victim,
            gossip: g,
        },
    );
    let c = &net.nodes[&addrs[1]];
    assert_eq!(c.shutdown_reason(), None);
    assert_eq!(members_and_statuses(c), before);
    assert_eq!(c.stats().refused_non_member, 1);
    net.run_for(2000);
    assert!(net.all_up(3));
}

#[test]
fn forged_gossip_from_a_non_member_downs_nobody() {
    let (mut net, addrs) = form(3);
    let now = net.now;
    let to = net.nodes[&addrs[0]].self_unique_address().clone();
    let target = net.nodes[&addrs[2]].self_unique_address().clone();
    let mut g = net.nodes[&addrs[0]].latest_gossip().clone();
    let m = g.members[&target].with_status(MemberStatus::Down);
    g.members.insert(target.clone(), m);
    g.version = g.version.increment(&stranger(1)).increment(&to);
    net.core(&addrs[0]).handle_message(
        now,
        &stranger(1),
        ClusterMessage::GossipEnvelope { to, gossip: g },
    );
    net.run_for(3000);
    assert!(net.all_up(3), "the forged Down must not spread");
}

#[test]
fn a_counter_far_ahead_is_refused_and_later_changes_stay_visible() {
    let (mut net, addrs) = form(3);
    let now = net.now;
    let (sender, receiver) = (addrs[2].clone(), addrs[1].clone());
    let from = net.nodes[&sender].self_unique_address().clone();
    let to = net.nodes[&receiver].self_unique_address().clone();
    let leader = net.nodes[&addrs[0]].self_unique_address().clone();
    let mut g = net.nodes[&receiver].latest_gossip().clone();
    let entries: Vec<(UniqueAddress, u64)> = g
        .version
        .entries()
        .map(|(k, v)| (k.clone(), v))
        .chain([(leader.clone(), u64::MAX)])
        .collect();
    g.version = crate::vector_clock::VectorClock::from_entries(entries);
    let before = net.nodes[&receiver].latest_gossip().clone();
    net.core(&receiver).handle_message(
        now,
        &from,
        ClusterMessage::GossipEnvelope { to, gossip: g },
    );
    assert_eq!(net.nodes[&receiver].latest_gossip(), &before);
    assert_eq!(net.nodes[&receiver].stats().implausible_clocks, 1);
    // A jump within the bound is taken as usual (it is only implausible beyond it).
    assert!(before
        .version
        .implausible_jump(&before.version, MAX_VECTOR_CLOCK_JUMP)
        .is_none());
    // The leader's next change (a join) reaches everyone.
    let d = net.start(4, 4007, ClusterSettings::fast());
    let now = net.now;
    net.core(&d).join(now, &addrs[0]).unwrap();
    assert!(net.run_until(10_000, |n| n.all_up(4)));
}

#[test]
fn a_flood_of_init_joins_from_made_up_addresses_is_answered_only_within_the_rate_limit() {
    let (mut net, addrs) = form(2);
    let now = net.now;
    for i in 0..2000 {
        net.core(&addrs[0]).handle_message(
            now,
            &stranger(i),
            ClusterMessage::InitJoin { cluster: None },
        );
    }
    let c = net.core(&addrs[0]);
    let mut replies = 0;
    while let Some(t) = c.poll_transmit() {
        if matches!(t.message, ClusterMessage::InitJoinAck { .. }) {
            replies += 1;
        }
    }
    assert_eq!(replies, JOIN_REQUEST_BURST as usize);
    assert_eq!(c.stats().join_requests_throttled, 2000 - JOIN_REQUEST_BURST);
    // Heartbeats from strangers draw on the same allowance; members are always answered.
    let member = net.nodes[&addrs[1]].self_unique_address().clone();
    let c = net.core(&addrs[0]);
    c.handle_message(
        now,
        &stranger(1),
        ClusterMessage::Heartbeat {
            sequence_nr: 1,
            creation_time_ms: now,
        },
    );
    c.handle_message(
        now,
        &member,
        ClusterMessage::Heartbeat {
            sequence_nr: 1,
            creation_time_ms: now,
        },
    );
    let rsp: Vec<_> = std::iter::from_fn(|| c.poll_transmit())
        .filter(|t| matches!(t.message, ClusterMessage::HeartbeatRsp { .. }))
        .map(|t| t.to)
        .collect();
    assert_eq!(rsp, vec![addrs[1].clone()]);
    // The allowance refills with time.
    let later = now + 1000;
    c.handle_message(
        later,
        &stranger(7),
        ClusterMessage::InitJoin { cluster: None },
    );
    assert!(std::iter::from_fn(|| c.poll_transmit())
        .any(|t| matches!(t.message, ClusterMessage::InitJoinAck { .. })));
}

#[test]
fn an_init_join_ack_from_a_node_that_is_not_a_seed_is_ignored() {
    let mut net = Net::new();
    let a = net.start(1, 1, ClusterSettings::fast());
    let now = net.now;
    net.core(&a)
        .join_seed_nodes(now, &[addr(2), addr(3)])
        .unwrap();
    while net.core(&a).poll_transmit().is_some() {}
    net.core(&a).handle_message(
        now,
        &stranger(1),
        ClusterMessage::InitJoinAck { cluster: None },
    );
    let c = net.core(&a);
    assert!(
        std::iter::from_fn(|| c.poll_transmit()).all(|t| t.to != stranger(1).address),
        "no Join goes to the stranger"
    );
    assert_eq!(c.stats().refused_non_member, 1);
}
