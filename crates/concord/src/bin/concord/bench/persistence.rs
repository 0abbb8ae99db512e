//! `concord bench persistence`: event-sourced entities on 3 in-process nodes over loopback,
//! each store side by side in one run.
//!
//! 1. **Write throughput and command latency**: `clients` concurrent askers per node send
//!    `Append` (a 100 B event) to random entities of `entities` (the entity may live on any
//!    node: routing included); each answer comes once the event is stored. Persisted
//!    events/s per node, and the p50/p99 of the asks. With `rate` the load is an open loop
//!    instead: each node starts `rate` asks per second on a fixed schedule, whatever the
//!    answers, and each latency runs from the ask's scheduled start (no coordinated
//!    omission) — the latency at a given load rather than at saturation.
//! 2. **Recovery storm**: `recovery-entities` entities with 20 events each are written to
//!    the store; a fresh node (none of them in memory, as after a crash) gets one `Count`
//!    for each, from 256 concurrent askers: the time until every entity answered (each
//!    recovered from the journal under the node's 16 recovery permits), and how many asks
//!    failed or timed out.
//!
//! The throughput phase also gives the p99 of the asks started in each second of the
//! measured window (whether a run's p99 is a steady state or a few bursts).
//!
//! The throughput phase also measures this process's CPU time (user + system,
//! `getrusage`) over the measured window: CPU µs per persisted event across the cluster
//! (the askers included), and from it the events/s one node could persist with two cores
//! of its own (every node does the same work, so a node persisting `r` events/s uses `r ×`
//! that CPU; the 3 nodes here share 2 cores). Not given for PostgreSQL, whose server's CPU
//! is another process's.
//!
//! Stores: the built-in replicated journal (each node's share in a temporary data
//! directory, N = 3, fsync at every commit; its storm writes through one node and recovers
//! through the cluster, every recovery fencing that writer), PostgreSQL (a server started
//! for the run in a temporary directory, or `--postgres-url`), and the in-memory store as
//! the layer's own cost without I/O.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::cluster::{percentile_ms, start_cluster};
pub use super::persistence_report::{report, PersistenceBenchResult, StoreResult};
use super::pg_server::PgServer;
use concord::persistence::{
    Effect, EventSourced, EventSourcedEntity, InMemoryStore, Journal, Persistence,
    PersistenceConfig, PostgresStore, Stores,
};
use concord::sharding::{EntityContext, ShardRegion, Sharding};
use concord_core::persistence::{AtomicWrite, PersistenceId};

/// Settings.
#[derive(Clone, Debug)]
pub struct PersistenceBenchSettings {
    /// Measured time of each throughput run.
    pub duration: Duration,
    /// Concurrent askers per node.
    pub clients: usize,
    /// Entities the askers choose from.
    pub entities: usize,
    /// Event size, bytes.
    pub event_bytes: usize,
    /// Entities of the recovery storm (0: skip).
    pub recovery_entities: usize,
    /// An existing PostgreSQL to use (its `concord_*` tables are written to).
    pub postgres_url: Option<String>,
    /// Open loop: asks started per second per node on a fixed schedule, whatever the
    /// answers (`None`: closed loop, `clients` askers each waiting for its answer).
    pub rate: Option<f64>,
}

/// The benchmark entity's commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum BenchCommand {
    /// Persist this event.
    Append(#[serde(with = "super::sharding::serde_bytes_compat")] Vec<u8>),
    /// Answer the number of events.
    Count,
}

/// The benchmark entity's event.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Appended(#[serde(with = "super::sharding::serde_bytes_compat")] pub Vec<u8>);

/// Counts its events.
pub struct Appender;

impl EventSourced for Appender {
    type Command = BenchCommand;
    type Event = Appended;
    type State = u64;
    type Reply = u64;

