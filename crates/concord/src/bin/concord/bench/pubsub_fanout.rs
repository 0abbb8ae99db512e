//! `concord bench pubsub-fanout`: distributed pub-sub fan-out on 5 in-process nodes over
//! loopback TCP (Akka's default timings): 1,000 subscribers of one topic, 200 on each node,
//! each a task that receives and decodes every message; one publisher on node 1.
//!
//! 1. **Burst**: `--messages` messages published as fast as the publisher may, with at most
//!    `--window` messages not yet received by every subscriber (a publisher that outruns
//!    its subscribers only fills their mailboxes — `mailbox-size` 1000 — and loses
//!    messages: pub-sub is at most once). Deliveries per second: every subscriber's
//!    receipts, from the first publish to the last receipt.
//! 2. **Paced**: `--paced-messages` messages at `--paced-rate` per second, each one's
//!    latency from `publish` to its receipt by the **last** of the 1,000 subscribers
//!    (p50/p99); the same latency of the burst's messages is reported too.
//!
//! Node-wide mailbox bytes: the gauge `concord_receptionist_mailbox_bytes{node}` (bytes
//! waiting in a node's handles' and subscribers' mailboxes together, a published message
//! counted once however many local subscribers share it), which each node sets at its
//! receptionist tick — every 50 ms here (`receptionist.pruning-interval`) — read from the
//! process's Prometheus registry every 50 ms; the peak per node over the burst.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::cluster::{percentile_ms, start_cluster};
use super::sharding::serde_bytes_compat;
use concord::ddata::DistributedData;
use concord::pubsub::{PubSub, Topic};
use concord::receptionist::{ReceptionistConfig, ReceptionistLayer};

/// Settings.
#[derive(Clone, Debug)]
pub struct FanoutBenchSettings {
    /// Subscribers over all nodes.
    pub subscribers: usize,
    /// Nodes.
    pub nodes: usize,
    /// Messages of the burst.
    pub messages: usize,
    /// Messages of the burst in flight at most (not yet received by every subscriber).
    pub window: usize,
    /// Messages of the paced run.
    pub paced_messages: usize,
    /// Publishes per second of the paced run.
    pub paced_rate: f64,
    /// Message size, bytes (the encoded message).
    pub payload_bytes: usize,
}

impl Default for FanoutBenchSettings {
    fn default() -> Self {
        FanoutBenchSettings {
            subscribers: 1000,
            nodes: 5,
            messages: 2000,
            window: 32,
            paced_messages: 200,
            paced_rate: 50.0,
            payload_bytes: 100,
        }
    }
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FanoutBenchResult {
    /// Nodes.
    pub nodes: usize,
    /// Subscribers over all nodes.
    pub subscribers: usize,
    /// Message size, bytes.
    pub payload_bytes: usize,
    /// Messages of the burst.
    pub messages: usize,
    /// In flight at most during the burst.
    pub window: usize,
    /// Deliveries (a message received by one subscriber) per second during the burst.
    pub deliveries_per_s: f64,
    /// Messages published per second during the burst.
    pub published_per_s: f64,
    /// Deliveries missing at the end (lost to full mailboxes), burst and paced runs.
    pub lost_deliveries: u64,
    /// Publish → last subscriber, burst messages, ms.
    pub burst_last_p50_ms: f64,
    /// Publish → last subscriber, burst messages, ms.
    pub burst_last_p99_ms: f64,
    /// Publishes per second of the paced run.
    pub paced_rate: f64,
    /// Publish → last subscriber, paced messages, ms.
    pub paced_last_p50_ms: f64,
    /// Publish → last subscriber, paced messages, ms.
    pub paced_last_p99_ms: f64,
    /// Peak of `concord_receptionist_mailbox_bytes` per node during the burst, bytes
    /// (node 1, the publisher, first).
    pub peak_mailbox_bytes_per_node: Vec<u64>,
    /// Peak of the nodes' gauges summed at one reading, bytes.
    pub peak_mailbox_bytes_total: u64,
}

/// What is published.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Fanout {
    seq: u32,
    #[serde(with = "serde_bytes_compat")]
    pad: Vec<u8>,
}

/// Per message: when it was published, when the latest subscriber got it (ns since the
/// bench's epoch), and how many subscribers got it.
struct Track {
    epoch: Instant,
    published: Vec<AtomicU64>,
    last: Vec<AtomicU64>,
    count: Vec<AtomicU64>,
    deliveries: AtomicU64,
}

