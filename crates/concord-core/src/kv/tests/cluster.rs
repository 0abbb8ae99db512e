//! Small clusters of key-value machines: quorums, siblings, read repair, anti-entropy,
//! hinted handoff, transfers on joins and leaves, tombstones, storage failures.

use crate::kv::{KvError, Quorum, ReadOptions, WriteOptions};
use crate::member::MemberStatus;
use crate::protocol::ProtocolMachine;

use super::{node, settings, values, TestCluster};

fn w(k: u8) -> WriteOptions {
    WriteOptions {
        n: None,
        w: Some(Quorum::Count(k)),
    }
}

fn r(k: u8) -> ReadOptions {
    ReadOptions {
        n: None,
        r: Some(Quorum::Count(k)),
    }
}

#[test]
fn a_write_is_read_back_with_r_2_while_one_replica_is_down() {
    let mut c = TestCluster::new(5, settings());
    let owners = c.owners("cart");
    let outsider = (0..5).map(node).find(|n| !owners.contains(n)).unwrap();
    c.take_down(&owners[1]);
    c.put(&outsider, "cart", "book", None, w(2)).unwrap();
    let got = c.get(&owners[0], "cart", r(2)).unwrap();
    assert_eq!(values(&got), ["book"]);
    // The write went to a fallback in the down replica's place (a hinted write).
    assert_eq!(c.nodes[&outsider].stats().hinted_writes, 1);
}

#[test]
fn w_equal_to_n_fails_with_the_replicas_that_answered_when_one_is_down() {
    let mut c = TestCluster::new(3, settings());
    c.take_down(&node(2));
    let e = c.put(&node(0), "k", "v", None, w(3)).unwrap_err();
    let KvError::Unavailable(f) = &e else {
        panic!("{e}")
    };
    assert_eq!(f.needed, 3);
    assert_eq!(f.counted.len(), 2);
    assert!(!f.counted.contains(&node(2).address));
    let text = e.to_string();
    assert!(text.contains("w=3 not reached: counted 2"), "{text}");
    // R=3 likewise; R=2 reads it.
    assert!(matches!(
        c.get(&node(0), "k", r(3)),
        Err(KvError::Unavailable(_))
    ));
    assert_eq!(values(&c.get(&node(1), "k", r(2)).unwrap()), ["v"]);
}

#[test]
fn with_sloppy_quorum_a_fallback_counts_towards_w() {
    let mut s = settings();
    s.sloppy_quorum = true;
    let mut c = TestCluster::new(5, s);
    let owners = c.owners("k");
    c.take_down(&owners[2]);
    c.put(&owners[0], "k", "v", None, w(3)).unwrap();
}

#[test]
fn concurrent_writes_are_siblings_until_a_write_with_the_merged_context() {
    let mut c = TestCluster::new(5, settings());
    c.put(&node(0), "doc", "from-0", None, w(2)).unwrap();
    c.put(&node(3), "doc", "from-3", None, w(2)).unwrap();
    let read = c.get(&node(1), "doc", r(2)).unwrap();
    assert_eq!(values(&read), ["from-0", "from-3"]);
    let ctx = read.object.unwrap().clock().clone();
    c.put(&node(4), "doc", "merged", Some(ctx), w(2)).unwrap();
    assert_eq!(values(&c.get(&node(2), "doc", r(3)).unwrap()), ["merged"]);
    // A write with an older context is concurrent with the resolution: siblings again.
    c.put(&node(0), "doc", "late", None, w(2)).unwrap();
    assert_eq!(
        values(&c.get(&node(2), "doc", r(2)).unwrap()),
        ["late", "merged"]
    );
}

#[test]
fn a_read_repairs_the_stale_replica() {
    let mut c = TestCluster::new(3, settings());
    c.take_down(&node(2));
    c.put(&node(0), "k", "new", None, w(2)).unwrap();
    c.bring_back(&node(2));
    assert_eq!(c.stored(&node(2), "k"), None);
    let got = c.get(&node(0), "k", r(3)).unwrap();
    assert_eq!(values(&got), ["new"]);
    c.run_for(50);
    assert_eq!(c.stored(&node(2), "k"), Some(vec!["new".to_string()]));
    assert!(c.nodes[&node(0)].stats().read_repairs >= 1);
}

#[test]
fn anti_entropy_repairs_a_replica_no_read_touches() {
    let mut s = settings();
    s.anti_entropy_interval_ms = 200;
    let mut c = TestCluster::new(3, s);
    c.take_down(&node(1));
    for i in 0..300 {
        c.put(&node(0), &format!("key-{i}"), "v", None, w(2))
            .unwrap();
    }
    c.bring_back(&node(1));
    assert_eq!(c.nodes[&node(1)].store_ref().key_count(), 0);
    c.run_for(5_000);
    assert_eq!(c.nodes[&node(1)].store_ref().key_count(), 300);
    assert!(
        c.nodes
            .values()
            .map(|m| m.stats().ae_keys_repaired)
            .sum::<u64>()
            >= 300
    );
    // Every replica's tree is the same now.
    let trees: Vec<Vec<_>> = c
        .nodes
        .values()
        .map(|m| m.store_ref().groups().collect())
        .collect();
    assert!(trees.windows(2).all(|t| t[0] == t[1]));
}

