//! `concord bench routing`: messages per second routed to a **partitioned service** through
//! its [`ServiceRef`] (N = 3, one instance per node) and through the receptionist's
//! [`ServiceRouter`] to handles, on 3 in-process nodes over loopback TCP, next to a sharded
//! `tell` baseline on the same nodes in the same run.
//!
//! Every node runs Distributed Data, the receptionist, partitioned services, Cluster
//! Sharding (entity type `bench`, the entity of `concord bench sharding`) and the
//! cluster-metrics layer, with Akka's default timings; every node registers the service
//! `bench-service` (`Fixed(3)`: the leader places an instance on each node) and one handle
//! under the key `bench-route`; an instance or a handle decodes each message and counts it.
//! Senders: 8 tasks on node 1 sharing one `ServiceRef` or router (or one region for the
//! baseline); the figure is what the instances, handles or entities **received** per
//! second, so a message a full mailbox dropped is not counted — the sent rate is reported
//! beside it.
//!
//! A `ServiceRef` or a router has no backpressure beyond its layer's command queue: it is
//! at most once, and an instance's or handle's mailbox (`mailbox-size`, 1000) that fills
//! drops what comes. So their cases send with at most [`IN_FLIGHT`] messages sent and not yet received (the
//! senders wait while more are), which is what the handles sustain without loss; one case,
//! `round-robin-open-loop`, sends as fast as the receptionist takes them instead, and shows
//! what is lost then. Sharded `tell` needs no such window: a region holds its senders back.
//!
//! Cases, one window each per round, every round in the same order: the baseline
//! (sharded `tell` to 64 entities spread over the 3 nodes by the default allocation, as
//! the routers spread over the 3 instances, one of them local), then the service's
//! `ServiceRef` with round robin, random, consistent hashing and adaptive (mix), then the
//! receptionist's router with
//! round robin (open loop, then windowed), random, consistent hashing (`tell_keyed`, a
//! different key per message) and adaptive (mix). **The ratio of a case is the median over
//! the rounds of its rate over the baseline's rate of the same round**, so that a slow
//! stretch of a shared machine falls on both.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::cluster::start_cluster;
use super::sharding::{tell_rate, Counted, Ping};
use concord::ddata::DistributedData;
use concord::receptionist::{
    Receptionist, ReceptionistLayer, RoutingLogic, ServiceKey, ServiceRouter,
};
use concord::services::{
    InstancePolicy, PartitionPath, PartitionedServices, Service, ServiceContext, ServiceRef,
    ServicesLayer,
};
use concord::sharding::{ShardRegion, Sharding};
use concord_core::cluster_metrics::CapacitySelector;

/// Settings.
#[derive(Clone, Debug)]
pub struct RoutingBenchSettings {
    /// Message size, bytes (the encoded `Ping`).
    pub payload_bytes: usize,
    /// Measured time of each case in each round (after a 1 s warm-up).
    pub window: Duration,
    /// Rounds (each runs every case once).
    pub rounds: usize,
}

impl Default for RoutingBenchSettings {
    fn default() -> Self {
        RoutingBenchSettings {
            payload_bytes: 100,
            window: Duration::from_secs(2),
            rounds: 2,
        }
    }
}

/// One routing logic's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RoutingCase {
    /// `service-round-robin`, `service-random`, `service-consistent-hashing`,
    /// `service-adaptive-mix` (the partitioned service's `ServiceRef`), then the
    /// receptionist's router: `round-robin-open-loop`, `round-robin`, `random`,
    /// `consistent-hashing` or `adaptive-mix` (all but the open loop with at most
    /// [`IN_FLIGHT`] messages in flight).
    pub logic: String,
    /// Messages the handles received per second, over all rounds' windows.
    pub delivered_msgs_per_s: f64,
    /// Messages the router sent per second (to the receptionist), same windows.
    pub sent_msgs_per_s: f64,
    /// Median over the rounds of delivered/s over the baseline's rate of the same round.
    pub ratio: f64,
    /// That ratio, round by round.
    pub ratio_per_round: Vec<f64>,
    /// Share of the delivered messages each node's instance or handle received (node 1
    /// first).
    pub share_per_node: Vec<f64>,
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RoutingBenchResult {
    /// Message size, bytes.
    pub payload_bytes: usize,
    /// Rounds.
    pub rounds: usize,
    /// Measured time of each case per round, s.
    pub window_s: f64,
    /// Sharded tell to 64 entities over the 3 nodes, messages handled/s, all rounds.
    pub sharded_tell_msgs_per_s: f64,
    /// The baseline round by round, msgs/s.
    pub sharded_tell_per_round: Vec<f64>,
    /// The service's `ServiceRef`, then the router, per logic.
    pub cases: Vec<RoutingCase>,
}

