//! `concord rolling-upgrade --from OLD`: a rolling upgrade under the demo's load, measured.
//!
//! N `concord node --sample` processes of the binary `OLD` (app-version `1.0.0` by
//! default) form a cluster on 127.0.0.1 and serve the demo's load (counter increments and
//! log appends over 80 sharded, event-sourced entities through every node). After a steady
//! window, each node in turn is taken out of the load balancer's targets, stopped with
//! SIGTERM (a graceful leave: its shards hand over), and started again from this binary on
//! the same ports with the same data (app-version `1.1.0`: sharding allocates new shards to
//! the newest version, Akka's rule); once every node sees it Up it takes load again. A
//! steady window after the roll ends the run, then every entity is read back.
//!
//! It reports (docs/UPGRADES.md, docs/BENCHMARKS.md): requests that failed during the roll
//! (target 0) and acknowledged writes lost (must be 0: the run fails otherwise); shard
//! moves per shard (sampled every 500 ms from `GET /cluster/shards/counter`; target ≤ 1 per
//! node replaced); and p99 latency during the roll against the steady window before it
//! (target ≤ 2×).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::Signal;
use serde_json::json;

use super::load::{Load, Window};
use super::{all_up_everywhere, Demo, NodeProc};
use crate::client::ManagementClient;

/// What the run is told.
pub(crate) struct UpgradeOptions {
    /// The binary of the version to upgrade from.
    pub(crate) from: PathBuf,
    /// Nodes (≥ 3).
    pub(crate) nodes: usize,
    /// The steady windows before and after the roll.
    pub(crate) steady: Duration,
    /// The app-versions of the old and the new nodes.
    pub(crate) from_app_version: String,
    pub(crate) to_app_version: String,
    /// Print the figures as one JSON object at the end.
    pub(crate) json: bool,
}

/// Each shard's homes as sampled (a shard reported by two regions — a handoff in flight —
/// is not sampled that time).
#[derive(Default)]
struct ShardMoves {
    home: BTreeMap<String, String>,
    moves: BTreeMap<String, u32>,
    samples: u64,
}

impl ShardMoves {
    fn observe(&mut self, regions: &concord::sharding::ShardRegionsJson) {
        let mut seen: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for r in &regions.regions {
            for s in &r.shards {
                seen.entry(s.shard_id.as_str())
                    .or_default()
                    .push(r.shard_region.as_str());
            }
        }
        for (shard, homes) in seen {
            if homes.len() != 1 {
                continue;
            }
            let now = homes[0];
            match self.home.get(shard) {
                Some(before) if before != now => {
                    *self.moves.entry(shard.to_string()).or_default() += 1;
                    self.home.insert(shard.to_string(), now.to_string());
                }
                Some(_) => {}
                None => {
                    self.home.insert(shard.to_string(), now.to_string());
                }
            }
        }
        self.samples += 1;
    }
}

/// Samples the counter type's shards through the first target every 500 ms until `stop`.
fn sample_shards(demo: &Demo, stop: Arc<AtomicBool>) -> Arc<Mutex<ShardMoves>> {
    let moves = Arc::new(Mutex::new(ShardMoves::default()));
    let (targets, out) = (demo.targets.clone(), moves.clone());
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let port = targets
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .first()
                .map(|t| t.1);
            if let Some(port) = port {
                let client = ManagementClient::new(&format!("http://127.0.0.1:{port}"));
                if let Ok(r) = client.shards("counter").await {
                    out.lock().unwrap_or_else(|p| p.into_inner()).observe(&r);
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
    moves
}

/// The phases of one node's replacement, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    /// From SIGTERM until the old process exited (its shards hand over, it leaves).
    Leaving,
    /// From then until the new process is Up on every node and ready (`GET /ready`).
    Joining,
    /// From then until the cluster settled ([`settle`]).
    Settling,
    /// From then until the next node's SIGTERM (its 300 ms drain included) or the roll's
    /// end.
    Settled,
}

impl Phase {
    fn label(self) -> &'static str {
        match self {
            Phase::Leaving => "leaving",
            Phase::Joining => "joining",
            Phase::Settling => "settling",
            Phase::Settled => "settled",
        }
    }
}

/// How long a replacement waits for the cluster to settle before the next one.
const SETTLE_WITHIN: Duration = Duration::from_secs(60);

