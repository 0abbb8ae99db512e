//! `concord bench sharding`: Cluster Sharding on in-process nodes over loopback TCP.
//!
//! 1. **Tell throughput** on 3 nodes: senders on node 1 `tell` entities hosted on node 1
//!    (local) and on the other nodes (remote) as fast as the region takes them, for the
//!    measured time; the entities count what they handle. Next to it, in the same run, the
//!    raw tokio TCP baseline of `concord bench remote` with the same payload size.
//! 2. **Ask latency** p50/p99 at half of the peak ask rate: the peak with 64 concurrent
//!    askers, then the fewest askers (1, 2, 4, ...) whose throughput reaches half of it,
//!    each ask timed (closed loop: a pacing timer's 1 ms bursts would dominate the tail).
//! 3. **Rebalance to a new node**: 3 nodes with all 1000 shards allocated (default
//!    settings: 1000 shards, rebalance every 10 s, at most 20 shards per round); a 4th node
//!    starts; the time until it holds its fair share (250 − 1).
//! 4. **Memory per idle entity**: one node, `--entities` entities (1 million by default)
//!    started by one message each; the growth of the process's resident memory divided by
//!    their number.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::cluster::{percentile_ms, start_cluster};
use concord::node::Node;
use concord::sharding::{Entity, EntityContext, ShardRegion, Sharding};

/// What the benchmark entity is sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ping {
    /// Padding to the payload size.
    #[serde(with = "serde_bytes_compat")]
    pub pad: Vec<u8>,
}

/// `serde_bytes`-like encoding of a byte vector without the dependency: MessagePack
/// `bin`, not an array of integers.
pub(crate) mod serde_bytes_compat {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// The benchmark entity: counts its messages (and every entity of the node, in `handled`).
pub struct Counted {
    n: u64,
    handled: Arc<AtomicU64>,
}

impl Counted {
    /// A fresh entity counting into `handled` too.
    pub(crate) fn new(handled: Arc<AtomicU64>) -> Self {
        Counted { n: 0, handled }
    }
}

impl Entity for Counted {
    type Message = Ping;
    type Reply = u16;
    type State = u64;

    async fn handle(&mut self, ctx: &mut EntityContext, _message: Ping) -> u16 {
        self.n += 1;
        self.handled.fetch_add(1, Ordering::Relaxed);
        ctx.node().port
    }

