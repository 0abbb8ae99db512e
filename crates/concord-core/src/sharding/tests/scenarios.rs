//! The spec's scenarios step by step, rebalance on join, graceful leave, coordinator
//! fail-over, passivation, remember entities, bounded buffers.

use std::collections::BTreeMap;

use super::*;
use crate::sharding::{shard_id, ShardingSettings};

/// Sends `count` numbered messages from each origin to each entity, interleaved.
struct Streams {
    /// (origin, entity) → next sequence number.
    next: BTreeMap<(UniqueAddress, String), u32>,
}

impl Streams {
    fn new() -> Self {
        Streams {
            next: BTreeMap::new(),
        }
    }

    fn send(&mut self, c: &mut TestCluster, origin: &UniqueAddress, entity: &str) {
        let k = (origin.clone(), entity.to_string());
        let seq = self.next.entry(k).or_insert(0);
        let payload = format!("{}-{}", origin.address.port, seq);
        *seq += 1;
        c.tell(origin, entity, &payload, None);
    }

    /// Every entity received every message of every origin once, in send order.
    fn check(&self, c: &TestCluster) {
        let mut by_entity: BTreeMap<&str, BTreeMap<u16, u32>> = BTreeMap::new();
        for ((o, e), n) in &self.next {
            by_entity
                .entry(e.as_str())
                .or_default()
                .insert(o.address.port, *n);
        }
        for (entity, origins) in by_entity {
            let got = c.received(entity);
            let mut per_origin: BTreeMap<u16, Vec<u32>> = BTreeMap::new();
            for p in &got {
                let (o, s) = p.split_once('-').expect("payload");
                per_origin
                    .entry(o.parse().unwrap())
                    .or_default()
                    .push(s.parse().unwrap());
            }
            for (o, n) in origins {
                let seqs = per_origin.remove(&o).unwrap_or_default();
                let want: Vec<u32> = (0..n).collect();
                assert_eq!(
                    seqs, want,
                    "entity {entity}, origin {o}: once each, in order"
                );
            }
        }
    }
}

/// An entity id in shard `shard` (of 100).
fn entity_in_shard(shard: u32, k: u32) -> String {
    (0..)
        .map(|i| format!("e{shard}-{k}-{i}"))
        .find(|e| shard_id(e, 100) == shard.to_string())
        .expect("some id")
}

#[test]
fn scenario_1_unknown_shard_of_the_local_region() {
    let mut c = TestCluster::new(1, fast_settings());
    let n1 = c.add_node(1);
    c.advance(200);
    assert_eq!(
        c.coordinator(),
        Some(n1.clone()),
        "the oldest runs the coordinator"
    );
    // 1-2: M1 to SR1 for an unknown shard S1; SR1 asks the coordinator.
    c.tell(&n1, "e1", "m1", None);
    c.settle();
    // 3-5: SC answers SR1; SR1 creates S1; S1 creates E1 and delivers M1.
    assert_eq!(c.received("e1"), vec!["m1"]);
    assert_eq!(c.host_of("e1"), Some(n1.clone()));
    let asked = c.machine(&n1).stats().shard_home_requests;
    assert_eq!(asked, 1);
    // 6: later messages for S1 are handled without the coordinator.
    c.tell(&n1, "e1", "m2", None);
    c.settle();
    assert_eq!(c.received("e1"), vec!["m1", "m2"]);
    assert_eq!(c.machine(&n1).stats().shard_home_requests, asked);
    let s1 = shard_id(&"e1".to_string(), 100);
    assert_eq!(c.machine(&n1).cached_home(&s1), Some(&n1));
}

#[test]
fn scenario_2_unknown_shard_of_a_remote_region() {
    let mut c = TestCluster::new(2, fast_settings());
    let n1 = c.add_node(1);
    let n2 = c.add_node(2);
    c.advance(300);
    // One shard on SR1 first, so that the least-shard strategy places the next on SR2.
    c.tell(&n1, &entity_in_shard(1, 0), "x", None);
    c.settle();
    let e2 = entity_in_shard(2, 0);
    // 1-2: M2 to SR1, mapped to S2, unknown: SR1 asks the coordinator and buffers.
    c.tell(&n1, &e2, "m2", None);
    c.settle();
    // 3-4: SC answers SR2; SR1 sends the buffered M2 to SR2; 6: SR2 creates S2 and E2.
    assert_eq!(c.host_of(&e2), Some(n2.clone()));
    assert_eq!(c.received(&e2), vec!["m2"]);
    let s2 = shard_id(&e2, 100);
    assert_eq!(c.machine(&n1).cached_home(&s2), Some(&n2));
    // 5: later messages go from SR1 straight to SR2.
    let asked = c.machine(&n1).stats().shard_home_requests;
    for i in 0..5 {
        c.tell(&n1, &e2, &format!("m{i}"), None);
    }
    c.settle();
    assert_eq!(c.machine(&n1).stats().shard_home_requests, asked);
    assert_eq!(c.received(&e2).len(), 6);
}

