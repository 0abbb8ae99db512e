//! `concord bench remote`: how many messages per second the ordinary lane carries one way
//! between two nodes on loopback, against the physical baseline measured beside it.
//!
//! Four flows, each a sender held at a gate ([`super::flow`]):
//! 1. **Baseline**: raw tokio TCP on loopback, no Concord code ([`super::baseline`]).
//! 2. **Concord, 64 per send**: two nodes in this process, default failure-detector
//!    settings, each with the [`BenchLayer`]. Node A sends `payload_bytes` payloads to
//!    node B on the ordinary lane as fast as the lane accepts them
//!    ([`concord::remote::OutboundLane::send_all_wait`], 64 messages per call); B's layer
//!    reads each payload in place and counts it.
//! 3. **Concord, payloads kept**: the same with a second pair of nodes whose B layer keeps
//!    every payload (a zero-copy slice of its read buffer, as sharding's entity messages
//!    and the key-value store's values are kept).
//! 4. **Concord, 1 per send** ([`concord::remote::OutboundLane::send_wait`]), on the first
//!    pair.
//!
//! The flows run one at a time, in this order, for `rounds` rounds; each round gives each
//! flow one window of `duration / rounds` (after a 1 s warm-up in the first round and
//! 250 ms of settling in the others). The ratio is the median over the rounds of the
//! 64-per-send rate over the baseline rate of the same round: the two windows are next to
//! each other, so a slow stretch of a shared machine falls on both. Meanwhile all nodes'
//! heartbeat round trips (control lane) are recorded, and every membership event is
//! watched for `UnreachableMember`.
//!
//! Target (DESIGN.md; a benchmark, not a test): ratio ≥ 0.5 and no unreachability.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use concord_core::{ClusterEvent, MemberStatus};
use serde::Serialize;

use super::baseline::baseline_flow;
use super::cluster::bench_config;
use super::flow::{median, overall_rate, Flow, Gate, Window};
use super::layer::{payload_frame, BenchLayer, BenchProbe};
use concord::cluster::SubscriptionItem;
use concord::node::Node;

/// How the two bench nodes protect remoting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BenchSecurity {
    /// Plain TCP, no authentication (loopback default).
    #[default]
    Plain,
    /// Plain TCP with a cluster secret proven in each handshake.
    Secret,
    /// TLS 1.3 with mutual authentication (certificates made by `concord certs` code).
    Tls,
}

/// What to measure.
#[derive(Clone, Debug)]
pub struct RemoteBenchSettings {
    /// Payload size, bytes (default 100).
    pub payload_bytes: usize,
    /// Measured time per flow, over all rounds (default 10 s).
    pub duration: Duration,
    /// Rounds; each gives every flow one window of `duration / rounds` (default 5; 1 to
    /// [`MAX_ROUNDS`]).
    pub rounds: usize,
    /// Remoting security of the Concord runs (the raw TCP baseline is always plain).
    pub security: BenchSecurity,
}

impl Default for RemoteBenchSettings {
    fn default() -> Self {
        RemoteBenchSettings {
            payload_bytes: 100,
            duration: Duration::from_secs(10),
            rounds: 5,
            security: BenchSecurity::Plain,
        }
    }
}

/// Messages the sender hands to the lane per call in the main Concord run
/// ([`concord::remote::OutboundLane::send_all_wait`]).
pub const SEND_BATCH: usize = 64;