#[test]
fn hinted_writes_go_back_to_their_owner_and_leave_the_fallback() {
    let mut c = TestCluster::new(5, settings());
    let owners = c.owners("k");
    let down = owners[0].clone();
    c.take_down(&down);
    c.put(&owners[1], "k", "v", None, w(2)).unwrap();
    let fallback = c
        .nodes
        .keys()
        .find(|n| !owners.contains(n) && c.nodes[*n].store_ref().key_count() == 1)
        .cloned()
        .expect("a fallback holds the hinted write");
    c.bring_back(&down);
    c.run_for(2_000);
    assert_eq!(c.stored(&down, "k"), Some(vec!["v".to_string()]));
    assert_eq!(c.stored(&fallback, "k"), None);
    assert_eq!(c.nodes[&fallback].misplaced_keys(), 0);
    assert!(c.nodes[&fallback].stats().handoff_keys_removed >= 1);
}

#[test]
fn a_joining_node_takes_its_segments_and_the_old_owners_hand_theirs_off() {
    let mut c = TestCluster::new(4, settings());
    for i in 0..400 {
        c.put(&node(i % 4), &format!("k{i}"), &format!("v{i}"), None, w(2))
            .unwrap();
    }
    c.run_for(2_000);
    let before: u64 = c.nodes.values().map(|m| m.store_ref().key_count()).sum();
    assert_eq!(before, 1200);
    c.add(node(4), true);
    c.publish();
    // Reads stay correct while it takes over.
    for i in (0..400).step_by(7) {
        let got = c.get(&node(4), &format!("k{i}"), r(2)).unwrap();
        assert_eq!(values(&got), [format!("v{i}")], "k{i}");
    }
    c.run_for(10_000);
    let after: u64 = c.nodes.values().map(|m| m.store_ref().key_count()).sum();
    assert_eq!(after, 1200, "every key has exactly 3 replicas again");
    assert!(c.nodes[&node(4)].store_ref().key_count() > 100);
    assert!(c
        .nodes
        .values()
        .all(|m| m.misplaced_keys() == 0 && m.pending_segments() == 0));
}

#[test]
fn a_leaving_node_hands_everything_over() {
    let mut c = TestCluster::new(4, settings());
    for i in 0..200 {
        c.put(&node(0), &format!("k{i}"), "v", None, w(2)).unwrap();
    }
    c.run_for(1_000);
    c.set_status(&node(3), MemberStatus::Leaving);
    c.run_for(5_000);
    assert_eq!(c.nodes[&node(3)].store_ref().key_count(), 0);
    c.remove(&node(3));
    c.run_for(3_000);
    let total: u64 = c.nodes.values().map(|m| m.store_ref().key_count()).sum();
    assert_eq!(total, 600);
    for i in 0..200 {
        assert_eq!(
            values(&c.get(&node(1), &format!("k{i}"), r(3)).unwrap()),
            ["v"]
        );
    }
}

#[test]
fn a_crashed_owner_is_replaced_and_its_keys_regain_three_replicas() {
    let mut c = TestCluster::new(5, settings());
    for i in 0..200 {
        c.put(&node(0), &format!("k{i}"), "v", None, w(2)).unwrap();
    }
    c.run_for(1_000);
    c.remove(&node(2));
    for i in (0..200).step_by(3) {
        assert_eq!(
            values(&c.get(&node(1), &format!("k{i}"), r(2)).unwrap()),
            ["v"]
        );
    }
    c.run_for(8_000);
    let total: u64 = c.nodes.values().map(|m| m.store_ref().key_count()).sum();
    assert_eq!(total, 600);
}

#[test]
fn deletes_leave_tombstones_that_are_reaped_after_every_replica_acknowledged() {
    let mut c = TestCluster::new(3, settings());
    c.put(&node(0), "k", "v", None, w(2)).unwrap();
    let read = c.get(&node(1), "k", r(2)).unwrap();
    c.delete(&node(1), "k", Some(read.object.unwrap().clock().clone()))
        .unwrap();
    let gone = c.get(&node(2), "k", r(2)).unwrap();
    assert!(gone.is_not_found());
    assert!(gone.object.is_some(), "the tombstone is still there");
    c.run_for(1_500);
    for i in 0..3 {
        assert_eq!(c.nodes[&node(i)].store_ref().key_count(), 0, "node {i}");
    }
    let r2 = c.get(&node(2), "k", r(2)).unwrap();
    assert!(r2.object.is_none());
    // Without a context: the key is read first. Nothing there: not found.
    assert_eq!(c.delete(&node(0), "k", None), Err(KvError::NotFound));
    c.put(&node(0), "j", "v", None, w(2)).unwrap();
    c.delete(&node(2), "j", None).unwrap();
    assert!(c.get(&node(1), "j", r(2)).unwrap().is_not_found());
}