#[test]
fn ask_is_answered_from_the_remote_entity() {
    let mut c = TestCluster::new(3, fast_settings());
    let n1 = c.add_node(1);
    let n2 = c.add_node(2);
    c.advance(300);
    c.tell(&n1, &entity_in_shard(1, 0), "x", None);
    c.settle();
    let e = entity_in_shard(2, 0);
    c.tell(&n1, &e, "q", Some(42));
    c.settle();
    let reply = c.nodes[&n1].replies.get(&42).cloned();
    assert_eq!(
        reply,
        Some(Ok(format!("{}:1", n2.address.port).into_bytes()))
    );
}

/// Many origins keep sending to many entities while shards move.
fn stream_while(
    c: &mut TestCluster,
    s: &mut Streams,
    origins: &[UniqueAddress],
    entities: &[String],
    rounds: usize,
) {
    for _ in 0..rounds {
        for o in origins {
            if !c.nodes.contains_key(o) {
                continue;
            }
            for e in entities {
                s.send(c, o, e);
            }
        }
        c.advance_slowly(30, 40);
    }
}

#[test]
fn rebalance_on_join_moves_shards_with_state_in_order() {
    for seed in 0..6 {
        let mut c = TestCluster::new(seed, fast_settings());
        let n1 = c.add_node(1);
        let n2 = c.add_node(2);
        c.advance(300);
        let entities: Vec<String> = (0..30).map(|i| entity_in_shard(i, 0)).collect();
        let mut s = Streams::new();
        stream_while(&mut c, &mut s, &[n1.clone(), n2.clone()], &entities, 5);
        c.advance(500);
        let before: usize = c.nodes.values().map(|n| n.entities.len()).sum();
        assert_eq!(before, 30);
        // A third node joins: it takes its share while everybody keeps sending.
        let n3 = c.add_node(3);
        for n in c.nodes.values_mut() {
            n.stop_delay_ms = 40;
        }
        stream_while(
            &mut c,
            &mut s,
            &[n1.clone(), n2.clone(), n3.clone()],
            &entities,
            200,
        );
        c.advance(3_000);
        let on3 = c.nodes[&n3].entities.len();
        assert!(
            on3 >= 8,
            "seed {seed}: the new node holds {on3} of 30 entities"
        );
        assert!(
            c.machine(&c.coordinator().unwrap())
                .stats()
                .rebalance_rounds
                >= 1
        );
        s.check(&c);
        assert!(c.checks > 100);
        let forwarded: u64 = c.nodes.values().map(|n| n.machine.stats().forwarded).sum();
        let completed: u64 = c
            .nodes
            .values()
            .map(|n| n.machine.stats().handoffs_completed)
            .sum();
        let started: u64 = c
            .nodes
            .values()
            .map(|n| n.machine.stats().handoffs_started)
            .sum();
        let held: u64 = c
            .nodes
            .values()
            .map(|n| n.machine.stats().held_for_order)
            .sum();
        eprintln!("seed {seed}: handoffs {started} started, {completed} completed, {forwarded} forwarded, {held} held for order");
        assert!(
            started >= 8 && completed == started,
            "every handoff completed"
        );
        for n in c.nodes.values() {
            assert_eq!(n.machine.buffered(), 0, "every buffer drained");
            assert_eq!(n.machine.handoffs_in_progress(), 0);
        }
    }
}

