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

// ---------------------------------------------------------------- admission

/// `base` with `made_up` added as Joining members, its version advanced past `base`'s by
/// each of them (what a forger would send).
fn with_made_up_joiners(base: &Gossip, made_up: impl IntoIterator<Item = UniqueAddress>) -> Gossip {
    let mut g = base.clone();
    for s in made_up {
        g.members.insert(
            s.clone(),
            Member::joining(s.clone(), BTreeSet::new(), "1.0.0"),
        );
        g.version = g.version.increment(&s);
    }
    g.overview.seen.clear();
    g
}

fn made_up_members(c: &ClusterCore, real: &[Address]) -> usize {
    c.latest_gossip()
        .members
        .values()
        .filter(|m| !real.contains(m.address()))
        .count()
}

#[test]
fn gossip_from_600_made_up_joining_nodes_admits_at_most_the_join_burst() {
    // The reported attack: 600 authenticated non-members each gossip a state that lists
    // them (and the other 599) as Joining. Before the admission check, each was taken as
    // its Join without the rate limit: all 600 were admitted.
    let (mut net, addrs) = form(3);
    let now = net.now;
    let to = net.nodes[&addrs[0]].self_unique_address().clone();
    let base = net.nodes[&addrs[0]].latest_gossip().clone();
    let g = with_made_up_joiners(&base, (0..600).map(stranger));
    for i in 0..600 {
        net.core(&addrs[0]).handle_message(
            now,
            &stranger(i),
            ClusterMessage::GossipEnvelope {
                to: to.clone(),
                gossip: g.clone(),
            },
        );
    }
    let c = &net.nodes[&addrs[0]];
    let admitted = made_up_members(c, &addrs);
    assert!(
        admitted <= JOIN_REQUEST_BURST as usize,
        "{admitted} made-up members admitted through gossip"
    );
    assert!(c.stats().join_requests_throttled >= 600 - JOIN_REQUEST_BURST);
    // The real members stay Up and keep being the cluster (without a downing strategy:
    // with keep-majority, 100 unreachable made-up joiners still outnumber three members as
    // "possibly Up" and the resolver downs all, as Akka's would; see the report of issue 24).
    net.run_for(5_000);
    for a in &addrs {
        let c = &net.nodes[a];
        assert_eq!(c.shutdown_reason(), None);
        assert!(made_up_members(c, &addrs) <= JOIN_REQUEST_BURST as usize);
        for b in &addrs {
            let m = c
                .latest_gossip()
                .members
                .values()
                .find(|m| m.address() == b);
            assert_eq!(
                m.map(|m| m.status),
                Some(MemberStatus::Up),
                "{b} seen from {a}"
            );
        }
    }
}

#[test]
fn a_non_members_gossip_adds_no_one_but_its_sender() {
    let (mut net, addrs) = form(3);
    let now = net.now;
    let to = net.nodes[&addrs[0]].self_unique_address().clone();
    let base = net.nodes[&addrs[0]].latest_gossip().clone();
    let g = with_made_up_joiners(&base, (0..600).map(stranger));
    net.core(&addrs[0]).handle_message(
        now,
        &stranger(0),
        ClusterMessage::GossipEnvelope { to, gossip: g },
    );
    let c = &net.nodes[&addrs[0]];
    let made_up: Vec<_> = c
        .latest_gossip()
        .members
        .keys()
        .filter(|m| !addrs.contains(&m.address))
        .cloned()
        .collect();
    assert_eq!(made_up, vec![stranger(0)]);
}

#[test]
fn a_joining_members_gossip_cannot_bring_in_hundreds_of_made_up_members() {
    // The attacker joins once (one admission, within the limit), then gossips as the
    // Joining member it now is a state with 600 more Joining members.
    let (mut net, addrs) = form(3);
    let now = net.now;
    let to = net.nodes[&addrs[0]].self_unique_address().clone();
    let attacker = stranger(0);
    net.core(&addrs[0]).handle_message(
        now,
        &attacker,
        ClusterMessage::Join {
            roles: BTreeSet::new(),
            app_version: "1.0.0".into(),
        },
    );
    assert!(net.nodes[&addrs[0]].latest_gossip().has_member(&attacker));
    let base = net.nodes[&addrs[0]].latest_gossip().clone();
    let g = with_made_up_joiners(&base, (1..601).map(stranger));
    net.core(&addrs[0]).handle_message(
        now,
        &attacker,
        ClusterMessage::GossipEnvelope { to, gossip: g },
    );
    let c = &net.nodes[&addrs[0]];
    assert_eq!(made_up_members(c, &addrs), 1, "only the attacker itself");
    assert!(c.stats().join_requests_throttled >= 1);
}

#[test]
fn a_joining_members_gossip_still_carries_the_few_joiners_another_node_admitted() {
    // Convergence: a Joining member's gossip legitimately holds members another node
    // admitted a moment ago; within the limit the receiver takes them.
    let (mut net, addrs) = form(3);
    let now = net.now;
    let to = net.nodes[&addrs[0]].self_unique_address().clone();
    let joiner = stranger(0);
    net.core(&addrs[0]).handle_message(
        now,
        &joiner,
        ClusterMessage::Join {
            roles: BTreeSet::new(),
            app_version: "1.0.0".into(),
        },
    );
    let base = net.nodes[&addrs[0]].latest_gossip().clone();
    let g = with_made_up_joiners(&base, (1..4).map(stranger));
    net.core(&addrs[0]).handle_message(
        now,
        &joiner,
        ClusterMessage::GossipEnvelope { to, gossip: g },
    );
    assert_eq!(made_up_members(&net.nodes[&addrs[0]], &addrs), 4);
}

#[test]
fn an_up_members_gossip_is_never_throttled() {
    // Admissions other nodes made reach every node whatever the local allowance: a flood
    // of InitJoins that used it up must not hold back the cluster's own joins.
    let (mut net, addrs) = form(3);
    let now = net.now;
    for i in 0..2000 {
        net.core(&addrs[0]).handle_message(
            now,
            &stranger(i),
            ClusterMessage::InitJoin { cluster: None },
        );
    }
    let d = net.start(4, 4007, ClusterSettings::fast());
    let now = net.now;
    net.core(&d).join(now, &addrs[1]).unwrap();
    assert!(net.run_until(10_000, |n| n.all_up(4)));
}
