//! `concord bench kv`: the key-value store on 5 in-process nodes on loopback (default
//! timings, N = 3, R = W = 2, redb files in a temporary directory).
//!
//! 1. **Puts and gets**: for each value size, `clients` concurrent clients spread over the
//!    five nodes' handles put new keys for `duration` (inserts: no siblings), then get the
//!    keys they wrote for `duration`: operations per second, and each operation's latency
//!    p50 / p99 (closed loop: the latency at that concurrency).
//! 2. **Bytes on disk per key**: on a fresh 5-node cluster, `transfer_keys` keys of 100 B
//!    are stored; the five redb files' growth divided by the replicas stored (3 per key).
//! 3. **Transfer on join**: with those keys stored, a sixth node starts; the time from it
//!    being Up until every key has exactly three replicas and none is misplaced, and the
//!    keys it received per second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use concord_core::kv::{Quorum, ReadOptions, WriteOptions};
use serde::Serialize;

use super::cluster::{bench_config, percentile_ms, start_cluster};
use concord::kv::{KeyValueStore, KvStore};
use concord::node::Node;

/// What to measure.
#[derive(Clone, Debug)]
pub struct KvBenchSettings {
    /// Value sizes, bytes.
    pub value_sizes: Vec<usize>,
    /// Measured time of each put and get run.
    pub duration: Duration,
    /// Concurrent clients.
    pub clients: usize,
    /// Keys stored before the sixth node joins (0: skip).
    pub transfer_keys: usize,
}

impl Default for KvBenchSettings {
    fn default() -> Self {
        KvBenchSettings {
            value_sizes: vec![100, 10 * 1024],
            duration: Duration::from_secs(5),
            clients: 32,
            transfer_keys: 50_000,
        }
    }
}

/// One value size's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct KvRun {
    /// Value size, bytes.
    pub value_bytes: usize,
    /// Puts per second (all clients).
    pub puts_per_s: f64,
    /// Put latency p50 / p99, ms.
    pub put_p50_ms: f64,
    /// See above.
    pub put_p99_ms: f64,
    /// Gets per second.
    pub gets_per_s: f64,
    /// Get latency p50 / p99, ms.
    pub get_p50_ms: f64,
    /// See above.
    pub get_p99_ms: f64,
    /// Failed operations (should be 0).
    pub errors: u64,
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct KvBenchResult {
    /// Clients of the put/get runs.
    pub clients: usize,
    /// Per value size.
    pub runs: Vec<KvRun>,
    /// Keys stored when the sixth node joined.
    pub transfer_keys: usize,
    /// From the first node seeing the sixth Up to three replicas of every key, none
    /// misplaced, s.
    pub transfer_s: f64,
    /// Keys the sixth node received, per second.
    pub transfer_keys_per_s: f64,
    /// Keys the sixth node holds at the end.
    pub new_node_keys: u64,
    /// Growth of the redb files per stored replica of a 100 B key, bytes.
    pub disk_bytes_per_replica: f64,
}

const NODES: usize = 5;

fn tune(dir: &std::path::Path) -> impl FnMut(&mut concord::config::Config) + '_ {
    let mut i = 0;
    move |c| {
        c.data_dir = dir.join(format!("node-{i}")).display().to_string();
        i += 1;
    }
}

