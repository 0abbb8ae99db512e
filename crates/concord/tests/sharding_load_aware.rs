//! Load-aware shard allocation on in-process nodes over real sockets: with
//! `[sharding] allocation-strategy = "load-aware"` and the cluster metrics spreading every
//! node's load, shards are allocated, entities answer, and a node that leaves gracefully
//! hands its shards to the others. (The nodes share one machine, so their loads are about
//! equal: this tests the wiring; the placement itself is tested in `concord-core`.)

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::echo_cluster::{ask_until_answered as ask, start_echo};
use common::{get_json, port_of, wait_for_async, wait_self_up};
use concord::{Config, Node};
use serde_json::Value;

fn tune(c: &mut Config) {
    c.update_section(|s: &mut concord::sharding::ShardingConfig| {
        s.allocation_strategy = "load-aware".into();
        s.load_selector = "mix".into();
        s.rebalance_interval = Duration::from_millis(500);
        s.retry_interval = Duration::from_millis(200);
        s.number_of_shards = 30;
    })
    .expect("the sharding section parses");
}

async fn start(
    seeds: &[u16],
) -> (
    Node,
    concord::sharding::ShardRegion<common::echo_cluster::Echo>,
) {
    start_echo("load-aware", seeds, tune).await
}

fn url(n: &Node, path: &str) -> String {
    format!("http://{}{path}", n.management_addr().unwrap())
}

/// Shards per region in `GET /cluster/shards/echo` on `n`.
async fn shards_per_region(n: &Node) -> Vec<usize> {
    let v: Value = get_json(&url(n, "/cluster/shards/echo")).await;
    v["regions"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|r| r["shards"].as_array().map_or(0, Vec::len))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_aware_allocation_places_shards_and_entities_answer() {
    let (a, region) = start(&[]).await;
    wait_self_up(&a).await;
    let seed = port_of(&a);
    let (b, _rb) = start(&[seed]).await;
    let (c, _rc) = start(&[seed]).await;
    for n in [&b, &c] {
        wait_self_up(n).await;
    }
    // Every node's load is known everywhere (so the coordinator's strategy has loads).
    for n in [&a, &b, &c] {
        wait_for_async("three members' loads", || async {
            let v = get_json(&url(n, "/cluster/metrics")).await;
            v["nodes"].as_array().is_some_and(|entries| {
                entries.len() == 3 && entries.iter().all(|e| e["capacity"]["mix"].is_number())
            })
        })
        .await;
    }
    // ... and reaches the load-aware machines on every node (the sharding layer feeds
    // them each tick; the gauge counts the nodes whose load they hold).
    for n in [&a, &b, &c] {
        wait_for_async("the strategy holds three nodes' loads", || async {
            let text = reqwest::get(url(n, "/metrics"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            // The recorder is the process's: pick this node's series.
            let label = format!("node=\"{}\"", n.self_address());
            text.lines().any(|l| {
                l.starts_with("concord_sharding_load_aware_nodes{")
                    && l.contains(&label)
                    && l.ends_with(" 3")
            })
        })
        .await;
    }
    for i in 0..30 {
        ask(&region, i).await;
    }
    let shards: BTreeSet<String> = (0..30)
        .map(|i| concord_core::sharding::shard_id(&format!("e{i}"), 30))
        .collect();
    let total = shards.len();
    wait_for_async("the entities' shards allocated", || async {
        shards_per_region(&a).await.iter().sum::<usize>() == total
    })
    .await;

    // A node leaves gracefully: its shards go to the others (destinations chosen by the
    // load-aware strategy), and every entity still answers.
    c.shutdown().await;
    for i in 0..30 {
        ask(&region, i).await;
    }
    wait_for_async("every shard on the two remaining regions", || async {
        let per = shards_per_region(&a).await;
        per.len() == 2 && per.iter().sum::<usize>() == total
    })
    .await;
    b.shutdown().await;
    a.shutdown().await;
}