#[test]
fn graceful_leave_hands_every_shard_over_losing_nothing() {
    for seed in 0..6 {
        let mut c = TestCluster::new(100 + seed, fast_settings());
        let n1 = c.add_node(1);
        let n2 = c.add_node(2);
        let n3 = c.add_node(3);
        c.advance(300);
        let entities: Vec<String> = (0..30).map(|i| entity_in_shard(i, 1)).collect();
        let mut s = Streams::new();
        let all = [n1.clone(), n2.clone(), n3.clone()];
        stream_while(&mut c, &mut s, &all, &entities, 5);
        c.advance(300);
        assert!(!c.nodes[&n2].entities.is_empty());
        // Node 2 leaves: its region hands every shard over while all three keep sending.
        c.nodes.get_mut(&n2).unwrap().stop_delay_ms = 30;
        let now = c.now;
        c.machine(&n2).graceful_shutdown(now);
        c.drain(&n2);
        c.set_status(&n2, MemberStatus::Leaving);
        stream_while(&mut c, &mut s, &all, &entities, 100);
        c.advance(2_000);
        assert!(
            c.nodes[&n2].graceful_done,
            "seed {seed}: graceful shutdown done"
        );
        assert!(c.nodes[&n2].entities.is_empty());
        c.remove(&n2);
        stream_while(&mut c, &mut s, &[n1.clone(), n3.clone()], &entities, 5);
        c.advance(1_000);
        s.check(&c);
    }
}

#[test]
fn coordinator_fail_over_recovers_the_state_while_known_homes_serve() {
    let mut c = TestCluster::new(7, fast_settings());
    let n1 = c.add_node(1);
    let n2 = c.add_node(2);
    let n3 = c.add_node(3);
    c.advance(300);
    let entities: Vec<String> = (0..20).map(|i| entity_in_shard(i, 2)).collect();
    for e in &entities {
        c.tell(&n3, e, "a", None);
    }
    c.advance(300);
    let state = c.machine(&n1).coordinator_state().unwrap().clone();
    assert_eq!(state.shard_count(), 20);
    // The coordinator's node crashes.
    c.crash(&n1);
    let on2: Vec<String> = entities
        .iter()
        .filter(|e| c.host_of(e) == Some(n2.clone()))
        .cloned()
        .collect();
    assert!(!on2.is_empty());
    // Known homes keep serving before a new coordinator runs.
    for e in &on2 {
        c.tell(&n3, e, "b", None);
    }
    c.settle();
    assert_eq!(c.coordinator(), None);
    for e in &on2 {
        assert_eq!(c.received(e), vec!["a", "b"]);
    }
    // After the removal margin the next oldest runs the coordinator with the state read
    // from Distributed Data.
    c.advance(2_000);
    assert_eq!(c.coordinator(), Some(n2.clone()));
    let recovered = c.machine(&n2).coordinator_state().unwrap().clone();
    for (shard, home) in state.shards() {
        if *home != n1 {
            assert_eq!(recovered.home(shard), Some(home), "shard {shard}");
        }
    }
    // Entities of the crashed node start again elsewhere on their next message.
    for e in &entities {
        c.tell(&n3, e, "c", None);
    }
    c.advance(2_000);
    for e in &entities {
        assert!(c.host_of(e).is_some_and(|h| h != n1), "{e} re-allocated");
        assert_eq!(c.received(e).last().map(String::as_str), Some("c"));
    }
}

#[test]
fn passivation_buffers_messages_that_arrive_while_the_entity_stops() {
    let mut c = TestCluster::new(8, fast_settings());
    let n1 = c.add_node(1);
    c.advance(200);
    c.tell(&n1, "p", "m1", None);
    c.settle();
    c.nodes.get_mut(&n1).unwrap().stop_delay_ms = 50;
    let shard = shard_id(&"p".to_string(), 100);
    let now = c.now;
    c.machine(&n1).passivate(now, &shard, "p");
    c.drain(&n1);
    c.tell(&n1, "p", "m2", None);
    c.tell(&n1, "p", "m3", None);
    c.settle();
    assert_eq!(c.received("p"), vec!["m1"], "still stopping");
    assert_eq!(c.machine(&n1).buffered(), 2);
    c.advance(100);
    // The next incarnation got the buffered messages, in order.
    assert_eq!(c.received("p"), vec!["m2", "m3"]);
    assert_eq!(c.nodes[&n1].started, 2);
    assert_eq!(c.machine(&n1).buffered(), 0);
}