#[test]
fn a_tombstone_one_replica_missed_is_not_reaped_until_all_have_it() {
    let mut c = TestCluster::new(3, settings());
    c.put(&node(0), "k", "v", None, w(3)).unwrap();
    c.take_down(&node(2));
    c.delete(&node(0), "k", None).unwrap();
    c.run_for(2_000);
    // node 2 still has the value: the others keep their tombstones.
    assert_eq!(c.nodes[&node(0)].store_ref().key_count(), 1);
    c.bring_back(&node(2));
    // A read sees the tombstone win, repairs node 2, and the next read reaps.
    assert!(c.get(&node(0), "k", r(3)).unwrap().is_not_found());
    c.run_for(100);
    assert!(c.get(&node(1), "k", r(3)).unwrap().is_not_found());
    c.run_for(1_500);
    let total: u64 = c.nodes.values().map(|m| m.store_ref().key_count()).sum();
    assert_eq!(total, 0);
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let mut s = settings();
    s.max_value_bytes = 10;
    let mut c = TestCluster::new(3, s);
    assert!(matches!(
        c.put(&node(0), "", "v", None, w(2)),
        Err(KvError::Invalid(_))
    ));
    assert!(matches!(
        c.put(&node(0), &"k".repeat(2000), "v", None, w(2)),
        Err(KvError::Invalid(_))
    ));
    assert!(matches!(
        c.put(&node(0), "k", "far too long a value", None, w(2)),
        Err(KvError::TooLarge(_))
    ));
    assert!(matches!(
        c.put(&node(0), "k", "v", None, w(4)),
        Err(KvError::Invalid(_))
    ));
    let bad_n = WriteOptions {
        n: Some(0),
        w: None,
    };
    assert!(matches!(
        c.put(&node(0), "k", "v", None, bad_n),
        Err(KvError::Invalid(_))
    ));
    assert!(c.nodes.values().all(|m| m.store_ref().key_count() == 0));
}

#[test]
fn per_request_n_places_more_replicas() {
    let mut c = TestCluster::new(5, settings());
    let five = WriteOptions {
        n: Some(5),
        w: Some(Quorum::All),
    };
    c.put(&node(0), "wide", "v", None, five).unwrap();
    let holders = c
        .nodes
        .values()
        .filter(|m| m.store_ref().key_count() == 1)
        .count();
    assert_eq!(holders, 5);
    c.run_for(2_000);
    // Handoff and anti-entropy leave the five replicas where they are.
    let holders = c
        .nodes
        .values()
        .filter(|m| m.store_ref().key_count() == 1)
        .count();
    assert_eq!(holders, 5);
}

#[test]
fn a_failed_commit_turns_acknowledgements_into_refusals() {
    let mut s = settings();
    s.n = 1;
    let mut c = TestCluster::new(2, s);
    let owner = c.owners("k")[0].clone();
    let other = c.nodes.keys().find(|n| **n != owner).unwrap().clone();
    c.disks[&owner].fail_next_commits(1);
    let e = c
        .put(
            &other,
            "k",
            "v",
            None,
            WriteOptions {
                n: None,
                w: Some(Quorum::One),
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("storage failure"), "{e}");
}

#[test]
fn messages_from_non_members_change_nothing() {
    let mut c = TestCluster::new(3, settings());
    let stranger = node(9);
    let now = c.now;
    let m = c.nodes.get_mut(&node(0)).unwrap();
    m.handle_message(
        now,
        &stranger,
        crate::kv::KvMessage::Repair {
            key: "k".into(),
            object: crate::kv::Versioned::empty(3),
        },
    );
    assert_eq!(m.stats().invalid_messages, 1);
    assert_eq!(m.store_ref().key_count(), 0);
}

#[test]
fn a_duplicated_forward_is_one_write_not_two() {
    // Found by the simulator (seed 1303): a Forward the network delivered twice was
    // coordinated twice — two dots for one client write, and a later write with the context
    // of a read that saw one of them left the other as a sibling.
    let mut c = TestCluster::new(5, settings());
    let owners = c.owners("k");
    let from = (0..5).map(node).find(|n| !owners.contains(n)).unwrap();
    let forward = crate::kv::KvMessage::Forward {
        request: 77,
        key: "k".into(),
        value: Some(b"v".to_vec()),
        context: Default::default(),
        n: 3,
        w: 2,
    };
    c.inject(&from, &owners[0], forward.clone());
    c.inject(&from, &owners[0], forward);
    c.run_for(100);
    let read = c.get(&owners[1], "k", r(3)).unwrap();
    assert_eq!(read.object.unwrap().siblings().len(), 1);
}
