//! `concord bench remote`: how many messages per second the ordinary lane carries one way
//! between two nodes on loopback, against the physical baseline measured in the same run.
//!
//! 1. **Concord**: two nodes in this process, default failure-detector settings, each
//!    with the [`BenchLayer`]. Node A sends `payload_bytes` payloads to node B on the
//!    ordinary lane as fast as the lane accepts them ([`concord::remote::Transport::send_wait`]);
//!    B's layer reads each payload in place and counts it. Counted for `duration` after a
//!    1 s warm-up; once with 64 messages per send, once with 1, and once more with 64 while
//!    B's layer keeps every payload (a zero-copy slice of its read buffer, as sharding's
//!    entity messages and the key-value store's values are kept). Meanwhile
//!    both nodes' heartbeat round trips (control lane) are recorded, and every membership
//!    event is watched for `UnreachableMember`.
//! 2. **Baseline**: raw tokio TCP on loopback, no Concord code: one writer that frames the
//!    same payloads (4-byte length prefix) into 64 KiB batches and writes them, one reader
//!    that parses and counts the frames. Same warm-up and duration.
//!
//! Target (DESIGN.md; a benchmark, not a test): ratio ≥ 0.5 and no unreachability.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use concord_core::{ClusterEvent, MemberStatus};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::cluster::bench_config;
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
    /// Measured time per run, after a 1 s warm-up (default 10 s).
    pub duration: Duration,
    /// Remoting security of the Concord runs (the raw TCP baseline is always plain).
    pub security: BenchSecurity,
}

