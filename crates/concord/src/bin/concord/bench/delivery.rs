//! `concord bench delivery`: reliable delivery into sharded entities on 3 in-process nodes
//! over loopback, next to plain `tell` in the same run.
//!
//! 1. **Plain remote tell**: senders on node 1 `tell` 64 entities on the other nodes (as
//!    `concord bench sharding` does); messages handled per second.
//! 2. **Reliable, no durable queue**: one `ShardingProducer` on node 1, 8 tasks sending to
//!    64 entities on the other nodes (a `ReliableConsumer` around the same entity), each
//!    retrying at once when the buffer is full; messages **confirmed** per second.
//! 3. **Reliable, durable queue** on the replicated journal (N = 3 on the three nodes):
//!    the same with 256 sending tasks (a `send` returns once its message is stored, so the
//!    messages stored per journal write are the sends waiting meanwhile), confirmed per
//!    second.
//!    The same to 4 of the entities only (hot entities: the messages a window grants at
//!    once go to the entity in one ask).
//! 4. **Send-to-confirm latency**: `send_and_confirm` from 16 tasks in a closed loop,
//!    without the durable queue; p50 and p99.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cluster::{percentile_ms, start_cluster};
use super::persistence::{data_dir, remove_data_dirs};
use super::sharding::{entities_where, tell_rate, Counted, Ping};
use concord::delivery::{
    init_sharded_consumer, ConsumerEnvelope, DeliveryError, ReliableConsumer, ShardingProducer,
};
use concord::persistence::{Persistence, PersistenceConfig};
use concord::sharding::{ShardRegion, Sharding};
use concord_core::delivery::DeliverySettings;

/// Settings.
#[derive(Clone, Debug)]
pub struct DeliveryBenchSettings {
    /// Message size, bytes.
    pub payload_bytes: usize,
    /// Measured time of each run.
    pub duration: Duration,
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeliveryBenchResult {
    /// Message size, bytes.
    pub payload_bytes: usize,
    /// Plain tells/s to remote entities.
    pub tell_remote_msgs_per_s: f64,
    /// Reliable messages confirmed/s, no durable queue.
    pub reliable_msgs_per_s: f64,
    /// Reliable messages confirmed/s, durable queue on the replicated journal.
    pub durable_msgs_per_s: f64,
    /// reliable / plain tell.
    pub reliable_to_tell: f64,
    /// Reliable messages confirmed/s to 4 of the entities only (hot entities: what a
    /// window grants at once goes in one ask), no durable queue.
    pub reliable_hot_msgs_per_s: f64,
    /// Messages the consumer entities handled/s during the reliable run (a check of the
    /// confirmed figure: each confirmed message was handled).
    pub reliable_handled_msgs_per_s: f64,
    /// Resent during the reliable run (none expected on loopback).
    pub reliable_resent: u64,
    /// send_and_confirm latency, ms.
    pub confirm_p50_ms: f64,
    /// send_and_confirm latency, ms.
    pub confirm_p99_ms: f64,
    /// Confirmations/s of the latency run.
    pub confirm_rate_per_s: f64,
}

type Consumer = ReliableConsumer<Counted>;

const SENDERS: usize = 8;
/// Sending tasks of the durable run.
const DURABLE_SENDERS: usize = 256;

fn settings() -> DeliverySettings {
    DeliverySettings {
        // Room for every entity's window: the producer is never the bottleneck.
        buffer_size: 64 * 50,
        ..DeliverySettings::default()
    }
}

/// What [`reliable_rate`] measured, per second of the measured time.
struct Rate {
    confirmed: f64,
    /// Messages the entities handled (counted by the entities themselves).
    handled: f64,
    resent: u64,
}

/// Confirmed/s through `producer` to `ids` from `senders` tasks for `duration` (after a
/// 1 s warm-up), handled/s by the entities (`handled` counts them), the messages resent.
async fn reliable_rate(
    producer: &ShardingProducer<Consumer>,
    ids: &[String],
    pad: &[u8],
    senders: usize,
    duration: Duration,
    handled: &[Arc<AtomicU64>],
) -> anyhow::Result<Rate> {
    let total = || {
        handled
            .iter()
            .map(|h| h.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..senders)
        .map(|s| {
            let mine: Vec<String> = ids
                .iter()
                .cycle()
                .skip(s)
                .step_by(senders)
                .take(ids.len().div_ceil(senders).max(1))
                .cloned()
                .collect();
            let (stop, producer, msg) =
                (stop.clone(), producer.clone(), Ping { pad: pad.to_vec() });
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    for id in &mine {
                        match producer.send(id, &msg).await {
                            Ok(_) => {}
                            Err(DeliveryError::BufferFull { .. }) => tokio::task::yield_now().await,
                            Err(_) => return,
                        }
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (s0, h0) = (producer.status().await?, total());
    let t0 = Instant::now();
    tokio::time::sleep(duration).await;
    let (s1, h1) = (producer.status().await?, total());
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    // Let what is held drain before the next run.
    for _ in 0..600 {
        if producer.status().await?.unconfirmed == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let secs = elapsed.as_secs_f64();
    Ok(Rate {
        confirmed: (s1.confirmed - s0.confirmed) as f64 / secs,
        handled: (h1 - h0) as f64 / secs,
        resent: s1.resent - s0.resent,
    })
}

/// Closed-loop `send_and_confirm` from `tasks` tasks: (confirmed/s, latencies).
async fn confirm_latency(
    producer: &ShardingProducer<Consumer>,
    ids: &[String],
    pad: &[u8],
    tasks: usize,
    duration: Duration,
) -> (f64, Vec<Duration>) {
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let id = ids[t % ids.len()].clone();
            let (stop, producer, msg) =
                (stop.clone(), producer.clone(), Ping { pad: pad.to_vec() });
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    if producer
                        .send_and_confirm(&id, &msg, Duration::from_secs(10))
                        .await
                        .is_ok()
                    {
                        lat.push(start.elapsed());
                    }
                }
                lat
            })
        })
        .collect();
    let t0 = Instant::now();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    let mut all = Vec::new();
    for h in handles {
        if let Ok(l) = h.await {
            all.extend(l);
        }
    }
    (all.len() as f64 / elapsed.as_secs_f64(), all)
}

/// Entity ids of `region` hosted off the node with remoting port `port`.
async fn remote_consumers(
    region: &ShardRegion<Consumer>,
    port: u16,
    count: usize,
    pad: &[u8],
) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for i in 0..100_000 {
        let id = format!("d{i}");
        let r = region
            .entity_ref(id.clone())
            .ask(
                &ConsumerEnvelope::Direct(Ping { pad: pad.to_vec() }),
                Duration::from_secs(10),
            )
            .await?;
        if r.reply.is_some_and(|p| p != port) {
            out.push(id);
            if out.len() == count {
                return Ok(out);
            }
        }
    }
    anyhow::bail!("not enough entities found")
}