const SENDERS: usize = 8;
const NODES: usize = 3;
/// Messages sent through a `ServiceRef` or router and not yet received, at most (half of
/// an instance's or handle's mailbox per instance), except in the open-loop case.
pub const IN_FLIGHT: u64 = 1500;
/// The partitioned service's path.
const SERVICE_PATH: &str = "bench-service";
/// The cases through the service's `ServiceRef`.
const SERVICE_LOGICS: [(&str, RoutingLogic); 4] = [
    ("service-round-robin", RoutingLogic::RoundRobin),
    ("service-random", RoutingLogic::Random),
    (
        "service-consistent-hashing",
        RoutingLogic::ConsistentHashing,
    ),
    (
        "service-adaptive-mix",
        RoutingLogic::Adaptive(CapacitySelector::Mix),
    ),
];
/// The cases through the receptionist's router.
const LOGICS: [(&str, RoutingLogic); 5] = [
    ("round-robin-open-loop", RoutingLogic::RoundRobin),
    ("round-robin", RoutingLogic::RoundRobin),
    ("random", RoutingLogic::Random),
    ("consistent-hashing", RoutingLogic::ConsistentHashing),
    (
        "adaptive-mix",
        RoutingLogic::Adaptive(CapacitySelector::Mix),
    ),
];

/// Sum of `counters`.
fn total(counters: &[Arc<AtomicU64>]) -> u64 {
    counters.iter().map(|c| c.load(Ordering::Relaxed)).sum()
}

/// Waits until `counters` stop moving (what is queued has drained), at most 10 s.
async fn drained(counters: &[Arc<AtomicU64>]) {
    let mut last = total(counters);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = total(counters);
        if now == last {
            return;
        }
        last = now;
    }
}

/// The benchmark's service: an instance counts what it handles on its node.
struct CountingService {
    received: Arc<AtomicU64>,
}

impl Service for CountingService {
    type Message = Ping;
    type Reply = ();

    async fn handle(&mut self, _ctx: &mut ServiceContext, _message: Ping) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }
}

/// Where a case sends: the service's reference or a receptionist router.
#[derive(Clone)]
enum Target {
    Service(ServiceRef<CountingService>),
    Router(Arc<ServiceRouter<Ping>>),
}

impl Target {
    /// Sends `msg` (keyed by `key` when given); the messages sent, `None` when the layer
    /// has stopped.
    async fn tell(&self, key: Option<u64>, msg: &Ping) -> Option<u64> {
        let key = key.map(u64::to_le_bytes);
        match (self, key) {
            (Target::Service(s), Some(k)) => s.tell_keyed(&k, msg).await.ok().map(|()| 1),
            (Target::Service(s), None) => s.tell(msg).await.ok().map(|()| 1),
            (Target::Router(r), Some(k)) => r.tell_keyed(&k, msg).await.ok().map(|n| n as u64),
            (Target::Router(r), None) => r.tell(msg).await.ok().map(|n| n as u64),
        }
    }
}

/// What one routed window measured.
struct Window {
    delivered: u64,
    sent: u64,
    per_node: Vec<u64>,
    elapsed: Duration,
}