impl Default for RemoteBenchSettings {
    fn default() -> Self {
        RemoteBenchSettings {
            payload_bytes: 100,
            duration: Duration::from_secs(10),
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
    /// [`SEND_BATCH`] messages per call.
    pub concord_msgs_per_s: f64,
    /// Messages per second when the sender hands one message per call
    /// ([`concord::remote::OutboundLane::send_wait`]).
    pub concord_single_send_msgs_per_s: f64,
    /// Messages per second with [`SEND_BATCH`] per call when the receiving layer keeps
    /// each payload (one reference-counted slice of the read buffer per message).
    pub concord_kept_payloads_msgs_per_s: f64,
    /// Messages per second through raw tokio TCP.
    pub baseline_msgs_per_s: f64,
    /// `concord_msgs_per_s / baseline_msgs_per_s`.
    pub ratio: f64,
    /// Largest heartbeat round trip either node saw during the Concord run, ms.
    pub max_heartbeat_rtt_ms: u64,
    /// Whether any node saw any member unreachable during the Concord run.
    pub unreachable_seen: bool,
    /// Payload size, bytes.
    pub payload_bytes: usize,
    /// Measured seconds per run.
    pub duration_s: f64,
    /// Remoting security of the Concord runs.
    pub security: BenchSecurity,
}

const WARM_UP: Duration = Duration::from_secs(1);

/// Runs both measurements, Concord first.
pub async fn run_remote(settings: &RemoteBenchSettings) -> anyhow::Result<RemoteBenchResult> {
    // One static payload, as an application's freshly encoded message would be: no
    // reference count shared between the sending task and the writer.
    let payload = Bytes::from_static(Box::leak(
        vec![0x5a; settings.payload_bytes].into_boxed_slice(),
    ));
    let security = Security::new(settings.security)?;
    let (concord, rtt, unreachable) =
        concord_run(&payload, settings.duration, SEND_BATCH, false, &security).await?;
    let (single, rtt1, unreachable1) =
        concord_run(&payload, settings.duration, 1, false, &security).await?;
    let (kept, rtt2, unreachable2) =
        concord_run(&payload, settings.duration, SEND_BATCH, true, &security).await?;
    let baseline = baseline_run(&payload, settings.duration).await?;
    Ok(RemoteBenchResult {
        concord_msgs_per_s: concord,
        concord_single_send_msgs_per_s: single,
        concord_kept_payloads_msgs_per_s: kept,
        baseline_msgs_per_s: baseline,
        ratio: if baseline > 0.0 {
            concord / baseline
        } else {
            0.0
        },
        max_heartbeat_rtt_ms: rtt.max(rtt1).max(rtt2),
        unreachable_seen: unreachable || unreachable1 || unreachable2,
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
        node.cluster().join(me).await?;
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

/// One Concord run: the sender hands `batch` messages to the lane per call.
async fn concord_run(
    payload: &Bytes,
    duration: Duration,
    batch: usize,
    keep_payloads: bool,
    security: &Security,
) -> anyhow::Result<(f64, u64, bool)> {
    let (a, _) = start_bench_node(None, false, security).await?;
    let (b, probe) =
        start_bench_node(Some(a.remoting_addr().port()), keep_payloads, security).await?;
    let result = async {
        wait_both_up(&a, &b).await?;
        let unreachable = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        watch_unreachable(&a, unreachable.clone(), stop.clone());
        watch_unreachable(&b, unreachable.clone(), stop.clone());
        a.cluster().take_max_heartbeat_rtt_ms();
        b.cluster().take_max_heartbeat_rtt_ms();
        let to_uid = b.cluster().self_unique_address().uid;
        let lane = a
            .transport()
            .outbound_lane(b.self_address(), concord_core::Lane::Ordinary);
        let sending = Arc::new(AtomicBool::new(true));
        let s = sending.clone();
        let payload = payload.clone();
        let sender = tokio::spawn(async move {
            while s.load(Ordering::Relaxed) {
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
        tokio::time::sleep(WARM_UP).await;
        let (n0, t0) = (probe.received(), Instant::now());
        tokio::time::sleep(duration).await;
        let (n1, t1) = (probe.received(), Instant::now());
        sending.store(false, Ordering::Relaxed);
        let _ = sender.await;
        stop.store(true, Ordering::Relaxed);
        let rtt = a
            .cluster()
            .take_max_heartbeat_rtt_ms()
            .max(b.cluster().take_max_heartbeat_rtt_ms());
        let rate = (n1 - n0) as f64 / (t1 - t0).as_secs_f64();
        anyhow::Ok((rate, rtt, unreachable.load(Ordering::Relaxed)))
    }
    .await;
    b.stop().await;
    a.stop().await;
    result
}

/// Messages/s of `payload` one way over raw tokio TCP (the physical baseline).
pub(crate) async fn baseline_run(payload: &Bytes, duration: Duration) -> anyhow::Result<f64> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let received = Arc::new(AtomicU64::new(0));
    let r = received.clone();
    let reader = tokio::spawn(async move {
        let Ok((mut stream, _)) = listener.accept().await else {
            return;
        };
        let mut buf = BytesMut::with_capacity(256 * 1024);
        loop {
            match stream.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let mut frames = 0;
            while buf.len() >= 4 {
                let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
                if buf.len() < 4 + len {
                    break;
                }
                buf.advance(4 + len);
                frames += 1;
            }
            r.fetch_add(frames, Ordering::Relaxed);
        }
    });
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let writing = Arc::new(AtomicBool::new(true));
    let w = writing.clone();
    let payload = payload.clone();
    let writer = tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(64 * 1024 + 1024);
        while w.load(Ordering::Relaxed) {
            buf.clear();
            while buf.len() < 64 * 1024 {
                buf.put_u32(payload.len() as u32);
                buf.put_slice(&payload);
            }
            if stream.write_all(&buf).await.is_err() {
                return;
            }
        }
    });
    tokio::time::sleep(WARM_UP).await;
    let (n0, t0) = (received.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(duration).await;
    let (n1, t1) = (received.load(Ordering::Relaxed), Instant::now());
    writing.store(false, Ordering::Relaxed);
    let _ = writer.await;
    reader.abort();
    Ok((n1 - n0) as f64 / (t1 - t0).as_secs_f64())
}

/// The human-readable report.
pub fn report(r: &RemoteBenchResult) -> String {
    format!(
        "concord bench remote: {} B payloads, one way, ordinary lane, remoting {:?}, {:.0} s measured after a 1 s warm-up, {} CPUs\n\
         \x20 concord ({:>2} per send) {:>12.0} msg/s\n\
         \x20 concord (1 per send)  {:>12.0} msg/s\n\
         \x20 concord ({:>2}, kept)   {:>12.0} msg/s   (payloads kept as slices)\n\
         \x20 raw tokio TCP         {:>12.0} msg/s\n\
         \x20 ratio                 {:>12.2}   (target >= 0.5)\n\
         \x20 max heartbeat RTT     {:>12} ms\n\
         \x20 unreachable seen      {:>12}\n",
        r.payload_bytes,
        r.security,
        r.duration_s,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        SEND_BATCH,
        r.concord_msgs_per_s,
        r.concord_single_send_msgs_per_s,
        SEND_BATCH,
        r.concord_kept_payloads_msgs_per_s,
        r.baseline_msgs_per_s,
        r.ratio,
        r.max_heartbeat_rtt_ms,
        if r.unreachable_seen { "yes" } else { "no" },
    )
}