/// Runs the benchmark.
pub async fn run_delivery(s: &DeliveryBenchSettings) -> anyhow::Result<DeliveryBenchResult> {
    let pad = vec![0x5a; s.payload_bytes.saturating_sub(8)];
    let counters: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let c2 = counters.clone();
    let system = "bench-delivery";
    let nodes = start_cluster(
        system,
        3,
        |c| {
            c.data_dir = data_dir(system);
            let _ = c.set_section(&PersistenceConfig {
                store: "replicated".into(),
                ..Default::default()
            });
        },
        move |i, builder| {
            let (layer, persistence) = Persistence::layer();
            let mut sharding = Sharding::new();
            let h = c2[i].clone();
            let plain = sharding.init(
                "bench",
                move |_: &str, _: Option<u64>| Counted::new(h.clone()),
                None,
            );
            let h = c2[i].clone();
            let reliable = init_sharded_consumer(
                &mut sharding,
                "bench-delivery",
                move |_: &str, _: Option<u64>| Counted::new(h.clone()),
                None,
                settings(),
            );
            (
                builder.layer(layer).layer(sharding),
                (plain, reliable, persistence),
            )
        },
    )
    .await?;
    let result = async {
        let (node1, (plain, reliable, persistence)) = (&nodes[0].0, &nodes[0].1);
        let port = node1.remoting_addr().port();
        let plain_ids = entities_where(plain, port, false, 64, &pad).await?;
        let tell = tell_rate(plain, &plain_ids, &counters, &pad, s.duration).await;
        let ids = remote_consumers(reliable, port, 64, &pad).await?;
        let producer = ShardingProducer::start(
            format!("bench@{}", node1.self_address()),
            node1.self_address(),
            reliable.clone(),
            settings(),
        );
        let measured = reliable_rate(&producer, &ids, &pad, SENDERS, s.duration, &counters).await?;
        let hot = reliable_rate(&producer, &ids[..4], &pad, SENDERS, s.duration, &counters)
            .await?
            .confirmed;
        let (confirm_rate, mut lat) = confirm_latency(&producer, &ids, &pad, 16, s.duration).await;
        let stores = persistence
            .stores_within(Duration::from_secs(30))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let durable = ShardingProducer::start_durable(
            "bench-durable",
            node1.self_address(),
            reliable.clone(),
            settings(),
            &stores,
        )
        .await?;
        let durable_rate =
            reliable_rate(&durable, &ids, &pad, DURABLE_SENDERS, s.duration, &counters)
                .await?
                .confirmed;
        Ok::<_, anyhow::Error>(DeliveryBenchResult {
            payload_bytes: s.payload_bytes,
            tell_remote_msgs_per_s: tell,
            reliable_msgs_per_s: measured.confirmed,
            reliable_handled_msgs_per_s: measured.handled,
            durable_msgs_per_s: durable_rate,
            reliable_to_tell: if tell > 0.0 {
                measured.confirmed / tell
            } else {
                0.0
            },
            reliable_hot_msgs_per_s: hot,
            reliable_resent: measured.resent,
            confirm_p50_ms: percentile_ms(&mut lat, 50.0),
            confirm_p99_ms: percentile_ms(&mut lat, 99.0),
            confirm_rate_per_s: confirm_rate,
        })
    }
    .await;
    for (n, _) in &nodes {
        n.stop().await;
    }
    remove_data_dirs();
    result
}

/// The table.
pub fn report(r: &DeliveryBenchResult) -> String {
    format!(
        "reliable delivery, 3 nodes on loopback, {} B messages, 64 remote entities\n\
         plain remote tell          {:>12.0} msgs/s\n\
         reliable (no durable queue){:>12.0} confirmed/s  ({:.2}x tell, {} resent; {:.0} handled/s)\n\
         reliable, 4 hot entities   {:>12.0} confirmed/s\n\
         reliable, durable queue    {:>12.0} confirmed/s  (256 senders)\n\
         send-to-confirm latency    p50 {:.2} ms  p99 {:.2} ms  at {:.0}/s (16 in flight)\n",
        r.payload_bytes,
        r.tell_remote_msgs_per_s,
        r.reliable_msgs_per_s,
        r.reliable_to_tell,
        r.reliable_resent,
        r.reliable_handled_msgs_per_s,
        r.reliable_hot_msgs_per_s,
        r.durable_msgs_per_s,
        r.confirm_p50_ms,
        r.confirm_p99_ms,
        r.confirm_rate_per_s,
    )
}