/// Runs every measurement.
pub async fn run_kv(s: &KvBenchSettings) -> anyhow::Result<KvBenchResult> {
    let dir = std::env::temp_dir().join(format!("concord-bench-kv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let runs = {
        let nodes = start(&dir.join("runs"), "bench-kv").await?;
        let r = put_get_runs(&nodes, s).await;
        stop(&nodes).await;
        r?
    };
    let transfer = {
        let mut nodes = start(&dir.join("transfer"), "bench-kv-join").await?;
        let r = disk_and_transfer(&mut nodes, s, &dir.join("transfer")).await;
        stop(&nodes).await;
        r?
    };
    let _ = std::fs::remove_dir_all(&dir);
    Ok(KvBenchResult {
        clients: s.clients,
        runs,
        ..transfer
    })
}

async fn start(dir: &std::path::Path, system: &str) -> anyhow::Result<Vec<(Node, KvStore)>> {
    start_cluster(system, NODES, tune(dir), |_, builder| {
        let (layer, store) = KeyValueStore::new();
        (builder.layer(layer), store)
    })
    .await
}

async fn stop(nodes: &[(Node, KvStore)]) {
    for (n, _) in nodes {
        n.stop().await;
    }
}

/// Latencies of one run, its errors, and how many operations each client made.
struct Timed {
    latencies: Vec<Duration>,
    errors: u64,
    took: Duration,
    per_client: Vec<u64>,
}

/// `clients` tasks running `op(client, i)` until `duration` passes.
async fn run_clients<F, Fut>(clients: usize, duration: Duration, op: F) -> Timed
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (stop, op) = (stop.clone(), op.clone());
        tasks.spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                if op(c, i).await {
                    lat.push(t.elapsed());
                } else {
                    errors += 1;
                }
                i += 1;
            }
            (c, lat, errors, i)
        });
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut out = Timed {
        latencies: Vec::new(),
        errors: 0,
        took: Duration::ZERO,
        per_client: vec![0; clients],
    };
    while let Some(r) = tasks.join_next().await {
        if let Ok((c, lat, errors, made)) = r {
            out.latencies.extend(lat);
            out.errors += errors;
            out.per_client[c] = made;
        }
    }
    out.took = started.elapsed();
    out
}

fn key(size: usize, client: usize, i: u64) -> String {
    format!("bench-{size}-{client}-{i}")
}

fn options() -> (WriteOptions, ReadOptions) {
    (
        WriteOptions {
            n: Some(3),
            w: Some(Quorum::Count(2)),
        },
        ReadOptions {
            n: Some(3),
            r: Some(Quorum::Count(2)),
        },
    )
}

async fn put_get_runs(
    nodes: &[(Node, KvStore)],
    s: &KvBenchSettings,
) -> anyhow::Result<Vec<KvRun>> {
    let stores: Vec<KvStore> = nodes.iter().map(|(_, k)| k.clone()).collect();
    let (w, r) = options();
    let mut runs = Vec::new();
    for &size in &s.value_sizes {
        let value = vec![b'v'; size];
        let put = {
            let (stores, value) = (stores.clone(), value.clone());
            move |c: usize, i: u64| {
                let store = stores[c % stores.len()].clone();
                let value = value.clone();
                async move { store.put(&key(size, c, i), value, None, w).await.is_ok() }
            }
        };
        let mut puts = run_clients(s.clients, s.duration, put).await;
        let written = Arc::new(puts.per_client.clone());
        let get = {
            let stores = stores.clone();
            move |c: usize, i: u64| {
                let store = stores[(c + 1) % stores.len()].clone();
                let k = key(size, c, i % written[c].max(1));
                async move { store.get(&k, r).await.is_ok_and(|v| !v.is_not_found()) }
            }
        };
        let mut gets = run_clients(s.clients, s.duration, get).await;
        runs.push(KvRun {
            value_bytes: size,
            puts_per_s: puts.latencies.len() as f64 / puts.took.as_secs_f64(),
            put_p50_ms: percentile_ms(&mut puts.latencies, 50.0),
            put_p99_ms: percentile_ms(&mut puts.latencies, 99.0),
            gets_per_s: gets.latencies.len() as f64 / gets.took.as_secs_f64(),
            get_p50_ms: percentile_ms(&mut gets.latencies, 50.0),
            get_p99_ms: percentile_ms(&mut gets.latencies, 99.0),
            errors: puts.errors + gets.errors,
        });
    }

    Ok(runs)
}

