//! In-process clusters for the benchmarks: `n` nodes on loopback with Akka's default
//! timings (the configuration's defaults), each built with the layers a benchmark adds.

use std::time::{Duration, Instant};

use concord_core::MemberStatus;

use concord::config::Config;
use concord::node::{Node, NodeBuilder};

/// A benchmark node's configuration: default timings, remoting on a kernel-picked port,
/// no management API, seed `seed` (none: the first node, which joins itself).
pub fn bench_config(system: &str, seed: Option<u16>) -> Config {
    let mut c = Config {
        system: system.into(),
        ..Config::default()
    };
    c.remote.port = 0;
    c.management.enabled = false;
    c.cluster.seed_nodes = seed
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .unwrap_or_default();
    c
}

/// Starts `n` nodes, `build(i, config)` adding each one's layers, and waits (up to 120 s)
/// until every node sees all `n` Up.
pub async fn start_cluster<T>(
    system: &str,
    n: usize,
    mut tune: impl FnMut(&mut Config),
    mut build: impl FnMut(usize, NodeBuilder) -> (NodeBuilder, T),
) -> anyhow::Result<Vec<(Node, T)>> {
    let mut nodes: Vec<(Node, T)> = Vec::with_capacity(n);
    for i in 0..n {
        let seed = nodes.first().map(|(f, _)| f.remoting_addr().port());
        let mut config = bench_config(system, seed);
        tune(&mut config);
        let (builder, extra) = build(i, Node::builder(config));
        let node = builder.start().await?;
        if i == 0 {
            let me = node.self_address().clone();
            node.cluster().join(me).await?;
        }
        nodes.push((node, extra));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let all_up = nodes.iter().all(|(node, _)| {
            let v = node.cluster().view();
            v.members_with_status(MemberStatus::Up).count() == n && v.unreachable.is_empty()
        });
        if all_up {
            return Ok(nodes);
        }
        if Instant::now() > deadline {
            anyhow::bail!("the {n} benchmark nodes did not form a cluster within 120 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// p-th percentile (0..=100) of `v` (sorted in place), ms.
pub fn percentile_ms(v: &mut [Duration], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort();
    let i = ((v.len() - 1) as f64 * p / 100.0).round() as usize;
    v[i.min(v.len() - 1)].as_secs_f64() * 1000.0
}