    async fn handle_command(
        &mut self,
        _ctx: &mut EntityContext,
        n: &u64,
        command: BenchCommand,
    ) -> Effect<Self> {
        match command {
            BenchCommand::Append(pad) => Effect::persist(Appended(pad)).then_reply(|n: &u64| *n),
            BenchCommand::Count => Effect::reply(*n),
        }
    }

    fn apply_event(n: &mut u64, _e: &Appended) {
        *n += 1;
    }
}

type Region = ShardRegion<EventSourcedEntity<Appender>>;

/// The stores of one node: a pool of its own to PostgreSQL, or the shared memory store.
async fn stores_for(store: &str, url: &str, memory: &InMemoryStore) -> anyhow::Result<Stores> {
    Ok(match store {
        "postgres" => Stores::of(
            PostgresStore::connect(url, 16, Duration::from_secs(10))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ),
        _ => Stores::of(memory.clone()),
    })
}

/// A fresh data directory for a benchmark node (removed by [`remove_data_dirs`]).
pub(crate) fn data_dir(system: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir()
        .join(format!("concord-bench-{}", std::process::id()))
        .join(format!("{system}-{}", NEXT.fetch_add(1, Ordering::Relaxed)))
        .display()
        .to_string()
}

/// Removes every data directory [`data_dir`] made.
pub(crate) fn remove_data_dirs() {
    let _ = std::fs::remove_dir_all(
        std::env::temp_dir().join(format!("concord-bench-{}", std::process::id())),
    );
}

/// `n` nodes running the replicated journal: each node's region and persistence handle.
async fn replicated_cluster(
    system: &str,
    n: usize,
) -> anyhow::Result<Vec<(concord::node::Node, (Region, Persistence))>> {
    start_cluster(
        system,
        n,
        |c| {
            c.data_dir = data_dir(system);
            let p = PersistenceConfig {
                store: "replicated".into(),
                snapshot_every: 100,
                ..Default::default()
            };
            let _ = c.set_section(&p);
        },
        |_, builder| {
            let (layer, persistence) = Persistence::layer();
            let mut sharding = Sharding::new();
            let region = persistence.init_event_sourced(&mut sharding, "bench", |_| Appender, None);
            (builder.layer(layer).layer(sharding), (region, persistence))
        },
    )
    .await
}

/// The recovery storm on the replicated journal: `entities` × 20 events written through
/// node 0's journal, then every entity asked through node 1 (each recovers wherever its
/// shard is, fencing node 0 as the writer).
async fn replicated_storm(entities: usize) -> anyhow::Result<(f64, u64)> {
    let nodes = replicated_cluster("bench-storm-replicated", 3).await?;
    let journal = nodes[0]
        .1
         .1
        .stores_within(Duration::from_secs(30))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .journal;
    let prefilled = prefill_as(journal, entities, "bench").await;
    let started = Instant::now();
    let failures = touch_all(&nodes[1].1 .0, "s", entities, Some(20)).await;
    let took = started.elapsed().as_secs_f64();
    for (n, _) in &nodes {
        n.shutdown().await;
    }
    prefilled?;
    Ok((took, failures))
}

async fn cluster(
    store: &str,
    url: &str,
    memory: &InMemoryStore,
    n: usize,
) -> anyhow::Result<Vec<(concord::node::Node, Region)>> {
    if store == "replicated" {
        let nodes = replicated_cluster("bench-persist-replicated", n).await?;
        return Ok(nodes
            .into_iter()
            .map(|(node, (region, _))| (node, region))
            .collect());
    }
    let mut per_node = Vec::new();
    for _ in 0..n {
        per_node.push(stores_for(store, url, memory).await?);
    }
    start_cluster(
        &format!("bench-persist-{store}"),
        n,
        |c| {
            let p = PersistenceConfig {
                snapshot_every: 100,
                ..Default::default()
            };
            let _ = c.set_section(&p);
        },
        |i, builder| {
            let (layer, persistence) = Persistence::layer_with(per_node[i].clone());
            let mut sharding = Sharding::new();
            let region = persistence.init_event_sourced(&mut sharding, "bench", |_| Appender, None);
            (builder.layer(layer).layer(sharding), region)
        },
    )
    .await
}

