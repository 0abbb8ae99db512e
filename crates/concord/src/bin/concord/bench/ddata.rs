//! `concord bench ddata`: Distributed Data on 5 in-process nodes on loopback (default
//! replicator settings, default cluster timings).
//!
//! 1. **Quorum latency**: `requests` sequential `WriteMajority` updates of a `GCounter`
//!    from one node, then as many `ReadMajority` reads from another: p50 and p99, ms.
//! 2. **Big ORSet**: one node adds `n` new elements to an `ORSet<String>` (`WriteLocal`,
//!    one update per element) for n = 10 000 and 100 000: updates per second, then the time
//!    until all 5 replicas hold all `n` elements (polled every 50 ms).
//! 3. **Steady-state gossip**: with every replica converged and nothing changing, the
//!    Distributed Data protocol's bytes per second (all nodes together) over `idle`.

use std::time::{Duration, Instant};

use concord_core::ddata::{GCounter, Key, ORSet, ReadConsistency, WriteConsistency};
use concord_core::ProtocolId;
use serde::Serialize;

use super::cluster::{percentile_ms, start_cluster};
use concord::ddata::{DistributedData, Replicator};
use concord::node::Node;

/// What to measure.
#[derive(Clone, Debug)]
pub struct DdataBenchSettings {
    /// Quorum requests of each kind.
    pub requests: usize,
    /// ORSet sizes.
    pub set_sizes: Vec<usize>,
    /// Steady-state window.
    pub idle: Duration,
}

impl Default for DdataBenchSettings {
    fn default() -> Self {
        DdataBenchSettings {
            requests: 2_000,
            set_sizes: vec![10_000, 100_000],
            idle: Duration::from_secs(10),
        }
    }
}

/// One ORSet run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SetRun {
    /// Elements added.
    pub elements: usize,
    /// Local updates per second on the writing node.
    pub updates_per_s: f64,
    /// From the last update to all 5 replicas holding every element, ms.
    pub converge_ms: f64,
    /// The set's encoded size, bytes.
    pub encoded_bytes: usize,
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DdataBenchResult {
    /// WriteMajority latency, p50 / p99, ms.
    pub write_majority_p50_ms: f64,
    /// See above.
    pub write_majority_p99_ms: f64,
    /// ReadMajority latency, p50 / p99, ms.
    pub read_majority_p50_ms: f64,
    /// See above.
    pub read_majority_p99_ms: f64,
    /// Distributed Data messages the writing node sent per `WriteMajority` (2 writes to
    /// other replicas expected with 5 nodes, plus background gossip and deltas).
    pub messages_per_write: f64,
    /// The ORSet runs.
    pub sets: Vec<SetRun>,
    /// Distributed Data bytes per second, all 5 nodes, nothing changing.
    pub steady_gossip_bytes_per_s: f64,
}

const NODES: usize = 5;