impl Track {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// The `concord_receptionist_mailbox_bytes` gauge of each of `nodes` (addresses) now.
fn mailbox_bytes(nodes: &[String]) -> Vec<u64> {
    let text = concord::metrics::render();
    nodes
        .iter()
        .map(|n| {
            let label = format!("node=\"{n}\"");
            text.lines()
                .find(|l| {
                    l.starts_with("concord_receptionist_mailbox_bytes{") && l.contains(&label)
                })
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .map_or(0, |v| v as u64)
        })
        .collect()
}

/// Latency to the last subscriber of the messages `range` that every subscriber got, ms.
fn last_latencies(t: &Track, range: std::ops::Range<usize>, subscribers: u64) -> Vec<Duration> {
    range
        .filter(|i| t.count[*i].load(Ordering::Relaxed) == subscribers)
        .map(|i| {
            let (p, l) = (
                t.published[i].load(Ordering::Relaxed),
                t.last[i].load(Ordering::Relaxed),
            );
            Duration::from_nanos(l.saturating_sub(p))
        })
        .collect()
}

/// Waits until `deliveries` reaches `target` or stops moving for 2 s.
async fn settle(t: &Track, target: u64) {
    let mut last = (t.deliveries.load(Ordering::Relaxed), Instant::now());
    loop {
        let now = t.deliveries.load(Ordering::Relaxed);
        if now >= target {
            return;
        }
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() > Duration::from_secs(2) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Publishes message `seq` through `topic`, noting when.
async fn publish(topic: &Topic<Fanout>, t: &Track, seq: usize, pad: &[u8]) -> anyhow::Result<()> {
    let m = Fanout {
        seq: seq as u32,
        pad: pad.to_vec(),
    };
    t.published[seq].store(t.now_ns(), Ordering::Relaxed);
    topic.publish(&m).await?;
    Ok(())
}

/// Runs the benchmark.
pub async fn run_fanout(s: &FanoutBenchSettings) -> anyhow::Result<FanoutBenchResult> {
    anyhow::ensure!(
        s.nodes >= 1 && s.subscribers >= s.nodes,
        "subscribers >= nodes >= 1"
    );
    anyhow::ensure!(s.window >= 1 && s.paced_rate > 0.0, "window >= 1, rate > 0");
    let _ = concord::metrics::handle();
    let total = s.messages + s.paced_messages;
    let track = Arc::new(Track {
        epoch: Instant::now(),
        published: (0..total).map(|_| AtomicU64::new(0)).collect(),
        last: (0..total).map(|_| AtomicU64::new(0)).collect(),
        count: (0..total).map(|_| AtomicU64::new(0)).collect(),
        deliveries: AtomicU64::new(0),
    });
    let nodes = start_cluster(
        "bench-fanout",
        s.nodes,
        |c| {
            c.update_section(|r: &mut ReceptionistConfig| {
                r.pruning_interval = Duration::from_millis(50);
            })
            .expect("the receptionist section parses");
        },
        |_, builder| {
            let (ddata, replicator) = DistributedData::new();
            let (layer, receptionist) = ReceptionistLayer::new(replicator);
            (builder.layer(ddata).layer(layer), PubSub::new(receptionist))
        },
    )
    .await?;
    let addrs: Vec<String> = nodes
        .iter()
        .map(|(n, _)| n.self_address().to_string())
        .collect();
    let mut subscribers = Vec::new();
    for k in 0..s.subscribers {
        let topic = nodes[k % s.nodes].1.topic::<Fanout>("fanout")?;
        let mut sub = topic.subscribe().await?;
        let t = track.clone();
        subscribers.push(tokio::spawn(async move {
            while let Some(m) = sub.recv().await {
                let i = m.seq as usize;
                if i < t.last.len() {
                    t.last[i].fetch_max(t.now_ns(), Ordering::Relaxed);
                    t.count[i].fetch_add(1, Ordering::Relaxed);
                }
                t.deliveries.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let topic = nodes[0].1.topic::<Fanout>("fanout")?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while topic.subscribers().await?.reachable.len() < s.nodes {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the subscribers were not listed within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pad = vec![0x5a; s.payload_bytes.saturating_sub(8)];
    let subs = s.subscribers as u64;

    // 1. Burst, with the mailbox gauges read meanwhile.
    let reading = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let monitor = {
        let (reading, addrs) = (reading.clone(), addrs.clone());
        tokio::spawn(async move {
            let mut peak = vec![0u64; addrs.len()];
            let mut peak_total = 0;
            while reading.load(Ordering::Relaxed) {
                let now = mailbox_bytes(&addrs);
                for (p, v) in peak.iter_mut().zip(&now) {
                    *p = (*p).max(*v);
                }
                peak_total = peak_total.max(now.iter().sum::<u64>());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (peak, peak_total)
        })
    };
    let started = Instant::now();
    for seq in 0..s.messages {
        // At most `window` messages not yet received by everyone (or a 1 s wait when a
        // subscriber lost one).
        let floor = (seq.saturating_sub(s.window) as u64) * subs;
        let wait = Instant::now();
        while track.deliveries.load(Ordering::Relaxed) < floor
            && wait.elapsed() < Duration::from_secs(1)
        {
            // The timer's 1 ms tick: the window keeps the subscribers busy meanwhile.
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        publish(&topic, &track, seq, &pad).await?;
    }
    let published_in = started.elapsed();
    settle(&track, s.messages as u64 * subs).await;
    let burst_deliveries = track.deliveries.load(Ordering::Relaxed);
    let last_ns = (0..s.messages)
        .map(|i| track.last[i].load(Ordering::Relaxed))
        .max()
        .unwrap_or(0);
    let burst_secs = Duration::from_nanos(last_ns)
        .saturating_sub(started.duration_since(track.epoch))
        .as_secs_f64();
    tokio::time::sleep(Duration::from_millis(150)).await;
    reading.store(false, Ordering::Relaxed);
    let (peak, peak_total) = monitor.await?;
    let mut burst_lat = last_latencies(&track, 0..s.messages, subs);

    // 2. Paced.
    let period = Duration::from_secs_f64(1.0 / s.paced_rate);
    let mut next = Instant::now();
    for seq in s.messages..total {
        tokio::time::sleep_until(next.into()).await;
        next += period;
        publish(&topic, &track, seq, &pad).await?;
    }
    settle(&track, total as u64 * subs).await;
    let mut paced_lat = last_latencies(&track, s.messages..total, subs);
    let lost = (total as u64 * subs).saturating_sub(track.deliveries.load(Ordering::Relaxed));
    for (n, _) in &nodes {
        n.stop().await;
    }
    for t in subscribers {
        t.abort();
    }
    Ok(FanoutBenchResult {
        nodes: s.nodes,
        subscribers: s.subscribers,
        payload_bytes: s.payload_bytes,
        messages: s.messages,
        window: s.window,
        deliveries_per_s: burst_deliveries as f64 / burst_secs.max(1e-9),
        published_per_s: s.messages as f64 / published_in.as_secs_f64().max(1e-9),
        lost_deliveries: lost,
        burst_last_p50_ms: percentile_ms(&mut burst_lat, 50.0),
        burst_last_p99_ms: percentile_ms(&mut burst_lat, 99.0),
        paced_rate: s.paced_rate,
        paced_last_p50_ms: percentile_ms(&mut paced_lat, 50.0),
        paced_last_p99_ms: percentile_ms(&mut paced_lat, 99.0),
        peak_mailbox_bytes_per_node: peak,
        peak_mailbox_bytes_total: peak_total,
    })
}

/// The human-readable report.
pub fn report(r: &FanoutBenchResult) -> String {
    format!(
        "concord bench pubsub-fanout: {} subscribers on {} nodes (loopback, {} CPUs), {} B messages\n\
         \x20 burst: {} messages, at most {} in flight\n\
         \x20   deliveries                 {:>12.0} /s   ({:.0} messages published/s)\n\
         \x20   publish -> last subscriber p50 {:.2} ms, p99 {:.2} ms\n\
         \x20   peak mailbox bytes per node {}   (sum at one reading {})\n\
         \x20 paced: {:.0} messages/s\n\
         \x20   publish -> last subscriber p50 {:.2} ms, p99 {:.2} ms\n\
         \x20 deliveries lost (full mailboxes): {}\n",
        r.subscribers,
        r.nodes,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        r.payload_bytes,
        r.messages,
        r.window,
        r.deliveries_per_s,
        r.published_per_s,
        r.burst_last_p50_ms,
        r.burst_last_p99_ms,
        r.peak_mailbox_bytes_per_node
            .iter()
            .map(|b| b.to_string())
            .collect::<Vec<_>>()
            .join(" / "),
        r.peak_mailbox_bytes_total,
        r.paced_rate,
        r.paced_last_p50_ms,
        r.paced_last_p99_ms,
        r.lost_deliveries,
    )
}
