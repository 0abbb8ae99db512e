//! What `concord bench persistence` reports: each store's figures ([`StoreResult`]), the
//! run's ([`PersistenceBenchResult`], the `--json` object) and the human-readable
//! [`report`].

use serde::Serialize;

/// One store's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StoreResult {
    /// `replicated`, `postgres` or `memory`.
    pub store: String,
    /// Persisted events/s per node (3 nodes).
    pub events_per_s_per_node: f64,
    /// Command latency, ms.
    pub p50_ms: f64,
    /// Command latency, ms.
    pub p99_ms: f64,
    /// The p99 of the asks started in each second of the measured window, ms (second 0
    /// first): whether a p99 comes from a steady state or from bursts.
    pub p99_ms_by_second: Vec<f64>,
    /// CPU time of this process (user + system) per persisted event over the measured
    /// window, µs, all nodes and askers together (`None` for PostgreSQL: its server is
    /// another process).
    pub cpu_us_per_event: Option<f64>,
    /// Events/s one node could persist with 2 cores of its own at that CPU cost
    /// (`2 s / cpu_us_per_event`; see the module docs).
    pub events_per_s_per_2_cores: Option<f64>,
    /// Asks that failed.
    pub errors: u64,
    /// Recovery storm: entities.
    pub recovery_entities: usize,
    /// Recovery storm: seconds until every entity answered.
    pub recovery_s: Option<f64>,
    /// Recovery storm: asks that failed or timed out.
    pub recovery_failures: u64,
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PersistenceBenchResult {
    /// Event size, bytes.
    pub event_bytes: usize,
    /// Concurrent askers per node (closed loop).
    pub clients: usize,
    /// Open loop: asks offered per second per node (`None`: closed loop).
    pub offered_per_s_per_node: Option<f64>,
    /// Each store.
    pub stores: Vec<StoreResult>,
}

/// The command latency the throughput target allows, ms (p99; Lightbend's
/// published event-sourcing benchmark, docs/BENCHMARKS.md): the report counts the seconds
/// over it.
const TARGET_P99_MS: f64 = 34.0;

/// The human-readable report.
pub fn report(r: &PersistenceBenchResult) -> String {
    let load = match r.offered_per_s_per_node {
        Some(rate) => format!("open loop, {rate:.0} asks/s offered per node"),
        None => format!("{} askers per node", r.clients),
    };
    let mut out = format!(
        "event-sourced entities, 3 nodes on loopback, {} B events, {load}\n",
        r.event_bytes
    );
    out.push_str(
        "store      events/s/node  p50 ms  p99 ms  errors  CPU µs/event  events/s per 2-core node  recovery storm\n",
    );
    for x in &r.stores {
        let storm = match x.recovery_s {
            Some(t) => format!(
                "{} entities × 20 events: {t:.1} s, {} failed",
                x.recovery_entities, x.recovery_failures
            ),
            None => "-".into(),
        };
        let or_dash = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        out.push_str(&format!(
            "{:<10} {:>13.0} {:>7.2} {:>7.2} {:>7}  {:>12}  {:>24}  {storm}\n",
            x.store,
            x.events_per_s_per_node,
            x.p50_ms,
            x.p99_ms,
            x.errors,
            or_dash(x.cpu_us_per_event),
            or_dash(x.events_per_s_per_2_cores),
        ));
    }
    for x in &r.stores {
        let worst = x
            .p99_ms_by_second
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1));
        if let Some((second, ms)) = worst {
            let over = x
                .p99_ms_by_second
                .iter()
                .filter(|v| **v > TARGET_P99_MS)
                .count();
            out.push_str(&format!(
                "{}: p99 per second: worst {ms:.1} ms (second {second}); {over} of {} seconds over {TARGET_P99_MS} ms\n",
                x.store,
                x.p99_ms_by_second.len()
            ));
        }
    }
    out
}