#[test]
fn idle_entities_are_passivated() {
    let settings = ShardingSettings {
        passivation_idle_timeout_ms: Some(2_000),
        ..fast_settings()
    };
    let mut c = TestCluster::new(9, settings);
    let n1 = c.add_node(1);
    c.advance(200);
    c.tell(&n1, "idle", "x", None);
    c.tell(&n1, "busy", "x", None);
    c.settle();
    for _ in 0..6 {
        c.advance(500);
        c.tell(&n1, "busy", "x", None);
    }
    assert_eq!(c.host_of("idle"), None, "idle for 3 s: passivated");
    assert_eq!(c.host_of("busy"), Some(n1.clone()));
    assert_eq!(c.machine(&n1).stats().entities_passivated, 1);
}

#[test]
fn active_entity_limit_passivates_the_least_recently_used() {
    let settings = ShardingSettings {
        active_entity_limit: Some(3),
        ..fast_settings()
    };
    let mut c = TestCluster::new(10, settings);
    let n1 = c.add_node(1);
    c.advance(200);
    for e in ["a", "b", "c"] {
        c.tell(&n1, e, "1", None);
    }
    c.settle();
    c.tell(&n1, "a", "2", None);
    c.tell(&n1, "d", "1", None);
    c.settle();
    assert_eq!(c.host_of("b"), None, "b was the least recently used");
    for e in ["a", "c", "d"] {
        assert!(c.host_of(e).is_some(), "{e} alive");
    }
    assert_eq!(c.nodes[&n1].entities.len(), 3);
}

#[test]
fn remembered_entities_restart_after_a_crash() {
    let settings = ShardingSettings {
        remember_entities: true,
        ..fast_settings()
    };
    let mut c = TestCluster::new(11, settings);
    let n1 = c.add_node(1);
    let n2 = c.add_node(2);
    let n3 = c.add_node(3);
    c.advance(300);
    let entities: Vec<String> = (0..12).map(|i| entity_in_shard(i, 3)).collect();
    for e in &entities {
        c.tell(&n1, e, "hello", None);
    }
    c.advance(500);
    for e in &entities {
        assert_eq!(
            c.received(e),
            vec!["hello"],
            "{e} started once it was remembered"
        );
    }
    let on3: Vec<String> = entities
        .iter()
        .filter(|e| c.host_of(e) == Some(n3.clone()))
        .cloned()
        .collect();
    assert!(!on3.is_empty());
    c.crash(&n3);
    // After the removal margin the coordinator re-allocates node 3's shards at once and
    // their remembered entities start without a message.
    c.advance(3_000);
    for e in &on3 {
        let h = c.host_of(e);
        assert!(
            h == Some(n1.clone()) || h == Some(n2.clone()),
            "{e} restarted: {h:?}"
        );
        assert!(c.received(e).is_empty(), "a fresh incarnation");
    }
}

#[test]
fn a_full_buffer_drops_new_messages_and_fails_their_asks() {
    let settings = ShardingSettings {
        buffer_size: 5,
        ..fast_settings()
    };
    let mut c = TestCluster::new(12, settings);
    let n1 = c.add_node(1);
    // Joining, not yet registered: everything is buffered.
    c.set_status(&n1, MemberStatus::Joining);
    for i in 0..7 {
        c.tell(&n1, &format!("b{i}"), "x", Some(i));
    }
    c.settle();
    assert_eq!(c.machine(&n1).buffered(), 5);
    assert_eq!(c.nodes[&n1].dropped, vec![Some(5), Some(6)]);
    assert_eq!(c.machine(&n1).stats().dropped_buffer_full, 2);
    // Up: registered, every buffered message delivered.
    c.set_status(&n1, MemberStatus::Up);
    c.advance(500);
    for i in 0..5 {
        assert_eq!(c.received(&format!("b{i}")), vec!["x"]);
    }
    assert_eq!(c.machine(&n1).buffered(), 0);
}

#[test]
fn a_node_that_sees_itself_down_stops_every_entity() {
    let mut c = TestCluster::new(13, fast_settings());
    let n1 = c.add_node(1);
    let n2 = c.add_node(2);
    c.advance(300);
    for i in 0..10 {
        c.tell(&n1, &entity_in_shard(i, 4), "x", None);
    }
    c.advance(200);
    assert!(!c.nodes[&n2].entities.is_empty());
    c.set_status(&n2, MemberStatus::Down);
    c.settle();
    assert!(c.nodes[&n2].entities.is_empty(), "stopped at once");
}
