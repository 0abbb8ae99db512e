//! `concord demo`: a sharded application on N real `concord node --sample` processes on
//! 127.0.0.1. A load generator sends a steady stream of counter increments and log appends
//! over many entities (the sample's `counter` and `log` types) through every node while the
//! demo narrates, with a live table of members and shards per node: a node joining (shards
//! rebalance to it), a graceful leave (its shards hand over), a crash (SIGKILL → the split
//! brain resolver downs it → its shards are allocated again). At the end it verifies that
//! no acknowledged increment was lost and every log holds its values in each sending
//! node's order, none missing unless its host crashed, and prints requests/s and latency.
//! Exits 0 when every step was observed and verified, non-zero naming what was not.
//! Ctrl-C stops every process it started.

mod load;
mod table;
pub(crate) mod upgrade;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::client::ManagementClient;
use concord::management::ClusterMembersJson;

use load::{Load, Targets};
use table::Snapshot;

/// Timings the demo nodes run with (faster than Akka's defaults so the tour takes about a
/// minute); printed at start.
pub const DEMO_ENV: [(&str, &str); 10] = [
    ("CONCORD__CLUSTER__GOSSIP_INTERVAL", "200ms"),
    ("CONCORD__CLUSTER__LEADER_ACTIONS_INTERVAL", "200ms"),
    (
        "CONCORD__CLUSTER__UNREACHABLE_NODES_REAPER_INTERVAL",
        "250ms",
    ),
    ("CONCORD__CLUSTER__PERIODIC_TASKS_INITIAL_DELAY", "200ms"),
    ("CONCORD__CLUSTER__SEED_NODE_TIMEOUT", "2s"),
    ("CONCORD__CLUSTER__RETRY_UNSUCCESSFUL_JOIN_AFTER", "3s"),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__HEARTBEAT_INTERVAL",
        "500ms",
    ),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__ACCEPTABLE_HEARTBEAT_PAUSE",
        "2s",
    ),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__EXPECTED_RESPONSE_AFTER",
        "500ms",
    ),
    // Sized for a handful of nodes (Akka's table: 5 nodes → 7 s); also the removal margin.
    ("CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "5s"),
];

const STEP_TIMEOUT: Duration = Duration::from_secs(90);

struct NodeProc {
    port: u16,
    management_port: u16,
    child: Option<Child>,
    client: ManagementClient,
}

impl NodeProc {
    fn address(&self) -> String {
        format!("concord://demo@127.0.0.1:{}", self.port)
    }
    fn running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }
}

struct Demo {
    exe: PathBuf,
    log_dir: PathBuf,
    nodes: Vec<NodeProc>,
    seeds: String,
    /// The nodes the load sends through.
    targets: Targets,
    last_table: String,
    /// Environment added to every node started (e.g. its app-version).
    extra_env: Vec<(String, String)>,
    /// Do not print the live table.
    quiet: bool,
}

fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .context("cannot find free ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

impl Demo {
    /// `n` nodes of `exe` on ports the kernel picked a moment ago (the first two are the
    /// seed nodes), logs and data under a new `<prefix>-<pid>` in the temporary directory.
    fn new(exe: PathBuf, prefix: &str, n: usize) -> anyhow::Result<Demo> {
        let log_dir = std::env::temp_dir().join(format!("{prefix}-{}", std::process::id()));
        std::fs::create_dir_all(&log_dir)
            .with_context(|| format!("cannot create {}", log_dir.display()))?;
        let ports = free_ports(2 * n)?;
        let nodes: Vec<NodeProc> = (0..n)
            .map(|i| NodeProc {
                port: ports[2 * i],
                management_port: ports[2 * i + 1],
                child: None,
                client: ManagementClient::new(&format!("http://127.0.0.1:{}", ports[2 * i + 1])),
            })
            .collect();
        let seeds = format!("127.0.0.1:{},127.0.0.1:{}", nodes[0].port, nodes[1].port);
        Ok(Demo {
            exe,
            log_dir,
            nodes,
            seeds,
            targets: Arc::new(Mutex::new(Vec::new())),
            last_table: String::new(),
            extra_env: Vec::new(),
            quiet: false,
        })
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let log = self.log_dir.join(format!("node-{}.log", i + 1));
        // Appended: a node started again (restarted, or replaced by another version)
        // keeps its earlier incarnation's log above its own.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let data = self.log_dir.join(format!("data-{}", i + 1));
        let n = &mut self.nodes[i];
        let mut cmd = Command::new(&self.exe);
        cmd.args([
            "node",
            "--system",
            "demo",
            "--host",
            "127.0.0.1",
            "--sample",
        ])
        .args([
            "--port",
            &n.port.to_string(),
            "--management-port",
            &n.management_port.to_string(),
        ])
        .args(["--seed-nodes", &self.seeds])
        .arg("--data-dir")
        .arg(&data)
        .envs(DEMO_ENV)
        .envs(self.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(file))
        .kill_on_drop(true);
        n.child = Some(
            cmd.spawn()
                .with_context(|| format!("cannot start {}", self.exe.display()))?,
        );
        Ok(())
    }

    async fn views(&mut self) -> BTreeMap<usize, ClusterMembersJson> {
        let mut out = BTreeMap::new();
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if !n.running() {
                continue;
            }
            if let Ok(v) = n.client.members().await {
                out.insert(i, v);
            }
        }
        out
    }

    /// The cluster as the first running node sees it.
    async fn snapshot(&mut self) -> Option<Snapshot> {
        for i in 0..self.nodes.len() {
            if self.nodes[i].running() {
                if let Some(s) = Snapshot::read(&self.nodes[i].client).await {
                    return Some(s);
                }
            }
        }
        None
    }

    /// Polls until `cond` holds, printing the live table whenever it changes.
    async fn wait_for(
        &mut self,
        step: &str,
        mut cond: impl FnMut(&mut Demo, &BTreeMap<usize, ClusterMembersJson>, &Snapshot) -> bool,
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        loop {
            let views = self.views().await;
            if let Some(snap) = self.snapshot().await {
                let table = snap.render();
                if table != self.last_table && !self.quiet {
                    println!("  at +{:.1}s:", start.elapsed().as_secs_f64());
                    print!("{table}");
                    self.last_table = table;
                }
                if cond(self, &views, &snap) {
                    return Ok(start.elapsed());
                }
            }
            if start.elapsed() > STEP_TIMEOUT {
                bail!(
                    "step `{step}` was not observed within {}s (node logs: {})",
                    STEP_TIMEOUT.as_secs(),
                    self.log_dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    fn signal(&mut self, i: usize, sig: Signal) {
        if let Some(c) = &self.nodes[i].child {
            if let Some(pid) = c.id() {
                let _ = kill(Pid::from_raw(pid as i32), sig);
            }
        }
    }

    fn set_targets(&self, nodes: &[usize]) {
        let t: Vec<(usize, u16)> = nodes
            .iter()
            .map(|i| (*i, self.nodes[*i].management_port))
            .collect();
        *self.targets.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }

    async fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].running() {
                self.signal(i, Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        for n in &mut self.nodes {
            if let Some(c) = &mut n.child {
                let left = deadline.saturating_duration_since(Instant::now());
                if tokio::time::timeout(left, c.wait()).await.is_err() {
                    let _ = c.start_kill();
                    let _ = c.wait().await;
                }
            }
        }
    }
}

fn all_up_everywhere(
    views: &BTreeMap<usize, ClusterMembersJson>,
    expected_nodes: &[String],
) -> bool {
    views.len() == expected_nodes.len()
        && views.values().all(|v| {
            v.members.len() == expected_nodes.len()
                && expected_nodes
                    .iter()
                    .all(|a| v.members.iter().any(|m| &m.node == a && m.status == "Up"))
                && v.unreachable.is_empty()
        })
}

/// Runs the demo with `n` nodes (it starts `n - 1`; the last one joins later).
pub async fn run(n: usize) -> anyhow::Result<()> {
    if n < 4 {
        bail!("the demo needs at least 4 nodes (--nodes {n}): one joins, one leaves, one crashes");
    }
    let exe = std::env::current_exe().context("cannot find the concord executable")?;
    let mut demo = Demo::new(exe, "concord-demo", n)?;
    let result = tokio::select! {
        r = tour(&mut demo) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted (Ctrl-C)")),
    };
    println!("\nStopping every node the demo started (graceful leave)...");
    demo.stop_all().await;
    match &result {
        Ok(()) => println!(
            "Demo complete: every step was observed and verified. Node logs: {}",
            demo.log_dir.display()
        ),
        Err(e) => println!("Demo FAILED: {e:#}"),
    }
    result
}

async fn tour(demo: &mut Demo) -> anyhow::Result<()> {
    let n = demo.nodes.len();
    println!(
        "Concord demo: a sharded application on {n} node processes of {} on 127.0.0.1",
        demo.exe.display()
    );
    println!(
        "Every node runs `concord node --sample`: entity types `counter` (event-sourced: each increment stored before it is acknowledged) and `log` (event-sourced, fed by each node's reliable producer: a value is acknowledged once it is in that node's durable queue, and appended once, in order)."
    );
    println!(
        "Timings: {}; sharding with its defaults (1000 shards, rebalance every 10s)",
        DEMO_ENV
            .iter()
            .map(|(k, v)| format!("{}={v}", k.trim_start_matches("CONCORD__").to_lowercase()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("Node logs: {}\n", demo.log_dir.display());

    let first: Vec<usize> = (0..n - 1).collect();
    println!(
        "Step 1/4: start {} nodes (seed nodes {}), then a load of counter increments and log appends over {} counters and {} logs through every node",
        n - 1,
        demo.seeds,
        load::COUNTERS,
        load::LOGS
    );
    for i in &first {
        demo.spawn(*i)?;
    }
    let all: Vec<String> = demo.nodes.iter().map(NodeProc::address).collect();
    let initial: Vec<String> = all[..n - 1].to_vec();
    let t = demo
        .wait_for("cluster formation", |_, v, _| {
            all_up_everywhere(v, &initial)
        })
        .await?;
    println!(
        "  ✓ {} members Up on every node after {:.1}s",
        n - 1,
        t.as_secs_f64()
    );
    demo.set_targets(&first);
    let load = Load::start(demo.targets.clone());
    let t = demo
        .wait_for("entities running on every node", |d, _, s| {
            let _ = d;
            load.answered() > 200 && initial.iter().all(|a| s.shards_of(a) > 0)
        })
        .await?;
    println!(
        "  ✓ the load runs; every node hosts shards ({:.1}s)\n",
        t.as_secs_f64()
    );

    let newcomer = n - 1;
    let new_addr = demo.nodes[newcomer].address();
    println!(
        "Step 2/4: node {} ({new_addr}) joins: the coordinator rebalances shards to it, each handed over with its entities' state while the load goes on",
        newcomer + 1
    );
    demo.spawn(newcomer)?;
    let joined = Instant::now();
    demo.wait_for("the new node Up", |_, v, _| all_up_everywhere(v, &all))
        .await?;
    let mut with_new = first.clone();
    with_new.push(newcomer);
    demo.set_targets(&with_new);
    let t = demo
        .wait_for("rebalance to the new node", |_, _, s| {
            let fair = s.total_shards() / n;
            fair > 0 && s.shards_of(&new_addr) + 2 >= fair
        })
        .await?;
    println!(
        "  ✓ node {} holds its share of the shards {:.1}s after it was started\n",
        newcomer + 1,
        (joined.elapsed()).as_secs_f64().max(t.as_secs_f64())
    );

    let leaver = 1;
    let leaver_addr = demo.nodes[leaver].address();
    println!(
        "Step 3/4: graceful leave of node {} ({leaver_addr}, SIGTERM): its shards are handed over before it exits",
        leaver + 1
    );
    let remaining: Vec<usize> = with_new.iter().copied().filter(|i| *i != leaver).collect();
    demo.set_targets(&remaining);
    tokio::time::sleep(Duration::from_millis(300)).await;
    demo.signal(leaver, Signal::SIGTERM);
    let rest: Vec<String> = remaining.iter().map(|i| all[*i].clone()).collect();
    let t = demo
        .wait_for("graceful leave", |d, v, s| {
            !d.nodes[leaver].running()
                && all_up_everywhere(v, &rest)
                && s.shards_of(&leaver_addr) == 0
        })
        .await?;
    println!(
        "  ✓ node {} handed over every shard, left and exited ({:.1}s)\n",
        leaver + 1,
        t.as_secs_f64()
    );

    let victim = 2;
    let victim_addr = demo.nodes[victim].address();
    println!(
        "Step 4/4: crash of node {} ({victim_addr}, SIGKILL): the others see it unreachable, the split brain resolver downs it, and its shards are allocated again after the removal margin",
        victim + 1
    );
    let reader = demo.nodes[0].management_port;
    let survivors: Vec<usize> = remaining.iter().copied().filter(|i| *i != victim).collect();
    let shards_before = demo.snapshot().await.map_or(0, |s| s.total_shards());
    demo.set_targets(&survivors);
    tokio::time::sleep(Duration::from_millis(300)).await;
    demo.signal(victim, Signal::SIGKILL);
    if let Some(c) = &mut demo.nodes[victim].child {
        let _ = c.wait().await;
    }
    let crashed = Instant::now();
    let t = demo
        .wait_for("crash detected as unreachable", |_, v, _| {
            // Unreachable, or already downed and removed (between two polls).
            survivors.iter().all(|i| {
                v.get(i).is_some_and(|view| {
                    view.unreachable.iter().any(|u| u.node == victim_addr)
                        || !view.members.iter().any(|m| m.node == victim_addr)
                })
            })
        })
        .await?;
    println!(
        "  ✓ every other node marks it UNREACHABLE ({:.1}s after the kill)",
        t.as_secs_f64()
    );
    let rest: Vec<String> = survivors.iter().map(|i| all[*i].clone()).collect();
    demo.wait_for("downed and removed", |_, v, _| all_up_everywhere(v, &rest))
        .await?;
    println!(
        "  ✓ downed by the split brain resolver and removed ({:.1}s after the kill)",
        crashed.elapsed().as_secs_f64()
    );
    let before = load.answered();
    demo.wait_for("its shards allocated again", |_, _, s| {
        s.total_shards() >= shards_before && load.answered() > before + 200
    })
    .await?;
    println!(
        "  ✓ its shards run elsewhere again and the load is served ({:.1}s after the kill)\n",
        crashed.elapsed().as_secs_f64()
    );

    println!("Stopping the load and reading every entity back...");
    let finished = load.stop().await;
    let verdict = finished
        .verify(
            reader,
            Some(victim),
            "across the join, the leave and the crash",
        )
        .await?;
    for l in verdict.lines {
        println!("  {l}");
    }
    Ok(())
}