/// Asks every entity once (each recovers), 256 at a time: the throughput run then
/// measures running entities, not first recoveries (the recovery storm measures those).
/// Asks that fail, or answer other than `expect` (when given), are counted.
async fn touch_all(region: &Region, prefix: &str, entities: usize, expect: Option<u64>) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..256 {
        let (region, next, failures) = (region.clone(), next.clone(), failures.clone());
        let prefix = prefix.to_string();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= entities {
                    return;
                }
                let r = region
                    .entity_ref(format!("{prefix}{i}"))
                    .ask(&BenchCommand::Count, Duration::from_secs(60))
                    .await;
                let ok = match r {
                    Ok(Ok(n)) => expect.is_none_or(|e| e == n),
                    _ => false,
                };
                if !ok {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    failures.load(Ordering::Relaxed)
}

/// This process's CPU time so far (user + system), seconds; `None` if it cannot be read.
fn cpu_seconds() -> Option<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Some(secs(u.user_time()) + secs(u.system_time()))
}

/// What a throughput run measured.
struct Throughput {
    per_node: f64,
    p50_ms: f64,
    p99_ms: f64,
    p99_ms_by_second: Vec<f64>,
    errors: u64,
    /// CPU µs per persisted event (see the module docs).
    cpu_us_per_event: Option<f64>,
}

/// Asks in flight per node at most in the open loop: beyond it the schedule waits (and
/// the wait counts, as latencies run from each ask's scheduled start).
const MAX_OPEN_IN_FLIGHT: usize = 8192;

/// What the askers of a throughput run share.
#[derive(Clone, Default)]
struct Counters {
    ok: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    measuring: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Counters {
    /// Counts an answer completed while measuring; true if it is to be timed.
    fn count(&self, answered: bool) -> bool {
        if !self.measuring.load(Ordering::Relaxed) {
            return false;
        }
        let c = if answered { &self.ok } else { &self.errors };
        c.fetch_add(1, Ordering::Relaxed);
        answered
    }
}

async fn append(region: &Region, entities: usize, pad: Vec<u8>) -> bool {
    let id = format!("e{}", rand::rng().random_range(0..entities));
    let r = region
        .entity_ref(id)
        .ask(&BenchCommand::Append(pad), Duration::from_secs(10))
        .await;
    matches!(r, Ok(Ok(_)))
}

/// What one asker task owns: the region, the counters, the entities to choose from and the
/// event's padding.
fn asker(
    region: &Region,
    s: &PersistenceBenchSettings,
    c: &Counters,
) -> (Region, Counters, usize, Vec<u8>) {
    (
        region.clone(),
        c.clone(),
        s.entities,
        vec![7u8; s.event_bytes],
    )
}

/// `clients` askers, each sending its next ask when the last one is answered.
fn closed_loop(
    region: &Region,
    s: &PersistenceBenchSettings,
    c: &Counters,
) -> Vec<tokio::task::JoinHandle<Vec<Timed>>> {
    (0..s.clients)
        .map(|_| {
            let (region, c, entities, pad) = asker(region, s, c);
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while !c.stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    if c.count(append(&region, entities, pad.clone()).await) {
                        lat.push((t, t.elapsed()));
                    }
                }
                lat
            })
        })
        .collect()
}