/// Waits until every node in `nodes` reports, for 3 s in a row (polled every 250 ms; the
/// gauges are refreshed every second), no journal segment waiting for its handoff
/// (`concord_journal_pending_segments`) and no shard handoff in progress
/// (`concord_sharding_handoffs_in_progress`); how long that took, or `None` after
/// [`SETTLE_WITHIN`].
async fn settle(demo: &Demo, nodes: &[usize]) -> Option<Duration> {
    let started = Instant::now();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let mut quiet = 0;
    while started.elapsed() < SETTLE_WITHIN {
        let mut busy = false;
        for &i in nodes {
            let url = format!("http://127.0.0.1:{}/metrics", demo.nodes[i].management_port);
            let text = match http.get(&url).send().await {
                Ok(r) if r.status().is_success() => r.text().await.unwrap_or_default(),
                _ => String::new(),
            };
            if text.is_empty()
                || metric_sum(&text, "concord_journal_pending_segments") > 0.0
                || metric_sum(&text, "concord_sharding_handoffs_in_progress") > 0.0
            {
                busy = true;
            }
        }
        quiet = if busy { 0 } else { quiet + 1 };
        if quiet >= 12 {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    None
}

/// How long a new node may take to pass its readiness check after it is Up everywhere.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// Waits until node `i` answers `GET /ready` with 200 (polled every 100 ms); false after
/// [`READY_WITHIN`].
async fn ready(demo: &Demo, i: usize) -> bool {
    let started = Instant::now();
    let Ok(http) = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
    else {
        return false;
    };
    let url = format!("http://127.0.0.1:{}/ready", demo.nodes[i].management_port);
    while started.elapsed() < READY_WITHIN {
        if http
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// The sum of the samples of the metric `name` in a Prometheus text exposition: lines
/// `name{labels} value` or `name value` (not `# HELP`, nor another metric `name_…`).
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn window_json(w: &Window) -> serde_json::Value {
    json!({
        "requests": w.latencies_us.len(),
        "failed": w.failed,
        "causes": w.causes,
        "p50Ms": w.percentile_ms(0.50),
        "p99Ms": w.percentile_ms(0.99),
    })
}

/// Runs the rolling upgrade; see the module docs.
pub(crate) async fn run(o: UpgradeOptions) -> anyhow::Result<()> {
    if o.nodes < 3 {
        bail!(
            "a rolling upgrade needs at least 3 nodes (--nodes {})",
            o.nodes
        );
    }
    let to = std::env::current_exe().context("cannot find the concord executable")?;
    let from = std::fs::canonicalize(&o.from)
        .with_context(|| format!("cannot find the old binary {}", o.from.display()))?;
    let n = o.nodes;
    let mut demo = Demo::new(from, "concord-upgrade", n)?;
    demo.extra_env = vec![(
        "CONCORD__CLUSTER__APP_VERSION".into(),
        o.from_app_version.clone(),
    )];
    demo.quiet = true;
    let result = tokio::select! {
        r = roll(&mut demo, &o, to) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted (Ctrl-C)")),
    };
    demo.stop_all().await;
    match &result {
        Ok(()) => println!(
            "Rolling upgrade complete. Node logs: {}",
            demo.log_dir.display()
        ),
        Err(e) => println!(
            "Rolling upgrade FAILED: {e:#} (node logs: {})",
            demo.log_dir.display()
        ),
    }
    result
}

async fn roll(demo: &mut Demo, o: &UpgradeOptions, to: PathBuf) -> anyhow::Result<()> {
    let n = demo.nodes.len();
    println!(
        "Rolling upgrade of {n} nodes: {} (app-version {}) → {} (app-version {}), under the demo's load",
        demo.exe.display(),
        o.from_app_version,
        to.display(),
        o.to_app_version
    );
    println!("Node logs: {}", demo.log_dir.display());
    let all_nodes: Vec<usize> = (0..n).collect();
    for i in 0..n {
        demo.spawn(i)?;
    }
    let all: Vec<String> = demo.nodes.iter().map(NodeProc::address).collect();
    demo.wait_for("cluster formation", |_, v, _| all_up_everywhere(v, &all))
        .await?;
    demo.set_targets(&all_nodes);
    let load = Load::start(demo.targets.clone());
    demo.wait_for("entities running on every node", |_, _, s| {
        load.answered() > 200 && all.iter().all(|a| s.shards_of(a) > 0)
    })
    .await?;
    println!("  ✓ {n} old nodes Up, the load runs, every node hosts shards");
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let moves = sample_shards(demo, stop_sampling.clone());

    let steady_from = load.elapsed_ms();
    tokio::time::sleep(o.steady).await;
    let roll_from = load.elapsed_ms();
    println!(
        "  ✓ steady window: {:.0} s",
        (roll_from - steady_from) as f64 / 1000.0
    );
    let samples_before = moves.lock().unwrap_or_else(|p| p.into_inner()).samples;
    let moves_before: BTreeMap<String, u32> = moves
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .moves
        .clone();
    if samples_before == 0 {
        bail!("the shard sampler read no shard table in the steady window");
    }

    demo.exe = to;
    demo.extra_env = vec![(
        "CONCORD__CLUSTER__APP_VERSION".into(),
        o.to_app_version.clone(),
    )];
    // When each phase of each replacement began (ms of the load's clock).
    let mut phases: Vec<(u64, Phase)> = Vec::new();
    for i in 0..n {
        let others: Vec<usize> = all_nodes.iter().copied().filter(|x| *x != i).collect();
        demo.set_targets(&others);
        // In-flight requests to it finish first (a load balancer draining it).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        phases.push((load.elapsed_ms(), Phase::Leaving));
        demo.signal(i, Signal::SIGTERM);
        if let Some(c) = &mut demo.nodes[i].child {
            match tokio::time::timeout(Duration::from_secs(90), c.wait()).await {
                Ok(Ok(status)) if status.success() => {}
                Ok(Ok(status)) => bail!("node {} exited with {status} on SIGTERM", i + 1),
                _ => bail!("node {} did not exit within 90 s of SIGTERM", i + 1),
            }
        }
        let stopped = started.elapsed();
        phases.push((load.elapsed_ms(), Phase::Joining));
        demo.spawn(i)?;
        // Up everywhere; its own view shows its new app-version (an earlier version's
        // `GET /cluster/members` may not carry app-versions).
        demo.wait_for("the new node Up everywhere", |_, v, _| {
            all_up_everywhere(v, &all)
                && v.get(&i).is_some_and(|view| {
                    view.members
                        .iter()
                        .any(|m| m.node == all[i] && m.app_version == o.to_app_version)
                })
        })
        .await?;
        // Traffic only once it is ready (`GET /ready`: Up, and its readiness checks met —
        // the sample's log producer started), as a load balancer's readiness gate does.
        if !ready(demo, i).await {
            println!(
                "  ! node {} not ready within {} s of Up (sending it traffic anyway)",
                i + 1,
                READY_WITHIN.as_secs()
            );
        }
        demo.set_targets(&all_nodes);
        let up = started.elapsed();
        phases.push((load.elapsed_ms(), Phase::Settling));
        // Before the next node goes, the cluster settles: no journal segment waiting for
        // its handoff and no shard handoff in flight on any node (an operator's "wait
        // until ready"; Kubernetes' readiness gate between pods).
        let settled = settle(demo, &all_nodes).await;
        phases.push((load.elapsed_ms(), Phase::Settled));
        println!(
            "  ✓ node {} replaced: left and exited in {:.1} s, the new version Up everywhere {:.1} s after SIGTERM, {}",
            i + 1,
            stopped.as_secs_f64(),
            up.as_secs_f64(),
            match settled {
                Some(t) => format!("the cluster settled {:.1} s after", t.as_secs_f64()),
                None => format!("the cluster not settled within {} s (going on)", SETTLE_WITHIN.as_secs()),
            }
        );
    }
    let roll_to = load.elapsed_ms();
    if let Some(path) = std::env::var_os("CONCORD_LOAD_TRACE") {
        // The phases beside the load's trace: `start_ms,phase` (each node's four in turn).
        let mut csv = format!("{steady_from},steady\n{roll_from},roll\n");
        for (at, phase) in &phases {
            csv.push_str(&format!("{at},{}\n", phase.label()));
        }
        csv.push_str(&format!("{roll_to},after\n"));
        let mut path = PathBuf::from(path).into_os_string();
        path.push(".phases");
        if let Err(e) = std::fs::write(&path, csv) {
            eprintln!("could not write the roll's phases to {path:?}: {e}");
        }
    }
    tokio::time::sleep(o.steady).await;
    let after_to = load.elapsed_ms();
    stop_sampling.store(true, Ordering::Relaxed);

    println!("Stopping the load and reading every entity back...");
    let finished = load.stop().await;
    let verdict = finished
        .verify(
            demo.nodes[0].management_port,
            None,
            "across the rolling upgrade of every node",
        )
        .await?;
    for l in &verdict.lines {
        println!("  {l}");
    }
    let steady = finished.window(steady_from, roll_from);
    let rolling = finished.window(roll_from, roll_to);
    let after = finished.window(roll_to, after_to);
    let m = moves.lock().unwrap_or_else(|p| p.into_inner());
    let shards = m.home.len().max(1);
    // Moves since the roll began.
    let per_shard: Vec<u32> = m
        .home
        .keys()
        .map(|s| {
            let all = m.moves.get(s).copied().unwrap_or(0);
            all.saturating_sub(moves_before.get(s).copied().unwrap_or(0))
        })
        .collect();
    let total: u32 = per_shard.iter().sum();
    let max = per_shard.iter().copied().max().unwrap_or(0);
    let ratio = rolling.percentile_ms(0.99) / steady.percentile_ms(0.99).max(0.001);
    println!(
        "  requests failed during the roll: {} of {} (target 0); before: {}, after: {}",
        rolling.failed,
        rolling.latencies_us.len() as u64 + rolling.failed,
        steady.failed,
        after.failed
    );
    for (why, count) in &rolling.causes {
        println!("    {count} × {why}");
    }
    println!(
        "  shard moves: {total} over {shards} shards during the roll and after ({:.2} per shard, {:.2} per shard per node replaced; most for one shard: {max}; target ≤ 1 per node replaced, ≤ {n} per shard)",
        f64::from(total) / shards as f64,
        f64::from(total) / shards as f64 / n as f64
    );
    // Which phases the slow requests fell in: slower than twice the steady p99.
    let slow_us = (steady.percentile_ms(0.99) * 2_000.0).max(1.0) as u64;
    let mut by_phase: BTreeMap<Phase, (u64, u64)> = BTreeMap::new();
    for (k, (from, phase)) in phases.iter().enumerate() {
        let to = phases.get(k + 1).map_or(roll_to, |p| p.0);
        let w = finished.window(*from, to);
        let slow = w.latencies_us.iter().filter(|l| **l > slow_us).count() as u64;
        let e = by_phase.entry(*phase).or_default();
        e.0 += slow;
        e.1 += w.latencies_us.len() as u64;
    }
    let shares: Vec<String> = by_phase
        .iter()
        .map(|(p, (slow, all))| {
            format!(
                "{} {slow} of {all} ({:.1} %)",
                p.label(),
                100.0 * *slow as f64 / (*all).max(1) as f64
            )
        })
        .collect();
    println!(
        "  requests slower than {:.1} ms (2× the steady p99) by phase: {}",
        slow_us as f64 / 1000.0,
        shares.join(", ")
    );
    println!(
        "  p99 latency: {:.1} ms steady, {:.1} ms during the roll ({ratio:.2}×, target ≤ 2×), {:.1} ms after; p50 {:.1} / {:.1} / {:.1} ms",
        steady.percentile_ms(0.99),
        rolling.percentile_ms(0.99),
        after.percentile_ms(0.99),
        steady.percentile_ms(0.50),
        rolling.percentile_ms(0.50),
        after.percentile_ms(0.50)
    );
    if o.json {
        println!(
            "{}",
            json!({
                "nodes": n,
                "steady": window_json(&steady),
                "rolling": window_json(&rolling),
                "after": window_json(&after),
                "p99Ratio": ratio,
                "shards": shards,
                "shardMoves": total,
                "maxMovesPerShard": max,
                "movesPerShardPerNodeReplaced": f64::from(total) / shards as f64 / n as f64,
                "shardSamples": m.samples,
                "slowByPhase": by_phase
                    .iter()
                    .map(|(p, (slow, all))| (p.label().to_string(), json!({ "slow": slow, "requests": all })))
                    .collect::<serde_json::Map<_, _>>(),
            })
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::metric_sum;

    #[test]
    fn a_metric_is_summed_over_its_labels_and_nothing_else() {
        let text = "# HELP concord_journal_pending_segments Segments waiting.\n\
                    # TYPE concord_journal_pending_segments gauge\n\
                    concord_journal_pending_segments{node=\"a\"} 3\n\
                    concord_journal_pending_segments{node=\"b\"} 2\n\
                    concord_journal_pending_segments_total 40\n\
                    concord_sharding_handoffs_in_progress 1\n";
        assert_eq!(metric_sum(text, "concord_journal_pending_segments"), 5.0);
        assert_eq!(
            metric_sum(text, "concord_sharding_handoffs_in_progress"),
            1.0
        );
        assert_eq!(metric_sum(text, "concord_absent"), 0.0);
    }
}