/// Disk bytes per key and the transfer to a joining node; `clients` and `runs` are left
/// empty.
async fn disk_and_transfer(
    nodes: &mut Vec<(Node, KvStore)>,
    s: &KvBenchSettings,
    dir: &std::path::Path,
) -> anyhow::Result<KvBenchResult> {
    let stores: Vec<KvStore> = nodes.iter().map(|(_, k)| k.clone()).collect();
    let (w, _) = options();
    let mut disk_before = 0u64;
    for st in &stores {
        disk_before += st.status().await?.file_bytes;
    }
    let keys_before = sum_keys(&stores).await;
    let value = vec![b't'; 100];
    let mut tasks = tokio::task::JoinSet::new();
    let writers = s.clients.max(1);
    for c in 0..writers {
        let (stores, value) = (stores.clone(), value.clone());
        let total = s.transfer_keys;
        tasks.spawn(async move {
            for i in (c..total).step_by(writers) {
                let store = &stores[i % stores.len()];
                store
                    .put(&format!("transfer-{i}"), value.clone(), None, w)
                    .await?;
            }
            Ok::<(), concord_core::kv::KvError>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    let stored: u64 = sum_keys(&stores).await;
    let mut disk = 0u64;
    for st in &stores {
        disk += st.status().await?.file_bytes;
    }
    let disk_bytes_per_replica =
        disk.saturating_sub(disk_before) as f64 / stored.saturating_sub(keys_before).max(1) as f64;

    let mut transfer_s = 0.0;
    let mut new_node_keys = 0;
    if s.transfer_keys > 0 {
        let seed = nodes[0].0.remoting_addr().port();
        let mut config = bench_config("bench-kv-join", Some(seed));
        config.data_dir = dir.join("node-new").display().to_string();
        let (layer, store) = KeyValueStore::new();
        let node = Node::builder(config).layer(layer).start().await?;
        let all: Vec<KvStore> = stores.iter().cloned().chain([store.clone()]).collect();
        nodes.push((node, store.clone()));
        // The clock starts when any node first sees the sixth Up (the moment rings change).
        let deadline = Instant::now() + Duration::from_secs(120);
        while nodes.iter().all(|(n, _)| {
            n.cluster()
                .view()
                .members_with_status(concord_core::MemberStatus::Up)
                .count()
                < NODES + 1
        }) {
            anyhow::ensure!(Instant::now() < deadline, "the sixth node did not come Up");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let up = Instant::now();
        let deadline = up + Duration::from_secs(600);
        loop {
            let mut settled = true;
            for st in &all {
                let r = st.status().await?;
                settled &= r.status.misplaced_keys == 0 && r.status.pending_segments == 0;
            }
            if settled && sum_keys(&all).await == stored {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "transfers did not finish in 600 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        transfer_s = up.elapsed().as_secs_f64();
        new_node_keys = store.status().await?.status.keys;
    }
    Ok(KvBenchResult {
        clients: 0,
        runs: Vec::new(),
        transfer_keys: s.transfer_keys,
        transfer_s,
        transfer_keys_per_s: if transfer_s > 0.0 {
            new_node_keys as f64 / transfer_s
        } else {
            0.0
        },
        new_node_keys,
        disk_bytes_per_replica,
    })
}

async fn sum_keys(stores: &[KvStore]) -> u64 {
    let mut total = 0;
    for s in stores {
        total += s.status().await.map(|r| r.status.keys).unwrap_or(0);
    }
    total
}

/// The figures as text.
pub fn report(r: &KvBenchResult) -> String {
    let mut out = format!(
        "key-value store, 5 nodes on loopback, N=3 R=2 W=2, {} clients\n",
        r.clients
    );
    out.push_str("value     puts/s  put p50/p99 ms     gets/s  get p50/p99 ms  errors\n");
    for x in &r.runs {
        out.push_str(&format!(
            "{:>6} B {:>9.0}  {:>6.2} / {:<6.2} {:>9.0}  {:>6.2} / {:<6.2} {:>6}\n",
            x.value_bytes,
            x.puts_per_s,
            x.put_p50_ms,
            x.put_p99_ms,
            x.gets_per_s,
            x.get_p50_ms,
            x.get_p99_ms,
            x.errors
        ));
    }
    if r.transfer_keys > 0 {
        out.push_str(&format!(
            "a 6th node joins with {} keys stored: three replicas of every key again after {:.1} s; it received {} keys ({:.0} keys/s)\n",
            r.transfer_keys, r.transfer_s, r.new_node_keys, r.transfer_keys_per_s
        ));
    }
    out.push_str(&format!(
        "disk: {:.0} bytes per stored replica of a 100 B key (growth of the redb files / replicas)\n",
        r.disk_bytes_per_replica
    ));
    out
}