/// The figures (`--json` prints exactly this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RemoteBenchResult {
    /// Messages per second through Concord's ordinary lane, the sender handing
    /// [`SEND_BATCH`] messages per call (all rounds' windows together).
    pub concord_msgs_per_s: f64,
    /// Messages per second when the sender hands one message per call
    /// ([`concord::remote::OutboundLane::send_wait`]).
    pub concord_single_send_msgs_per_s: f64,
    /// Messages per second with [`SEND_BATCH`] per call when the receiving layer keeps
    /// each payload (one reference-counted slice of the read buffer per message).
    pub concord_kept_payloads_msgs_per_s: f64,
    /// Messages per second through raw tokio TCP.
    pub baseline_msgs_per_s: f64,
    /// The median over the rounds of the round's `concord` rate over its baseline rate.
    pub ratio: f64,
    /// The same median for the payloads-kept flow.
    pub kept_ratio: f64,
    /// Each round's `concord` rate over its baseline rate, in round order.
    pub ratio_per_round: Vec<f64>,
    /// Rounds measured.
    pub rounds: usize,
    /// Largest heartbeat round trip any node saw during the Concord flows, ms.
    pub max_heartbeat_rtt_ms: u64,
    /// Whether any node saw any member unreachable during the run.
    pub unreachable_seen: bool,
    /// Payload size, bytes.
    pub payload_bytes: usize,
    /// Measured seconds per flow (all rounds).
    pub duration_s: f64,
    /// Remoting security of the Concord runs.
    pub security: BenchSecurity,
}

/// Most rounds a run measures (more are measured as this many).
pub const MAX_ROUNDS: usize = 1000;

/// Settling time before the first round's windows.
const WARM_UP: Duration = Duration::from_secs(1);
/// Settling time before each later window (the previous flow's queues drain meanwhile).
const SETTLE: Duration = Duration::from_millis(250);

/// Starts both node pairs and the baseline connection, then measures the flows round by
/// round (see the module documentation).
pub async fn run_remote(settings: &RemoteBenchSettings) -> anyhow::Result<RemoteBenchResult> {
    let rounds = settings.rounds.clamp(1, MAX_ROUNDS);
    // One static payload, as an application's freshly encoded message would be: no
    // reference count shared between the sending task and the writer.
    let payload = Bytes::from_static(Box::leak(
        vec![0x5a; settings.payload_bytes].into_boxed_slice(),
    ));
    let security = Security::new(settings.security)?;
    let in_place = BenchPair::start(false, &security).await?;
    let kept = match BenchPair::start(true, &security).await {
        Ok(p) => p,
        Err(e) => {
            in_place.stop().await;
            return Err(e);
        }
    };
    let measured = async {
        let flows = [
            baseline_flow(&payload).await?,
            in_place.flow(&payload, SEND_BATCH),
            kept.flow(&payload, SEND_BATCH),
            in_place.flow(&payload, 1),
        ];
        in_place.take_max_heartbeat_rtt_ms();
        kept.take_max_heartbeat_rtt_ms();
        let window = settings.duration / u32::try_from(rounds).unwrap_or(1);
        let mut windows: [Vec<Window>; 4] = Default::default();
        for round in 0..rounds {
            let settle = if round == 0 { WARM_UP } else { SETTLE };
            for (flow, w) in flows.iter().zip(windows.iter_mut()) {
                w.push(flow.measure(settle, window).await);
            }
        }
        for f in &flows {
            f.stop();
        }
        anyhow::Ok(windows)
    }
    .await;
    let rtt = in_place
        .take_max_heartbeat_rtt_ms()
        .max(kept.take_max_heartbeat_rtt_ms());
    let unreachable = in_place.unreachable_seen() || kept.unreachable_seen();
    in_place.stop().await;
    kept.stop().await;
    let [baseline, concord, kept_payloads, single] = measured?;
    let per_round = |flow: &[Window]| -> Vec<f64> {
        flow.iter()
            .zip(&baseline)
            .map(|(c, b)| {
                if b.rate() > 0.0 {
                    c.rate() / b.rate()
                } else {
                    0.0
                }
            })
            .collect()
    };
    let ratio_per_round = per_round(&concord);
    Ok(RemoteBenchResult {
        concord_msgs_per_s: overall_rate(&concord),
        concord_single_send_msgs_per_s: overall_rate(&single),
        concord_kept_payloads_msgs_per_s: overall_rate(&kept_payloads),
        baseline_msgs_per_s: overall_rate(&baseline),
        ratio: median(&ratio_per_round),
        kept_ratio: median(&per_round(&kept_payloads)),
        ratio_per_round,
        rounds,
        max_heartbeat_rtt_ms: rtt,
        unreachable_seen: unreachable,
        payload_bytes: settings.payload_bytes,
        duration_s: settings.duration.as_secs_f64(),
        security: settings.security,
    })
}

