//! The cluster-metrics and load-aware tests' in-process nodes: an `echo` sharded entity
//! type, cluster metrics sampled and gossiped every 200 ms, and a way to ask until an
//! entity answers.

use std::time::Duration;

use concord::sharding::{EntityContext, ShardRegion, Sharding};
use concord::{Config, Node};

use super::{fast_config, wait_for_async};

/// Answers each number with itself.
pub struct Echo;

impl concord::sharding::Entity for Echo {
    type Message = u32;
    type Reply = u32;
    type State = ();

    async fn handle(&mut self, _: &mut EntityContext, message: u32) -> u32 {
        message
    }
}

/// Cluster metrics sampled and gossiped every 200 ms, from 100 ms after start.
pub fn fast_metrics(c: &mut Config) {
    c.update_section(|m: &mut concord::cluster_metrics::ClusterMetricsConfig| {
        m.sample_interval = Duration::from_millis(200);
        m.gossip_interval = Duration::from_millis(200);
        m.periodic_tasks_initial_delay = Duration::from_millis(100);
    })
    .expect("the metrics section parses");
}

/// An in-process node of `system` with the `echo` type, configured by `tune` after the
/// fast defaults; it joins `seeds`, or itself when there are none.
pub async fn start_echo(
    system: &str,
    seeds: &[u16],
    tune: impl FnOnce(&mut Config),
) -> (Node, ShardRegion<Echo>) {
    let mut c = fast_config(system, seeds);
    fast_metrics(&mut c);
    tune(&mut c);
    let mut sharding = Sharding::new();
    let region = sharding.init("echo", |_: &str, _: Option<()>| Echo, None);
    let node = Node::builder(c).layer(sharding).start().await.unwrap();
    if seeds.is_empty() {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    (node, region)
}

/// Asks `e<i>` until it answers with `i` (its shard may be allocating or moving).
pub async fn ask_until_answered(region: &ShardRegion<Echo>, i: u32) {
    wait_for_async(&format!("e{i} answers"), || async {
        region
            .entity_ref(format!("e{i}"))
            .ask(&i, Duration::from_secs(3))
            .await
            .is_ok_and(|reply| reply == i)
    })
    .await;
}