/// `SENDERS` tasks sending `pad` through `target` (keyed when `keyed`; with at most
/// `in_flight` messages sent and not yet received, if given) for a 1 s warm-up and then
/// `window`; the messages the instances or handles counted in `received` meanwhile.
async fn route_window(
    target: &Target,
    keyed: bool,
    in_flight: Option<u64>,
    received: &[Arc<AtomicU64>],
    pad: &[u8],
    window: Duration,
) -> Window {
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let received0 = total(received);
    let tasks: Vec<_> = (0..SENDERS)
        .map(|s| {
            let (target, stop, sent) = (target.clone(), stop.clone(), sent.clone());
            let received = received.to_vec();
            let msg = Ping { pad: pad.to_vec() };
            tokio::spawn(async move {
                let mut i = s as u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Some(limit) = in_flight {
                        // At most 100 ms per wait, in case a message was lost after all.
                        for _ in 0..100 {
                            let got = total(&received) - received0;
                            if sent.load(Ordering::Relaxed).saturating_sub(got) <= limit {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    match target.tell(keyed.then_some(i), &msg).await {
                        Some(n) => sent.fetch_add(n, Ordering::Relaxed),
                        None => return,
                    };
                    i += SENDERS as u64;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let snapshot = |c: &[Arc<AtomicU64>]| c.iter().map(|x| x.load(Ordering::Relaxed)).collect();
    let (r0, s0, t0): (Vec<u64>, _, _) = (
        snapshot(received),
        sent.load(Ordering::Relaxed),
        Instant::now(),
    );
    tokio::time::sleep(window).await;
    let (r1, s1, t1): (Vec<u64>, _, _) = (
        snapshot(received),
        sent.load(Ordering::Relaxed),
        Instant::now(),
    );
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    drained(received).await;
    let per_node: Vec<u64> = r1.iter().zip(&r0).map(|(a, b)| a - b).collect();
    Window {
        delivered: per_node.iter().sum(),
        sent: s1 - s0,
        per_node,
        elapsed: t1 - t0,
    }
}

/// Each node's handles: the receptionist, partitioned services, the `bench` type's region.
type Parts = (Receptionist, PartitionedServices, ShardRegion<Counted>);

/// Registers a handle under `key` on `receptionist` whose task counts what it receives.
async fn counting_handle(
    receptionist: &Receptionist,
    key: &ServiceKey<Ping>,
    received: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let mut handle = receptionist.register(key).await?;
    tokio::spawn(async move {
        while handle.recv().await.is_some() {
            received.fetch_add(1, Ordering::Relaxed);
        }
    });
    Ok(())
}

/// Waits (at most 60 s) until every node's partition table places the service on all
/// [`NODES`] nodes with nothing pending.
async fn placed_everywhere(nodes: &[(concord::node::Node, Parts)]) -> anyhow::Result<()> {
    let path = PartitionPath::new(SERVICE_PATH)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let placed = nodes.iter().all(|(_, (_, services, _))| {
            let snapshot = services.snapshot();
            snapshot.state.pending.is_empty()
                && snapshot
                    .state
                    .table
                    .instances(&path)
                    .is_some_and(|i| i.len() == NODES)
                && snapshot
                    .local
                    .iter()
                    .any(|(p, s)| *p == path && *s == "running")
        });
        if placed {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{SERVICE_PATH} was not placed on the {NODES} nodes within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The median (the mean of the two middle values of an even count); 0 when empty.
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Runs the benchmark.
pub async fn run_routing(s: &RoutingBenchSettings) -> anyhow::Result<RoutingBenchResult> {
    anyhow::ensure!(s.rounds >= 1, "at least one round");
    let pad = vec![0x5a; s.payload_bytes.saturating_sub(8)];
    let handled: Vec<Arc<AtomicU64>> = (0..NODES).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let received: Vec<Arc<AtomicU64>> = (0..NODES).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let in_service: Vec<Arc<AtomicU64>> = (0..NODES).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let h2 = handled.clone();
    let nodes = start_cluster(
        "bench-routing",
        NODES,
        |_| {},
        move |i, builder| {
            let (ddata, replicator) = DistributedData::new();
            let (layer, receptionist) = ReceptionistLayer::new(replicator);
            let (services_layer, services) = ServicesLayer::new();
            let mut sharding = Sharding::new();
            let handled = h2[i].clone();
            let region = sharding.init(
                "bench",
                move |_id: &str, _state: Option<u64>| Counted::new(handled.clone()),
                None,
            );
            let builder = builder
                .layer(ddata)
                .layer(layer)
                .layer(services_layer)
                .layer(sharding);
            (builder, (receptionist, services, region) as Parts)
        },
    )
    .await?;
    let key = ServiceKey::<Ping>::new("bench-route")?;
    for ((_, (receptionist, services, _)), (r, c)) in
        nodes.iter().zip(received.iter().zip(&in_service))
    {
        counting_handle(receptionist, &key, r.clone()).await?;
        let c = c.clone();
        services
            .register(
                SERVICE_PATH,
                InstancePolicy::Fixed(NODES as u32),
                move |_: &ServiceContext| CountingService {
                    received: c.clone(),
                },
            )
            .await?;
    }
    let (receptionist, services, region) = (&nodes[0].1 .0, &nodes[0].1 .1, nodes[0].1 .2.clone());
    placed_everywhere(&nodes).await?;
    let service = services.service_ref::<CountingService>(PartitionPath::new(SERVICE_PATH)?);
    let mut targets: Vec<(&str, Target, &[Arc<AtomicU64>])> = SERVICE_LOGICS
        .iter()
        .map(|(name, logic)| {
            let target = Target::Service(service.clone().with_routing(*logic));
            (*name, target, in_service.as_slice())
        })
        .collect();
    for (name, logic) in LOGICS {
        let mut router = receptionist.router(&key, logic).await?;
        tokio::time::timeout(Duration::from_secs(30), router.wait_for(NODES))
            .await
            .map_err(|_| anyhow::anyhow!("the {NODES} handles were not listed within 30 s"))??;
        targets.push((name, Target::Router(Arc::new(router)), received.as_slice()));
    }
    // The baseline's entities: started (and their shards allocated) before measuring.
    let ids: Vec<String> = (0..64).map(|i| format!("e{i}")).collect();
    for id in &ids {
        region
            .entity_ref(id.clone())
            .ask(&Ping { pad: pad.clone() }, Duration::from_secs(10))
            .await?;
    }
    let mut baseline = Vec::new();
    let mut windows: Vec<Vec<Window>> = targets.iter().map(|_| Vec::new()).collect();
    for _ in 0..s.rounds {
        baseline.push(tell_rate(&region, &ids, &handled, &pad, s.window).await);
        for (k, (name, target, counters)) in targets.iter().enumerate() {
            let keyed = name.ends_with("consistent-hashing");
            let in_flight = (*name != "round-robin-open-loop").then_some(IN_FLIGHT);
            let w = route_window(target, keyed, in_flight, counters, &pad, s.window).await;
            windows[k].push(w);
        }
    }
    let names: Vec<&str> = targets.iter().map(|(name, _, _)| *name).collect();
    drop(targets);
    for (n, _) in &nodes {
        n.stop().await;
    }
    let cases = names
        .iter()
        .zip(&windows)
        .map(|(name, ws)| {
            let secs: f64 = ws.iter().map(|w| w.elapsed.as_secs_f64()).sum();
            let delivered: u64 = ws.iter().map(|w| w.delivered).sum();
            let per_round: Vec<f64> = ws
                .iter()
                .zip(&baseline)
                .map(|(w, b)| w.delivered as f64 / w.elapsed.as_secs_f64() / b.max(1.0))
                .collect();
            let per_node: Vec<u64> = (0..NODES)
                .map(|i| ws.iter().map(|w| w.per_node[i]).sum())
                .collect();
            RoutingCase {
                logic: name.to_string(),
                delivered_msgs_per_s: delivered as f64 / secs,
                sent_msgs_per_s: ws.iter().map(|w| w.sent).sum::<u64>() as f64 / secs,
                ratio: median(&per_round),
                ratio_per_round: per_round,
                share_per_node: per_node
                    .iter()
                    .map(|n| *n as f64 / delivered.max(1) as f64)
                    .collect(),
            }
        })
        .collect();
    Ok(RoutingBenchResult {
        payload_bytes: s.payload_bytes,
        rounds: s.rounds,
        window_s: s.window.as_secs_f64(),
        sharded_tell_msgs_per_s: baseline.iter().sum::<f64>() / baseline.len() as f64,
        sharded_tell_per_round: baseline,
        cases,
    })
}

/// The human-readable report.
pub fn report(r: &RoutingBenchResult) -> String {
    let mut out = format!(
        "concord bench routing: {} B messages, 3 nodes on loopback, {} CPUs, {} rounds of {:.1} s per case\n\
         \x20 sharded tell (64 entities on 3 nodes)  {:>10.0} msg/s   rounds {}\n",
        r.payload_bytes,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        r.rounds,
        r.window_s,
        r.sharded_tell_msgs_per_s,
        r.sharded_tell_per_round
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect::<Vec<_>>()
            .join(" / "),
    );
    for c in &r.cases {
        out.push_str(&format!(
            "  {:<42} {:>10.0} msg/s received ({:.0} sent), ratio {:.2} (rounds {}), shares {}\n",
            match c.logic.strip_prefix("service-") {
                Some(logic) => format!("service ref, {logic}"),
                None => format!("receptionist router, {}", c.logic),
            },
            c.delivered_msgs_per_s,
            c.sent_msgs_per_s,
            c.ratio,
            c.ratio_per_round
                .iter()
                .map(|v| format!("{v:.2}"))
                .collect::<Vec<_>>()
                .join(" / "),
            c.share_per_node
                .iter()
                .map(|v| format!("{v:.2}"))
                .collect::<Vec<_>>()
                .join(" / "),
        ));
    }
    out
}
