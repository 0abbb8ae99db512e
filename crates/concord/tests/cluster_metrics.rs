//! Cluster metrics on in-process nodes over real sockets: every node learns every member's
//! metrics (the machine's, and Concord's own entity counts from sharding) through the
//! gossip, serves them at `GET /cluster/metrics` and in Prometheus, and forgets a member
//! that left.

mod common;

use std::time::Duration;

use common::echo_cluster::{start_echo, Echo};
use common::{fast_config, get_json, port_of, wait_for_async, wait_self_up};
use concord::sharding::ShardRegion;
use concord::{Config, Node};
use serde_json::Value;

fn tune(c: &mut Config) {
    c.update_section(|m: &mut concord::cluster_metrics::ClusterMetricsConfig| {
        // No smoothing: the entity count seen is the count sampled.
        m.moving_average_half_life = Duration::ZERO;
    })
    .expect("the section parses");
}

async fn start(seeds: &[u16]) -> (Node, ShardRegion<Echo>) {
    start_echo("metrics", seeds, tune).await
}

fn url(n: &Node, path: &str) -> String {
    format!("http://{}{path}", n.management_addr().unwrap())
}

/// The entries of `GET /cluster/metrics` on `n`.
async fn nodes(n: &Node) -> Vec<Value> {
    get_json(&url(n, "/cluster/metrics")).await["nodes"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn smoothed(entry: &Value, metric: &str) -> Option<f64> {
    entry["metrics"][metric]["smoothed"].as_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_learns_every_members_metrics_and_forgets_one_that_left() {
    let (a, region) = start(&[]).await;
    wait_self_up(&a).await;
    let seed = port_of(&a);
    let (b, _rb) = start(&[seed]).await;
    let (c, _rc) = start(&[seed]).await;
    for n in [&b, &c] {
        wait_self_up(n).await;
    }
    // Entities somewhere in the cluster: their count reaches every node's view.
    for i in 0..9u32 {
        let reply = region
            .entity_ref(format!("e{i}"))
            .ask(&i, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(reply, i);
    }
    for n in [&a, &b, &c] {
        wait_for_async("three members' metrics with nine entities", || async {
            let entries = nodes(n).await;
            let entities: f64 = entries.iter().filter_map(|e| smoothed(e, "entities")).sum();
            entries.len() == 3
                && entities == 9.0
                && entries.iter().all(|e| {
                    smoothed(e, "processors").is_some_and(|p| p >= 1.0)
                        && smoothed(e, "cpu-combined").is_some_and(|c| (0.0..=1.0).contains(&c))
                        && e["capacity"]["mix"].as_f64().is_some()
                })
        })
        .await;
    }
    // The dashboard has the same, and Prometheus a series per member and metric.
    let panel = get_json(&url(&a, "/dashboard/state")).await;
    assert!(panel.to_string().contains("cluster-metrics"), "{panel}");
    let text = reqwest::get(url(&a, "/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("concord_cluster_metrics_value{"), "{text}");
    assert!(text.contains("concord_cluster_metrics_gossip_received_total"));

    // A member that leaves is forgotten.
    let gone = c.self_address().to_string();
    c.shutdown().await;
    wait_for_async("the member that left forgotten", || async {
        let entries = nodes(&a).await;
        entries.len() == 2 && entries.iter().all(|e| e["node"].as_str() != Some(&gone))
    })
    .await;
    b.shutdown().await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_in_the_config_means_no_layer_and_no_route() {
    let mut c = fast_config("metrics-off", &[]);
    c.update_section(|m: &mut concord::cluster_metrics::ClusterMetricsConfig| m.enabled = false)
        .unwrap();
    let n = Node::start(c).await.unwrap();
    let me = n.self_address().clone();
    n.cluster().join(me).await.unwrap();
    wait_self_up(&n).await;
    // No layer: the route is not there.
    let status = reqwest::get(url(&n, "/cluster/metrics"))
        .await
        .unwrap()
        .status();
    assert_eq!(status, 404);
    n.shutdown().await;
}
