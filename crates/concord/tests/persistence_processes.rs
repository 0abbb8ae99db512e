//! Persistent entities between real `concord node --sample` processes, once on the
//! built-in replicated journal and once on a real PostgreSQL server (started by the test):
//! event-sourced counters are incremented through three of five nodes while two nodes are
//! SIGKILLed, one at a time, and restarted — every acknowledged increment is in the
//! recovered value; a durable-state cart keeps its items across the crash of its node.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::counter_load::CounterLoad;
use common::postgres::PgServer;
use common::sample_cluster::{kill_and_wait_removed, SampleCluster};
use common::{all_up, runtime, serial, wait_until, Node};

const SYS: &str = "persist-proc";

fn counter_regions(rt: &tokio::runtime::Runtime, via: &Node) -> BTreeMap<String, usize> {
    rt.block_on(via.client().shards("counter"))
        .map(|r| {
            r.regions
                .into_iter()
                .map(|x| (x.shard_region, x.shards.len()))
                .collect()
        })
        .unwrap_or_default()
}

fn get_json(rt: &tokio::runtime::Runtime, url: String) -> Option<serde_json::Value> {
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        r.json().await.ok()
    })
}

fn get_text(rt: &tokio::runtime::Runtime, url: String) -> Option<String> {
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        Some(format!("{}: {}", r.status(), r.text().await.ok()?))
    })
}

#[test]
fn on_the_replicated_journal_sigkilled_nodes_lose_no_acknowledged_event() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), vec![]);
}

#[test]
fn on_postgresql_sigkilled_nodes_lose_no_acknowledged_event() {
    let _serial = serial();
    let server = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("pg-url");
    std::fs::write(&url_file, server.url()).unwrap();
    run(
        dir.path(),
        vec![
            ("CONCORD__PERSISTENCE__STORE".into(), "postgres".into()),
            (
                "CONCORD__PERSISTENCE__POSTGRES__URL_FILE".into(),
                url_file.display().to_string(),
            ),
        ],
    );
}

/// Five `--sample` nodes with `store_env`; see the module docs.
fn run(dir: &std::path::Path, store_env: Vec<(String, String)>) {
    let rt = runtime();
    let mut env = vec![
        (
            "CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER".into(),
            "2s".into(),
        ),
        ("CONCORD__SHARDING__REBALANCE_INTERVAL".into(), "1s".into()),
        ("CONCORD__SHARDING__NUMBER_OF_SHARDS".into(), "60".into()),
        ("CONCORD__PERSISTENCE__SNAPSHOT_EVERY".into(), "25".into()),
    ];
    env.extend(store_env);
    let c = SampleCluster {
        system: SYS,
        env,
        dir: dir.to_path_buf(),
    };
    let n1 = c.start(1, &[]);
    let seeds = [n1.port];
    let mut nodes = vec![n1];
    for i in 2..=5 {
        nodes.push(c.start(i, &seeds));
    }
    let addrs: Vec<String> = nodes.iter().map(Node::address).collect();
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_until("5 Up", Duration::from_secs(90), &refs, || {
            all_up(&rt, &refs, &addrs)
        });
    }

    // A cart, written through node 1 once its store answers (the replicated journal's
    // replicas answer once the new ring's segments were handed over to them).
    let cart_url = |n: &Node| format!("{}/sample/cart/alice", n.management_url());
    wait_until(
        "the store answers",
        Duration::from_secs(60),
        &[&nodes[0]],
        || get_json(&rt, cart_url(&nodes[0])).is_some(),
    );
    for item in ["book", "pen", "ink"] {
        let ok = rt.block_on(async {
            reqwest::Client::new()
                .post(cart_url(&nodes[0]))
                .form(&[("item", item)])
                .timeout(Duration::from_secs(20))
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        });
        assert!(ok, "cart write {item}");
    }

    // Load: counters incremented through nodes 1, 2 and 3 (which are never killed).
    let counters = 24;
    let ports: Vec<u16> = nodes[..3].iter().map(|n| n.management_port).collect();
    let load = CounterLoad::start(&ports, counters);

    // SIGKILL node 4, then node 5, each once it hosts counters; restart each.
    for victim in [3usize, 4] {
        let before = load.acknowledged();
        wait_until(
            "increments flowing",
            Duration::from_secs(60),
            &[&nodes[0]],
            || load.acknowledged() > before + 30,
        );
        let addr = nodes[victim].address();
        wait_until(
            "counters on the victim",
            Duration::from_secs(60),
            &[&nodes[0]],
            || {
                counter_regions(&rt, &nodes[0])
                    .get(&addr)
                    .is_some_and(|n| *n >= 2)
            },
        );
        kill_and_wait_removed(&rt, &mut nodes, victim, &addrs);
        let after = load.acknowledged();
        wait_until(
            "increments acknowledged after the crash",
            Duration::from_secs(60),
            &[&nodes[0]],
            || load.acknowledged() > after + 30,
        );
        c.restart_and_wait_up(&rt, &mut nodes, victim, &addrs, &seeds);
    }
    let (acked, sent) = load.stop();
    assert!(acked.values().sum::<i64>() > 100, "{acked:?}");
    for c in 0..counters {
        // A restarted node's segments of the replicated journal are handed over before it
        // answers for them: a read may be refused (503) for a few seconds.
        let url = format!("{}/sample/counter/c{c}", nodes[1].management_url());
        let mut v = None;
        wait_until(
            "the counter answers",
            Duration::from_secs(60),
            &[&nodes[1]],
            || {
                v = get_json(&rt, url.clone());
                if v.is_none() {
                    eprintln!("counter c{c}: {:?}", get_text(&rt, url.clone()));
                }
                v.is_some()
            },
        );
        let v = v.expect("the counter answers");
        let value = v["value"].as_i64().unwrap();
        let (a, s) = (
            acked.get(&c).copied().unwrap_or(0),
            sent.get(&c).copied().unwrap_or(0),
        );
        assert!(
            value >= a && value <= s,
            "counter c{c}: {value}, acknowledged {a}, sent {s}"
        );
    }
    // The cart: its node SIGKILLed, then read through another node — its items are there.
    let cart_node = get_json(&rt, cart_url(&nodes[0])).unwrap()["node"]
        .as_str()
        .unwrap()
        .to_string();
    let victim = nodes.iter().position(|n| n.address() == cart_node).unwrap();
    nodes[victim].kill9();
    let reader = (victim + 1) % nodes.len();
    wait_until(
        "the cart back elsewhere",
        Duration::from_secs(90),
        &[&nodes[reader]],
        || {
            get_json(&rt, cart_url(&nodes[reader])).is_some_and(|v| {
                v["node"].as_str() != Some(cart_node.as_str())
                    && v["items"] == serde_json::json!(["book", "pen", "ink"])
            })
        },
    );
    for (i, n) in nodes.iter_mut().enumerate() {
        if i != victim {
            n.signal(nix::sys::signal::Signal::SIGTERM);
        }
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        if i != victim {
            n.wait_exit(Duration::from_secs(30));
        }
    }
}
