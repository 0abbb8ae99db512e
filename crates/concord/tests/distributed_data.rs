//! Distributed Data on in-process nodes over real sockets: the replicator layer, its
//! codec, the durable store and `GET /cluster/ddata`.

mod common;

use std::time::Duration;

use common::{fast_config, port_of, wait_for, wait_for_async};
use concord::ddata::{DdataError, DistributedData, Replicator};
use concord::remote::LinkFaults;
use concord::{Config, Node};
use concord_core::ddata::{
    GCounter, Key, ORSet, PNCounter, ReadConsistency, ReplicatorSettings, WriteConsistency,
};

/// Fast replication for tests: gossip 500 ms, deltas 200 ms, notify 100 ms.
fn settings() -> ReplicatorSettings {
    ReplicatorSettings {
        gossip_interval_ms: 500,
        delta_propagation_interval_ms: 200,
        notify_subscribers_interval_ms: 100,
        ..Default::default()
    }
}

struct Member {
    node: Node,
    replicator: Replicator,
}

async fn start(config: Config, settings: ReplicatorSettings, first: bool) -> Member {
    let (layer, replicator) = DistributedData::with_settings(settings);
    let node = Node::builder(config).layer(layer).start().await.unwrap();
    if first {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    Member { node, replicator }
}

/// `n` nodes of system `system`, all Up, each replicator counting the other `n - 1`.
async fn cluster(
    system: &str,
    n: usize,
    settings: ReplicatorSettings,
    mut config: impl FnMut(usize, &mut Config),
) -> Vec<Member> {
    let mut c = fast_config(system, &[]);
    config(0, &mut c);
    let first = start(c, settings.clone(), true).await;
    let seed = port_of(&first.node);
    let mut members = vec![first];
    for i in 1..n {
        let mut c = fast_config(system, &[seed]);
        config(i, &mut c);
        members.push(start(c, settings.clone(), false).await);
    }
    wait_for("all Up", || {
        members.iter().all(|m| {
            let v = m.node.cluster().view();
            v.members_with_status(concord_core::MemberStatus::Up)
                .count()
                == n
        })
    })
    .await;
    // A replicator hears of the members after the cluster view does, and its quorums
    // (majority, all) count only the replicas it knows.
    for m in &members {
        wait_for_async("every replicator counts the others", || async {
            m.replicator.nodes().await.unwrap().len() == n - 1
        })
        .await;
    }
    members
}

async fn local<T: concord_core::ddata::ReplicatedType>(r: &Replicator, key: &Key<T>) -> Option<T>
where
    T::Delta: serde::Serialize + serde::de::DeserializeOwned,
{
    r.get(key, ReadConsistency::Local).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_on_five_nodes_converge() {
    let members = cluster("dd-converge", 5, settings(), |_, _| {}).await;
    let counter: Key<PNCounter> = Key::new("counter").unwrap();
    let set: Key<ORSet<String>> = Key::new("set").unwrap();
    let mut tasks = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let r = m.replicator.clone();
        let (counter, set) = (counter.clone(), set.clone());
        tasks.push(tokio::spawn(async move {
            let me = r.replica();
            for j in 0..50 {
                r.update(
                    &counter,
                    WriteConsistency::Local,
                    PNCounter::new,
                    move |c| c.increment(me, 1),
                )
                .await
                .unwrap();
                let e = format!("{i}-{j}");
                r.update(&set, WriteConsistency::Local, ORSet::new, move |s| {
                    s.add(me, e)
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for m in &members {
        wait_for_async("every replica has every update", || async {
            local(&m.replicator, &counter).await.map(|c| c.value()) == Some(250)
                && local(&m.replicator, &set).await.map(|s| s.len()) == Some(250)
        })
        .await;
    }
    let mut sent = 0;
    for m in &members {
        sent += m.replicator.stats().await.unwrap().deltas_sent;
    }
    assert!(sent > 0, "updates travel as deltas");
    for m in &members {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_majority_then_read_majority_sees_the_write_with_a_minority_crashed() {
    let members = cluster("dd-quorum", 5, settings(), |_, _| {}).await;
    members[3].node.stop().await;
    members[4].node.stop().await;
    let key: Key<GCounter> = Key::new("k").unwrap();
    let me = members[0].replicator.replica();
    members[0]
        .replicator
        .update(
            &key,
            WriteConsistency::majority(5_000),
            GCounter::new,
            move |c| c.increment(me, 7),
        )
        .await
        .expect("3 of 5 acknowledge");
    let v = members[2]
        .replicator
        .get(&key, ReadConsistency::majority(5_000))
        .await
        .expect("3 of 5 answer");
    assert_eq!(v.map(|c| c.value()), Some(7));
    // All cannot be reached with two nodes down: the local value is updated anyway.
    let r = members[1]
        .replicator
        .update(
            &key,
            WriteConsistency::All { timeout_ms: 1_000 },
            GCounter::new,
            |_| {},
        )
        .await;
    assert!(matches!(r, Err(DdataError::UpdateTimeout(_))), "{r:?}");
    for m in &members[..3] {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_then_heal_converges() {
    let members = cluster("dd-partition", 4, settings(), |_, _| {}).await;
    let block = LinkFaults {
        blackhole_outbound: true,
        blackhole_inbound: true,
        ..Default::default()
    };
    let (left, right) = members.split_at(2);
    for a in left {
        for b in right {
            a.node
                .transport()
                .set_faults(b.node.self_address().clone(), block.clone());
            b.node
                .transport()
                .set_faults(a.node.self_address().clone(), block.clone());
        }
    }
    let key: Key<PNCounter> = Key::new("p").unwrap();
    for (i, m) in members.iter().enumerate() {
        let me = m.replicator.replica();
        m.replicator
            .update(&key, WriteConsistency::Local, PNCounter::new, move |c| {
                c.increment(me, i as i64 + 1)
            })
            .await
            .unwrap();
    }
    // Each side converges on its own writes (1 + 2 on the left, 3 + 4 on the right); the
    // partition keeps the other side's out until the heal.
    for (m, want) in [(&left[0], 3), (&left[1], 3), (&right[0], 7), (&right[1], 7)] {
        wait_for_async("each side converges on its own writes", || async {
            local(&m.replicator, &key).await.map(|c| c.value()) == Some(want)
        })
        .await;
    }
    for m in &members {
        m.node.transport().clear_faults();
    }
    for m in &members {
        wait_for_async("healed replicas converge", || async {
            local(&m.replicator, &key).await.map(|c| c.value()) == Some(10)
        })
        .await;
    }
    for m in &members {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_repair_leaves_every_contacted_replica_at_the_merged_value() {
    // No deltas and no gossip to speak of: only the read can repair.
    let s = ReplicatorSettings {
        delta_crdt_enabled: false,
        gossip_interval_ms: 3_600_000,
        ..settings()
    };
    let members = cluster("dd-repair", 3, s, |_, _| {}).await;
    let key: Key<PNCounter> = Key::new("r").unwrap();
    for (i, m) in members.iter().enumerate().skip(1) {
        let me = m.replicator.replica();
        m.replicator
            .update(&key, WriteConsistency::Local, PNCounter::new, move |c| {
                c.increment(me, 10 * i as i64)
            })
            .await
            .unwrap();
    }
    let v = members[0]
        .replicator
        .get(&key, ReadConsistency::All { timeout_ms: 5_000 })
        .await
        .unwrap();
    assert_eq!(v.map(|c| c.value()), Some(30));
    for m in &members {
        wait_for_async("the replica was repaired", || async {
            local(&m.replicator, &key).await.map(|c| c.value()) == Some(30)
        })
        .await;
    }
    assert_eq!(members[0].replicator.stats().await.unwrap().read_repairs, 2);
    for m in &members {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_keys_survive_a_full_cluster_restart_and_a_corrupt_store_fails_start() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let s = ReplicatorSettings {
        durable_keys: vec!["d-*".into()],
        ..settings()
    };
    let with_dir = |i: usize, c: &mut Config| c.data_dir = dirs[i].path().display().to_string();
    let members = cluster("dd-durable", 3, s.clone(), with_dir).await;
    let key: Key<PNCounter> = Key::new("d-count").unwrap();
    let volatile: Key<PNCounter> = Key::new("v-count").unwrap();
    for m in &members {
        let me = m.replicator.replica();
        m.replicator
            .update(
                &key,
                WriteConsistency::All { timeout_ms: 5_000 },
                PNCounter::new,
                move |c| c.increment(me, 5),
            )
            .await
            .unwrap();
        m.replicator
            .update(
                &volatile,
                WriteConsistency::Local,
                PNCounter::new,
                move |c| c.increment(me, 1),
            )
            .await
            .unwrap();
    }
    for m in &members {
        wait_for_async("the last write reached everyone", || async {
            local(&m.replicator, &key).await.map(|c| c.value()) == Some(15)
        })
        .await;
    }
    let keys = members[0].replicator.keys().await.unwrap();
    assert!(
        keys.iter()
            .any(|k| k.key == "d-count" && k.durable && k.size_bytes > 0),
        "{keys:?}"
    );
    assert!(keys.iter().any(|k| k.key == "v-count" && !k.durable));
    for m in &members {
        m.node.shutdown().await;
    }
    drop(members);
    // A whole new cluster on the same data directories.
    let restarted = cluster("dd-durable", 3, s.clone(), with_dir).await;
    for m in &restarted {
        // Loaded before anything is served: no gossip needed.
        assert_eq!(
            local(&m.replicator, &key).await.map(|c| c.value()),
            Some(15)
        );
    }
    for m in &restarted {
        m.node.shutdown().await;
    }
    // A corrupt store: the node refuses to start and names the file.
    std::fs::write(
        dirs[0].path().join(concord::ddata::durable::STORE_FILE),
        b"garbage, not redb",
    )
    .unwrap();
    let mut c = fast_config("dd-durable", &[]);
    with_dir(0, &mut c);
    let (layer, _r) = DistributedData::with_settings(s);
    let err = Node::builder(c)
        .layer(layer)
        .start()
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("ddata.redb"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_nodes_entries_are_pruned_and_its_counts_kept() {
    let s = ReplicatorSettings {
        pruning_interval_ms: 500,
        max_pruning_dissemination_ms: 1_000,
        ..settings()
    };
    let members = cluster("dd-prune", 3, s, |_, _| {}).await;
    let key: Key<GCounter> = Key::new("g").unwrap();
    for m in &members {
        let me = m.replicator.replica();
        m.replicator
            .update(
                &key,
                WriteConsistency::All { timeout_ms: 5_000 },
                GCounter::new,
                move |c| c.increment(me, 4),
            )
            .await
            .unwrap();
    }
    let gone = members[2].replicator.replica();
    members[2].node.shutdown().await;
    for m in &members[..2] {
        wait_for_async("pruned", || async {
            local(&m.replicator, &key)
                .await
                .is_some_and(|c| c.value() == 12 && c.entries().all(|(r, _)| r != gone))
        })
        .await;
    }
    for m in &members[..2] {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_lists_keys_and_subscribers_hear_changes() {
    let members = cluster("dd-http", 2, settings(), |_, _| {}).await;
    let key: Key<ORSet<String>> = Key::new("rooms").unwrap();
    let mut changes = members[1].replicator.subscribe(&key).await.unwrap();
    let me = members[0].replicator.replica();
    members[0]
        .replicator
        .update(&key, WriteConsistency::Local, ORSet::new, move |s| {
            s.add(me, "lobby".to_string())
        })
        .await
        .unwrap();
    let change = tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .unwrap();
    match change {
        Some(concord::ddata::Change::Changed(s)) => assert!(s.contains(&"lobby".to_string())),
        other => panic!("{other:?}"),
    }
    let addr = members[0].node.management_addr().unwrap();
    let body = common::get_json(&format!("http://{addr}/cluster/ddata")).await;
    let keys = body["keys"].as_array().unwrap();
    assert_eq!(keys[0]["key"], "rooms");
    assert!(keys[0]["type"].as_str().unwrap().contains("ORSet"));
    assert_eq!(keys[0]["durable"], false);
    for m in &members {
        m.node.stop().await;
    }
}