/// The configuration a [`BenchSecurity`] adds, with the certificate directory it made
/// (removed when dropped).
struct Security {
    mode: BenchSecurity,
    certs: Option<std::path::PathBuf>,
}

impl Security {
    fn new(mode: BenchSecurity) -> anyhow::Result<Self> {
        let certs = if mode == BenchSecurity::Tls {
            let dir =
                std::env::temp_dir().join(format!("concord-bench-certs-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            concord::tls::certs::create_ca(&dir, None, true)?;
            concord::tls::certs::create_node(&dir, &["127.0.0.1".into()], None, true)?;
            Some(dir)
        } else {
            None
        };
        Ok(Security { mode, certs })
    }

    fn apply(&self, c: &mut concord::config::Config) {
        match (self.mode, &self.certs) {
            (BenchSecurity::Secret, _) => {
                c.remote.secret = Some(concord::config::SecretString(
                    "concord-bench-cluster-secret-0123456789".into(),
                ));
            }
            (BenchSecurity::Tls, Some(d)) => {
                c.remote.tls = Some(concord::config::TlsConfig {
                    certificate: d.join("node.crt"),
                    private_key: d.join("node.key"),
                    ca_certificates: d.join("ca.crt"),
                    verify_peer_hostname: Some(true),
                });
            }
            _ => {}
        }
    }
}

impl Drop for Security {
    fn drop(&mut self) {
        if let Some(d) = &self.certs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

async fn start_bench_node(
    seed: Option<u16>,
    keep_payloads: bool,
    security: &Security,
) -> anyhow::Result<(Node, BenchProbe)> {
    let (layer, probe) = if keep_payloads {
        BenchLayer::keeping_payloads()
    } else {
        BenchLayer::new()
    };
    let mut config = bench_config("bench", seed);
    security.apply(&mut config);
    let node = Node::builder(config).layer(layer).start().await?;
    if seed.is_none() {
        let me = node.self_address().clone();
        if let Err(e) = node.cluster().join(me).await {
            node.stop().await;
            return Err(e.into());
        }
    }
    Ok((node, probe))
}

async fn wait_both_up(a: &Node, b: &Node) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut views = a.cluster().membership();
    loop {
        let up = |n: &Node| {
            let v = n.cluster().view();
            v.members.len() == 2 && v.members.values().all(|m| m.status == MemberStatus::Up)
        };
        if up(a) && up(b) {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("the two bench nodes did not form a cluster within 60 s");
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), views.changed()).await;
    }
}

/// Watches `node`'s events until `stop`; sets `seen` on any `UnreachableMember`.
fn watch_unreachable(node: &Node, seen: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    let mut sub = node.cluster().subscribe();
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            match tokio::time::timeout(Duration::from_millis(200), sub.recv()).await {
                Ok(Some(SubscriptionItem::Event(ClusterEvent::UnreachableMember(_)))) => {
                    seen.store(true, Ordering::Relaxed)
                }
                Ok(Some(SubscriptionItem::CurrentClusterState(v))) if !v.unreachable.is_empty() => {
                    seen.store(true, Ordering::Relaxed)
                }
                Ok(None) => return,
                _ => {}
            }
        }
    });
}

/// Two bench nodes that formed a cluster, A sending to B, with their watchers.
struct BenchPair {
    a: Node,
    b: Node,
    probe: BenchProbe,
    unreachable: Arc<AtomicBool>,
    stop_watch: Arc<AtomicBool>,
}