/// Asks started `rate` times per second on a fixed schedule, whatever the answers (no
/// coordinated omission: each latency runs from the ask's scheduled start).
fn open_loop(
    region: &Region,
    s: &PersistenceBenchSettings,
    rate: f64,
    c: &Counters,
) -> tokio::task::JoinHandle<Vec<Timed>> {
    let (region, c, entities, pad) = asker(region, s, c);
    tokio::spawn(async move {
        let lat = Arc::new(std::sync::Mutex::new(Vec::new()));
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_OPEN_IN_FLIGHT));
        let start = tokio::time::Instant::now();
        let mut n = 0u64;
        while !c.stop.load(Ordering::Relaxed) {
            let due = start + Duration::from_secs_f64(n as f64 / rate);
            tokio::time::sleep_until(due).await;
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let (region, c, lat, pad) = (region.clone(), c.clone(), lat.clone(), pad.clone());
            tokio::spawn(async move {
                if c.count(append(&region, entities, pad).await) {
                    let took = due.elapsed();
                    let timed = (due.into_std(), took);
                    lat.lock().unwrap_or_else(|p| p.into_inner()).push(timed);
                }
                drop(permit);
            });
            n += 1;
        }
        // Every ask answered (each times out after 10 s).
        let _ = permits.acquire_many(MAX_OPEN_IN_FLIGHT as u32).await;
        let mut lat = lat.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *lat)
    })
}

/// An ask's start and latency.
type Timed = (Instant, Duration);

/// The p99 of the asks started in each whole second of `window` from `from`, ms (asks
/// started before or after it are left out; a second without asks is 0).
fn p99_by_second(timed: &[Timed], from: Instant, window: Duration) -> Vec<f64> {
    let mut seconds: Vec<Vec<Duration>> = vec![Vec::new(); window.as_secs() as usize];
    for (at, took) in timed {
        let i = at
            .checked_duration_since(from)
            .map(|d| d.as_secs() as usize);
        if let Some(second) = i.and_then(|i| seconds.get_mut(i)) {
            second.push(*took);
        }
    }
    seconds.iter_mut().map(|v| percentile_ms(v, 99.0)).collect()
}

async fn throughput(
    nodes: &[(concord::node::Node, Region)],
    s: &PersistenceBenchSettings,
) -> Throughput {
    touch_all(&nodes[0].1, "e", s.entities, None).await;
    let c = Counters::default();
    let mut tasks = Vec::new();
    for (_, region) in nodes {
        match s.rate {
            Some(rate) => tasks.push(open_loop(region, s, rate, &c)),
            None => tasks.extend(closed_loop(region, s, &c)),
        }
    }
    // Warm-up: connections open, batches flowing.
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    let cpu_before = cpu_seconds();
    tokio::time::sleep(s.duration).await;
    c.measuring.store(false, Ordering::Relaxed);
    let cpu = cpu_seconds()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    let took = started.elapsed().as_secs_f64();
    let events = c.ok.load(Ordering::Relaxed);
    c.stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap_or_default());
    }
    let per_node = events as f64 / took / nodes.len() as f64;
    let p99_ms_by_second = p99_by_second(&lat, started, s.duration);
    let mut lat: Vec<Duration> = lat.into_iter().map(|(_, took)| took).collect();
    Throughput {
        per_node,
        p50_ms: percentile_ms(&mut lat, 50.0),
        p99_ms: percentile_ms(&mut lat, 99.0),
        p99_ms_by_second,
        errors: c.errors.load(Ordering::Relaxed),
        cpu_us_per_event: cpu.filter(|_| events > 0).map(|c| c * 1e6 / events as f64),
    }
}

/// Writes `entities` × 20 events straight into the journal, 64 writers at once.
async fn prefill(journal: Arc<dyn Journal>, entities: usize) -> anyhow::Result<()> {
    prefill_as(journal, entities, "storm").await
}