    fn hand_off(&mut self) -> Option<u64> {
        Some(self.n)
    }
}

/// Settings.
#[derive(Clone, Debug)]
pub struct ShardingBenchSettings {
    /// Payload size of a message, bytes.
    pub payload_bytes: usize,
    /// Measured time of each throughput run.
    pub duration: Duration,
    /// Entities of the memory measurement.
    pub entities: usize,
    /// Skip the rebalance measurement (it takes about 20 s).
    pub skip_rebalance: bool,
}

impl Default for ShardingBenchSettings {
    fn default() -> Self {
        ShardingBenchSettings {
            payload_bytes: 100,
            duration: Duration::from_secs(5),
            entities: 1_000_000,
            skip_rebalance: false,
        }
    }
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ShardingBenchResult {
    /// Payload size, bytes.
    pub payload_bytes: usize,
    /// Tells/s to entities on the sending node.
    pub tell_local_msgs_per_s: f64,
    /// Tells/s to entities on the two other nodes.
    pub tell_remote_msgs_per_s: f64,
    /// Raw tokio TCP, same payload size, same run.
    pub baseline_msgs_per_s: f64,
    /// Peak asks/s (closed loop, many askers), remote entities.
    pub ask_peak_per_s: f64,
    /// Asks/s of the latency run (the fewest concurrent askers reaching half the peak).
    pub ask_rate_per_s: f64,
    /// Concurrent askers of the latency run.
    pub ask_askers: usize,
    /// Ask latency at that rate, ms.
    pub ask_p50_ms: f64,
    /// Ask latency at that rate, ms.
    pub ask_p99_ms: f64,
    /// From the 4th node's start until it held its fair share of 1000 shards, s.
    pub rebalance_s: Option<f64>,
    /// From the 4th node Up until it held its fair share, s.
    pub rebalance_after_up_s: Option<f64>,
    /// Entities of the memory run.
    pub entities: usize,
    /// Resident memory per idle entity, bytes.
    pub bytes_per_entity: f64,
}

const SENDERS: usize = 8;

fn handled_counter() -> Arc<AtomicU64> {
    Arc::new(AtomicU64::new(0))
}

fn sharding_with(handled: Arc<AtomicU64>) -> (Sharding, ShardRegion<Counted>) {
    let mut sharding = Sharding::new();
    let region = sharding.init(
        "bench",
        move |_id: &str, state: Option<u64>| Counted {
            n: state.unwrap_or(0),
            handled: handled.clone(),
        },
        None,
    );
    (sharding, region)
}

/// Finds `count` entity ids hosted on the node with remoting port `port` (`local`) or
/// elsewhere, by asking them where they run.
pub(crate) async fn entities_where(
    region: &ShardRegion<Counted>,
    port: u16,
    local: bool,
    count: usize,
    pad: &[u8],
) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for i in 0..100_000 {
        let id = format!("e{i}");
        let at = region
            .entity_ref(id.clone())
            .ask(&Ping { pad: pad.to_vec() }, Duration::from_secs(10))
            .await?;
        if (at == port) == local {
            out.push(id);
            if out.len() == count {
                return Ok(out);
            }
        }
    }
    anyhow::bail!("not enough entities found")
}

/// Tells/s from `SENDERS` tasks to `ids`, counted where they are handled.
pub(crate) async fn tell_rate(
    region: &ShardRegion<Counted>,
    ids: &[String],
    handled: &[Arc<AtomicU64>],
    pad: &[u8],
    duration: Duration,
) -> f64 {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let total = || {
        handled
            .iter()
            .map(|h| h.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let tasks: Vec<_> = (0..SENDERS)
        .map(|s| {
            let refs: Vec<_> = ids
                .iter()
                .skip(s)
                .step_by(SENDERS)
                .map(|id| region.entity_ref(id.clone()))
                .collect();
            let (stop, msg) = (stop.clone(), Ping { pad: pad.to_vec() });
            // An application's span around its sends: disabled (free) unless the bench
            // runs with tracing on (`--tracing-sampling-ratio`).
            let span = tracing::info_span!(target: "bench", "bench sender", sender = s);
            tokio::spawn(
                async move {
                    while !stop.load(Ordering::Relaxed) {
                        for r in &refs {
                            if r.tell(&msg).await.is_err() {
                                return;
                            }
                        }
                    }
                }
                .instrument(span),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (n0, t0) = (total(), Instant::now());
    tokio::time::sleep(duration).await;
    let (n1, t1) = (total(), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    // Let what is queued drain before the next run.
    let mut last = total();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = total();
        if now == last {
            break;
        }
        last = now;
    }
    (n1 - n0) as f64 / (t1 - t0).as_secs_f64()
}

/// Closed-loop asks with `askers` concurrent askers for `duration` (after a 1 s warm-up):
/// (asks/s, each ask's latency).
async fn closed_loop_asks(
    region: &ShardRegion<Counted>,
    ids: &[String],
    pad: &[u8],
    askers: usize,
    duration: Duration,
) -> (f64, Vec<Duration>) {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let measuring = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks: Vec<_> = (0..askers)
        .map(|a| {
            let r = region.entity_ref(ids[a % ids.len()].clone());
            let (stop, measuring, msg) =
                (stop.clone(), measuring.clone(), Ping { pad: pad.to_vec() });
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let ok = r.ask(&msg, Duration::from_secs(5)).await.is_ok();
                    if ok && measuring.load(Ordering::Relaxed) {
                        lat.push(t.elapsed());
                    }
                }
                lat
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(duration).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for t in tasks {
        if let Ok(l) = t.await {
            all.extend(l);
        }
    }
    (all.len() as f64 / elapsed.as_secs_f64(), all)
}

/// Spans discarded (the bench measures what tracing costs the sender, not an exporter).
#[derive(Debug)]
struct Discard;

impl opentelemetry_sdk::trace::SpanExporter for Discard {
    async fn export(
        &self,
        _batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        Ok(())
    }
}

/// Installs the subscriber of the sharding bench: logs at `CONCORD_BENCH_LOG` (`warn`, or
/// `info` as `concord node` logs) to stderr and, with a sampling `ratio` (tracing on), the
/// OpenTelemetry layer (spans discarded).
pub fn init_tracing(ratio: Option<f64>) -> anyhow::Result<()> {
    let level = match std::env::var("CONCORD_BENCH_LOG").as_deref() {
        Ok("info") => tracing_subscriber::filter::LevelFilter::INFO,
        _ => tracing_subscriber::filter::LevelFilter::WARN,
    };
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let otel = match ratio {
        None => None,
        Some(ratio) => {
            anyhow::ensure!(
                (0.0..=1.0).contains(&ratio),
                "--tracing-sampling-ratio must be from 0 to 1"
            );
            let config = concord::telemetry::TracingConfig {
                enabled: true,
                sampling_ratio: ratio,
                ..Default::default()
            };
            let (layer, telemetry) =
                concord::telemetry::layer_with_exporter(&config, Discard, false);
            // Kept for the life of the process (the bench exits when it is done).
            std::mem::forget(telemetry);
            Some(layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO))
        }
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(level),
        )
        .with(otel)
        .try_init()?;
    Ok(())
}

/// Runs the benchmark.
pub async fn run_sharding(s: &ShardingBenchSettings) -> anyhow::Result<ShardingBenchResult> {
    let pad = vec![0x5a; s.payload_bytes.saturating_sub(8)];
    // 1-2: throughput and latency on 3 nodes.
    let counters: Vec<Arc<AtomicU64>> = (0..3).map(|_| handled_counter()).collect();
    let c2 = counters.clone();
    let nodes = start_cluster(
        "bench-sharding",
        3,
        |_| {},
        move |i, builder| {
            let (sharding, region) = sharding_with(c2[i].clone());
            (builder.layer(sharding), region)
        },
    )
    .await?;
    let (node1, region) = (&nodes[0].0, nodes[0].1.clone());
    let port = node1.remoting_addr().port();
    let local = entities_where(&region, port, true, 64, &pad).await?;
    let remote = entities_where(&region, port, false, 64, &pad).await?;
    let tell_local = tell_rate(&region, &local, &counters, &pad, s.duration).await;
    let tell_remote = tell_rate(&region, &remote, &counters, &pad, s.duration).await;
    // The peak with many askers; then the fewest askers whose throughput reaches half of
    // it, and their latencies (closed loop: no burst of a pacing timer in the figures).
    let (ask_peak_rate, _) = closed_loop_asks(&region, &remote, &pad, 64, s.duration).await;
    let mut askers = 1;
    let (ask_rate, mut lat) = loop {
        let (rate, lat) =
            closed_loop_asks(&region, &remote, &pad, askers, Duration::from_secs(1)).await;
        if rate >= ask_peak_rate / 2.0 || askers >= 64 {
            break closed_loop_asks(&region, &remote, &pad, askers, s.duration).await;
        }
        drop(lat);
        askers *= 2;
    };
    let p50 = percentile_ms(&mut lat, 50.0);
    let p99 = percentile_ms(&mut lat, 99.0);
    for (n, _) in &nodes {
        n.stop().await;
    }
    let baseline = super::baseline::baseline_run(
        &Bytes::from(vec![0x5a; s.payload_bytes]),
        Duration::from_secs(1),
        s.duration,
    )
    .await?;
    // 3: rebalance to a 4th node with the default settings.
    let (rebalance_s, rebalance_after_up_s) = if s.skip_rebalance {
        (None, None)
    } else {
        let (a, b) = rebalance().await?;
        (Some(a), Some(b))
    };
    // 4: memory per idle entity.
    let bytes_per_entity = memory_per_entity(s.entities).await?;
    Ok(ShardingBenchResult {
        payload_bytes: s.payload_bytes,
        tell_local_msgs_per_s: tell_local,
        tell_remote_msgs_per_s: tell_remote,
        baseline_msgs_per_s: baseline,
        ask_peak_per_s: ask_peak_rate,
        ask_rate_per_s: ask_rate,
        ask_askers: askers,
        ask_p50_ms: p50,
        ask_p99_ms: p99,
        rebalance_s,
        rebalance_after_up_s,
        entities: s.entities,
        bytes_per_entity,
    })
}

/// Seconds from the start (and from Up) of a 4th node until it holds its fair share of
/// 1000 shards.
async fn rebalance() -> anyhow::Result<(f64, f64)> {
    let counters: Vec<Arc<AtomicU64>> = (0..4).map(|_| handled_counter()).collect();
    let c2 = counters.clone();
    let mut nodes = start_cluster(
        "bench-rebalance",
        3,
        |_| {},
        move |i, builder| {
            let (sharding, region) = sharding_with(c2[i].clone());
            (builder.layer(sharding), region)
        },
    )
    .await?;
    // Allocate every shard: one entity per shard.
    let region = nodes[0].1.clone();
    let mut covered = std::collections::BTreeSet::new();
    let mut i = 0u64;
    while covered.len() < 1000 {
        let id = format!("r{i}");
        i += 1;
        if covered.insert(concord_core::sharding::shard_id(&id, 1000)) {
            region
                .entity_ref(id)
                .tell(&Ping { pad: Vec::new() })
                .await?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while (0..3)
        .map(|k| counters[k].load(Ordering::Relaxed))
        .sum::<u64>()
        < 1000
    {
        if Instant::now() > deadline {
            anyhow::bail!("the 1000 shards were not all started");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seed = nodes[0].0.remoting_addr().port();
    let started = Instant::now();
    let (sharding, region4) = sharding_with(counters[3].clone());
    let config = super::cluster::bench_config("bench-rebalance", Some(seed));
    let node4 = Node::builder(config).layer(sharding).start().await?;
    let mut up_at = None;
    nodes.push((node4, region4));
    let deadline = Instant::now() + Duration::from_secs(300);
    let result = loop {
        if up_at.is_none()
            && nodes[3]
                .0
                .cluster()
                .view()
                .self_member()
                .is_some_and(|m| m.status == concord_core::MemberStatus::Up)
        {
            up_at = Some(started.elapsed());
        }
        let held = nodes[3].1.local_shards().await.map_or(0, |v| v.len());
        if held >= 249 {
            let total = started.elapsed().as_secs_f64();
            break Ok((total, total - up_at.unwrap_or_default().as_secs_f64()));
        }
        if Instant::now() > deadline {
            break Err(anyhow::anyhow!("the new node never got its share"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (n, _) in &nodes {
        n.stop().await;
    }
    result
}

/// Resident memory of this process, bytes (Linux `VmRSS`).
fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Bytes of resident memory per idle entity with `n` entities on one node.
async fn memory_per_entity(n: usize) -> anyhow::Result<f64> {
    let handled = handled_counter();
    let h2 = handled.clone();
    let nodes = start_cluster(
        "bench-memory",
        1,
        |c| {
            // Idle entities stay (no passivation), and every message is taken.
            c.update_section(|s: &mut concord::sharding::ShardingConfig| {
                s.passivation.idle_timeout = None;
            })
            .expect("the section parses");
        },
        move |_, builder| {
            let (sharding, region) = sharding_with(h2.clone());
            (builder.layer(sharding), region)
        },
    )
    .await?;
    let region = nodes[0].1.clone();
    // Warm up the allocator and the shards with a first batch, then measure the rest.
    let warm = (n / 100).max(1000).min(n);
    let send = |from: usize, to: usize| {
        let region = region.clone();
        async move {
            let msg = Ping { pad: Vec::new() };
            for i in from..to {
                region.entity_ref(format!("m{i}")).tell(&msg).await?;
            }
            anyhow::Ok(())
        }
    };
    send(0, warm).await?;
    wait_count(&handled, warm as u64).await?;
    let before = rss_bytes().unwrap_or(0);
    let per_task = (n - warm).div_ceil(SENDERS);
    let tasks: Vec<_> = (0..SENDERS)
        .map(|k| {
            let from = warm + k * per_task;
            let to = (from + per_task).min(n);
            tokio::spawn(send(from, to))
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    wait_count(&handled, n as u64).await?;
    let after = rss_bytes().unwrap_or(0);
    for (node, _) in &nodes {
        node.stop().await;
    }
    Ok(after.saturating_sub(before) as f64 / (n - warm).max(1) as f64)
}

async fn wait_count(c: &AtomicU64, n: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while c.load(Ordering::Relaxed) < n {
        if Instant::now() > deadline {
            anyhow::bail!(
                "only {} of {n} messages were handled",
                c.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The human-readable report.
pub fn report(r: &ShardingBenchResult) -> String {
    let opt = |v: Option<f64>| v.map_or("skipped".to_string(), |s| format!("{s:.1} s"));
    format!(
        "concord bench sharding: {} B messages, 3 nodes on loopback, {} CPUs\n\
         \x20 tell, local entities     {:>12.0} msg/s\n\
         \x20 tell, remote entities    {:>12.0} msg/s   (target >= 500000)\n\
         \x20 raw tokio TCP baseline   {:>12.0} msg/s\n\
         \x20 ask peak (64 askers)     {:>12.0} asks/s\n\
         \x20 ask at {:.0}/s ({} askers) p50 {:.3} ms, p99 {:.3} ms   (target p99 <= 1 ms at >= 50 % of the peak)\n\
         \x20 rebalance to a 4th node  {} from its start ({} from Up) to 249 of 1000 shards (target <= 30 s)\n\
         \x20 memory per idle entity   {:>12.0} B with {} entities   (target <= 1024 B)\n",
        r.payload_bytes,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        r.tell_local_msgs_per_s,
        r.tell_remote_msgs_per_s,
        r.baseline_msgs_per_s,
        r.ask_peak_per_s,
        r.ask_rate_per_s,
        r.ask_askers,
        r.ask_p50_ms,
        r.ask_p99_ms,
        opt(r.rebalance_s),
        opt(r.rebalance_after_up_s),
        r.bytes_per_entity,
        r.entities,
    )
}