impl BenchPair {
    /// Starts A (which joins itself) and B (seeded with A) and waits until both are Up;
    /// B's layer keeps payloads when `keep_payloads`.
    async fn start(keep_payloads: bool, security: &Security) -> anyhow::Result<BenchPair> {
        let (a, _) = start_bench_node(None, false, security).await?;
        let (b, probe) =
            match start_bench_node(Some(a.remoting_addr().port()), keep_payloads, security).await {
                Ok(b) => b,
                Err(e) => {
                    a.stop().await;
                    return Err(e);
                }
            };
        if let Err(e) = wait_both_up(&a, &b).await {
            b.stop().await;
            a.stop().await;
            return Err(e);
        }
        let unreachable = Arc::new(AtomicBool::new(false));
        let stop_watch = Arc::new(AtomicBool::new(false));
        watch_unreachable(&a, unreachable.clone(), stop_watch.clone());
        watch_unreachable(&b, unreachable.clone(), stop_watch.clone());
        Ok(BenchPair {
            a,
            b,
            probe,
            unreachable,
            stop_watch,
        })
    }

    /// A flow from A to B handing `batch` messages to the lane per call.
    fn flow(&self, payload: &Bytes, batch: usize) -> Flow {
        let to_uid = self.b.cluster().self_unique_address().uid;
        let lane = self
            .a
            .transport()
            .outbound_lane(self.b.self_address(), concord_core::Lane::Ordinary);
        let gate = Gate::default();
        let g = gate.clone();
        let payload = payload.clone();
        tokio::spawn(async move {
            while g.wait_open().await {
                let sent = match batch {
                    1 => lane.send_wait(payload_frame(to_uid, payload.clone())).await,
                    n => {
                        lane.send_all_wait((0..n).map(|_| payload_frame(to_uid, payload.clone())))
                            .await
                    }
                };
                if sent.is_err() {
                    return;
                }
            }
        });
        let probe = self.probe.clone();
        Flow::new(gate, move || probe.received())
    }

    /// The largest heartbeat round trip either node saw since the last call, ms.
    fn take_max_heartbeat_rtt_ms(&self) -> u64 {
        self.a
            .cluster()
            .take_max_heartbeat_rtt_ms()
            .max(self.b.cluster().take_max_heartbeat_rtt_ms())
    }

    fn unreachable_seen(&self) -> bool {
        self.unreachable.load(Ordering::Relaxed)
    }

    async fn stop(self) {
        self.stop_watch.store(true, Ordering::Relaxed);
        self.b.stop().await;
        self.a.stop().await;
    }
}

/// The human-readable report.
pub fn report(r: &RemoteBenchResult) -> String {
    let per_round: Vec<String> = r
        .ratio_per_round
        .iter()
        .map(|x| format!("{x:.2}"))
        .collect();
    format!(
        "concord bench remote: {} B payloads, one way, ordinary lane, remoting {:?}, {:.0} s measured per flow in {} rounds, {} CPUs\n\
         \x20 concord ({:>2} per send) {:>12.0} msg/s\n\
         \x20 concord (1 per send)  {:>12.0} msg/s\n\
         \x20 concord ({:>2}, kept)   {:>12.0} msg/s   (payloads kept as slices; ratio {:.2})\n\
         \x20 raw tokio TCP         {:>12.0} msg/s\n\
         \x20 ratio                 {:>12.2}   (median of the rounds [{}]; target >= 0.5)\n\
         \x20 max heartbeat RTT     {:>12} ms\n\
         \x20 unreachable seen      {:>12}\n",
        r.payload_bytes,
        r.security,
        r.duration_s,
        r.rounds,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        SEND_BATCH,
        r.concord_msgs_per_s,
        r.concord_single_send_msgs_per_s,
        SEND_BATCH,
        r.concord_kept_payloads_msgs_per_s,
        r.kept_ratio,
        r.baseline_msgs_per_s,
        r.ratio,
        per_round.join(", "),
        r.max_heartbeat_rtt_ms,
        if r.unreachable_seen { "yes" } else { "no" },
    )
}