/// [`prefill`] for the entity type `entity_type`.
async fn prefill_as(
    journal: Arc<dyn Journal>,
    entities: usize,
    entity_type: &'static str,
) -> anyhow::Result<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (journal, next) = (journal.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= entities {
                    return Ok::<_, anyhow::Error>(());
                }
                let pid = PersistenceId::new(entity_type, &format!("s{i}"))?;
                let event = concord::sharding::entity::encode(&Appended(vec![7u8; 100]))
                    .map_err(|e| anyhow::anyhow!(e))?;
                let w = AtomicWrite::new(pid, 1, vec![event; 20], 0)?;
                append_retrying(&*journal, w).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// Appends `w`, trying again for up to [`PREFILL_RETRY`] while the store answers that it
/// is unavailable, as an entity restarted by its caller would (the journal holds a round
/// its replicas cannot answer yet only until `write-timeout`: docs/PERSISTENCE.md, "Ring
/// changes").
async fn append_retrying(journal: &dyn Journal, w: AtomicWrite) -> anyhow::Result<()> {
    let deadline = Instant::now() + PREFILL_RETRY;
    loop {
        match journal.append(w.clone()).await {
            Ok(()) => return Ok(()),
            Err(concord::persistence::PersistenceError::Unavailable { .. })
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(anyhow::anyhow!("{e}")),
        }
    }
}

/// How long a prefill write is tried again while the store is unavailable.
const PREFILL_RETRY: Duration = Duration::from_secs(30);

async fn recovery_storm(
    store: &str,
    url: &str,
    memory: &InMemoryStore,
    entities: usize,
) -> anyhow::Result<(f64, u64)> {
    let stores = stores_for(store, url, memory).await?;
    prefill(stores.journal.clone(), entities).await?;
    let nodes = start_cluster(
        &format!("bench-storm-{store}"),
        1,
        |_| {},
        |_, builder| {
            let (layer, persistence) = Persistence::layer_with(stores.clone());
            let mut sharding = Sharding::new();
            let region = persistence.init_event_sourced(&mut sharding, "storm", |_| Appender, None);
            (builder.layer(layer).layer(sharding), region)
        },
    )
    .await?;
    let started = Instant::now();
    let failures = touch_all(&nodes[0].1, "s", entities, Some(20)).await;
    let took = started.elapsed().as_secs_f64();
    for (n, _) in &nodes {
        n.shutdown().await;
    }
    Ok((took, failures))
}

/// Runs the benchmark.
pub async fn run_persistence(
    s: &PersistenceBenchSettings,
) -> anyhow::Result<PersistenceBenchResult> {
    let server;
    let url = match &s.postgres_url {
        Some(u) => u.clone(),
        None => {
            server = tokio::task::spawn_blocking(PgServer::try_start)
                .await?
                .map_err(|e| anyhow::anyhow!(e))?;
            server.url()
        }
    };
    let mut stores = Vec::new();
    for store in ["replicated", "postgres", "memory"] {
        let memory = InMemoryStore::new();
        let nodes = cluster(store, &url, &memory, 3).await?;
        let t = throughput(&nodes, s).await;
        // PostgreSQL's server works in processes of its own: this process's CPU is not
        // the cost of its events.
        let cpu_us_per_event = t.cpu_us_per_event.filter(|_| store != "postgres");
        for (n, _) in &nodes {
            n.shutdown().await;
        }
        let (recovery_s, recovery_failures) = if s.recovery_entities > 0 {
            let (t, f) = if store == "replicated" {
                replicated_storm(s.recovery_entities).await?
            } else {
                recovery_storm(store, &url, &InMemoryStore::new(), s.recovery_entities).await?
            };
            (Some(t), f)
        } else {
            (None, 0)
        };
        stores.push(StoreResult {
            store: store.into(),
            events_per_s_per_node: t.per_node,
            p50_ms: t.p50_ms,
            p99_ms: t.p99_ms,
            p99_ms_by_second: t.p99_ms_by_second,
            cpu_us_per_event,
            events_per_s_per_2_cores: cpu_us_per_event.filter(|c| *c > 0.0).map(|c| 2e6 / c),
            errors: t.errors,
            recovery_entities: s.recovery_entities,
            recovery_s,
            recovery_failures,
        });
    }
    remove_data_dirs();
    Ok(PersistenceBenchResult {
        event_bytes: s.event_bytes,
        clients: s.clients,
        offered_per_s_per_node: s.rate,
        stores,
    })
}