/// Distributed Data (messages, bytes) sent by `nodes`.
fn ddata_out(nodes: &[(Node, Replicator)]) -> (u64, u64) {
    let mut out = (0, 0);
    for (n, _) in nodes {
        for (p, s) in n.transport().stats().protocols() {
            if p == ProtocolId::DISTRIBUTED_DATA {
                out.0 += s.messages_out.load(std::sync::atomic::Ordering::Relaxed);
                out.1 += s.bytes_out.load(std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
    out
}

/// Runs every measurement.
pub async fn run_ddata(settings: &DdataBenchSettings) -> anyhow::Result<DdataBenchResult> {
    let nodes = start_cluster(
        "bench-ddata",
        NODES,
        // A 100 000-element set is a few MB: let it travel whole.
        |c| c.remote.maximum_large_frame_size = 32 * 1024 * 1024,
        |_, builder| {
            let (layer, replicator) = DistributedData::new();
            (builder.layer(layer), replicator)
        },
    )
    .await?;
    let result = measure(&nodes, settings).await;
    for (n, _) in &nodes {
        n.stop().await;
    }
    result
}

async fn measure(
    nodes: &[(Node, Replicator)],
    s: &DdataBenchSettings,
) -> anyhow::Result<DdataBenchResult> {
    let counter: Key<GCounter> = Key::new("bench-counter")?;
    let (w, r) = (&nodes[0].1, &nodes[1].1);
    let me = w.replica();
    let mut writes = Vec::with_capacity(s.requests);
    let (m0, _) = ddata_out(&nodes[..1]);
    for _ in 0..s.requests {
        let t = Instant::now();
        w.update(
            &counter,
            WriteConsistency::majority(5_000),
            GCounter::new,
            move |c| c.increment(me, 1),
        )
        .await?;
        writes.push(t.elapsed());
    }
    let messages_per_write = (ddata_out(&nodes[..1]).0 - m0) as f64 / s.requests.max(1) as f64;
    let mut reads = Vec::with_capacity(s.requests);
    for _ in 0..s.requests {
        let t = Instant::now();
        r.get(&counter, ReadConsistency::majority(5_000)).await?;
        reads.push(t.elapsed());
    }
    let mut sets = Vec::new();
    for &n in &s.set_sizes {
        let key: Key<ORSet<String>> = Key::new(format!("bench-set-{n}"))?;
        let t = Instant::now();
        for i in 0..n {
            let e = format!("element-{i}");
            w.update(&key, WriteConsistency::Local, ORSet::new, move |set| {
                set.add(me, e)
            })
            .await?;
        }
        let updates_per_s = n as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        let deadline = t + Duration::from_secs(300);
        loop {
            let mut all = true;
            for (_, rep) in nodes {
                if rep
                    .get(&key, ReadConsistency::Local)
                    .await?
                    .map(|s| s.len())
                    != Some(n)
                {
                    all = false;
                    break;
                }
            }
            if all {
                break;
            }
            if Instant::now() > deadline {
                anyhow::bail!("the {n}-element set did not converge within 300 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let converge_ms = t.elapsed().as_secs_f64() * 1000.0;
        let encoded_bytes = w
            .keys()
            .await?
            .into_iter()
            .find(|k| k.key == key.id())
            .map_or(0, |k| k.size_bytes);
        sets.push(SetRun {
            elements: n,
            updates_per_s,
            converge_ms,
            encoded_bytes,
        });
    }
    // Let the last deltas settle, then count the steady state.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (b0, t0) = (ddata_out(nodes).1, Instant::now());
    tokio::time::sleep(s.idle).await;
    let steady = (ddata_out(nodes).1 - b0) as f64 / t0.elapsed().as_secs_f64();
    Ok(DdataBenchResult {
        write_majority_p50_ms: percentile_ms(&mut writes, 50.0),
        write_majority_p99_ms: percentile_ms(&mut writes, 99.0),
        read_majority_p50_ms: percentile_ms(&mut reads, 50.0),
        read_majority_p99_ms: percentile_ms(&mut reads, 99.0),
        messages_per_write,
        sets,
        steady_gossip_bytes_per_s: steady,
    })
}

/// The human-readable report.
pub fn report(r: &DdataBenchResult) -> String {
    let mut s = format!(
        "concord bench ddata: {NODES} nodes in one process on loopback, default settings, {} CPUs\n\
         \x20 WriteMajority   p50 {:>7.2} ms   p99 {:>7.2} ms\n\
         \x20 ReadMajority    p50 {:>7.2} ms   p99 {:>7.2} ms\n\
         \x20 messages sent per WriteMajority: {:.2}\n",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        r.write_majority_p50_ms,
        r.write_majority_p99_ms,
        r.read_majority_p50_ms,
        r.read_majority_p99_ms,
        r.messages_per_write,
    );
    for set in &r.sets {
        s.push_str(&format!(
            "  ORSet {:>7} elements: {:>9.0} updates/s, all {NODES} replicas converged {:>7.0} ms after the last update, {} bytes\n",
            set.elements, set.updates_per_s, set.converge_ms, set.encoded_bytes
        ));
    }
    s.push_str(&format!(
        "  steady state: {:.0} bytes/s of Distributed Data traffic (all nodes)\n",
        r.steady_gossip_bytes_per_s
    ));
    s
}
