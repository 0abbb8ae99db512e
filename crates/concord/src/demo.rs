//! `concord demo`: starts N real `concord node` processes on 127.0.0.1 and shows the
//! membership lifecycle: formation, a graceful leave, a crash (SIGKILL → Unreachable →
//! Down → Removed) and a restart on the same port (new uid joins, old incarnation gone).
//! Exits 0 when every step was observed, non-zero naming the step that was not. Ctrl-C
//! stops every process it started.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::client::{members_table, ManagementClient};
use crate::management::ClusterMembersJson;

/// Timings the demo nodes run with (faster than Akka's defaults so the tour takes about a
/// minute); printed at start.
pub const DEMO_ENV: [(&str, &str); 9] = [
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
];

const STEP_TIMEOUT: Duration = Duration::from_secs(60);

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
    fn spawn(&mut self, i: usize, incarnation: usize) -> anyhow::Result<()> {
        let log = self
            .log_dir
            .join(format!("node-{}-{}.log", i + 1, incarnation));
        let file = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let n = &mut self.nodes[i];
        let mut cmd = Command::new(&self.exe);
        cmd.args(["node", "--system", "demo", "--host", "127.0.0.1"])
            .args([
                "--port",
                &n.port.to_string(),
                "--management-port",
                &n.management_port.to_string(),
            ])
            .args(["--seed-nodes", &self.seeds])
            .envs(DEMO_ENV)
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

    /// Polls every running node until `cond` holds, printing the view of the first node
    /// whenever it changes.
    async fn wait_for(
        &mut self,
        step: &str,
        mut cond: impl FnMut(&mut Demo, &BTreeMap<usize, ClusterMembersJson>) -> bool,
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        let mut last_table = String::new();
        loop {
            let views = self.views().await;
            if let Some((i, v)) = views.iter().next() {
                let table = members_table(v);
                if table != last_table {
                    println!(
                        "  view of node {} at +{:.1}s:",
                        i + 1,
                        start.elapsed().as_secs_f64()
                    );
                    for l in table.lines() {
                        println!("    {l}");
                    }
                    last_table = table;
                }
            }
            if cond(self, &views) {
                return Ok(start.elapsed());
            }
            if start.elapsed() > STEP_TIMEOUT {
                bail!(
                    "step `{step}` was not observed within {}s (node logs: {})",
                    STEP_TIMEOUT.as_secs(),
                    self.log_dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    fn signal(&mut self, i: usize, sig: Signal) {
        if let Some(c) = &self.nodes[i].child {
            if let Some(pid) = c.id() {
                let _ = kill(Pid::from_raw(pid as i32), sig);
            }
        }
    }

    /// The uid of the member at `address` as node 1 sees it (empty if absent).
    async fn uid_of(&self, address: &str) -> anyhow::Result<String> {
        let view = self.nodes[0].client.members().await?;
        Ok(view
            .members
            .into_iter()
            .find(|m| m.node == address)
            .map(|m| m.node_uid)
            .unwrap_or_default())
    }

    async fn stop_all(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].running() {
                self.signal(i, Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
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

/// Runs the demo with `n` nodes.
pub async fn run(n: usize) -> anyhow::Result<()> {
    if n < 3 {
        bail!("the demo needs at least 3 nodes (--nodes {n})");
    }
    let exe = std::env::current_exe().context("cannot find the concord executable")?;
    let log_dir = std::env::temp_dir().join(format!("concord-demo-{}", std::process::id()));
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
    let mut demo = Demo {
        exe,
        log_dir,
        nodes,
        seeds,
    };
    let result = tokio::select! {
        r = tour(&mut demo) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted (Ctrl-C)")),
    };
    println!("\nStopping every node the demo started (graceful leave)...");
    demo.stop_all().await;
    match &result {
        Ok(()) => println!(
            "Demo complete: every step was observed. Node logs: {}",
            demo.log_dir.display()
        ),
        Err(e) => println!("Demo FAILED: {e:#}"),
    }
    result
}

async fn tour(demo: &mut Demo) -> anyhow::Result<()> {
    let n = demo.nodes.len();
    println!(
        "Concord demo: {n} node processes of {} on 127.0.0.1",
        demo.exe.display()
    );
    println!(
        "Timings: {}",
        DEMO_ENV
            .iter()
            .map(|(k, v)| format!("{}={v}", k.trim_start_matches("CONCORD__").to_lowercase()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("Node logs: {}\n", demo.log_dir.display());

    println!(
        "Step 1/4: start {n} nodes with seed nodes {} and wait until every node sees all {n} Up",
        demo.seeds
    );
    for i in 0..n {
        demo.spawn(i, 1)?;
    }
    let all: Vec<String> = demo.nodes.iter().map(NodeProc::address).collect();
    let t = demo
        .wait_for("cluster formation", |_, v| all_up_everywhere(v, &all))
        .await?;
    println!(
        "  ✓ {n} members Up on all {n} nodes after {:.1}s, one leader\n",
        t.as_secs_f64()
    );

    let leaver = n - 1;
    let leaver_addr = demo.nodes[leaver].address();
    println!(
        "Step 2/4: graceful leave of node {} ({leaver_addr}) through node 1's management API",
        leaver + 1
    );
    let msg = demo.nodes[0]
        .client
        .operation(&leaver_addr, "Leave")
        .await
        .context("step `graceful leave`: request failed")?;
    println!("  API: {msg}");
    let rest: Vec<String> = all[..leaver].to_vec();
    let t = demo
        .wait_for("graceful leave", |d, v| {
            let exited = !d.nodes[leaver].running();
            exited && all_up_everywhere(v, &rest)
        })
        .await?;
    println!("  ✓ node {} went Leaving → Exiting → Removed on every node and its process exited by itself ({:.1}s)\n", leaver + 1, t.as_secs_f64());

    let victim = n - 2;
    let victim_addr = demo.nodes[victim].address();
    let old_uid = demo.uid_of(&victim_addr).await?;
    println!(
        "Step 3/4: crash node {} ({victim_addr}, uid {old_uid}) with SIGKILL",
        victim + 1
    );
    demo.signal(victim, Signal::SIGKILL);
    if let Some(c) = &mut demo.nodes[victim].child {
        let _ = c.wait().await;
    }
    let survivors: Vec<usize> = (0..victim).collect();
    let t = demo
        .wait_for("crash detected as unreachable", |_, v| {
            survivors.iter().all(|i| {
                v.get(i)
                    .is_some_and(|view| view.unreachable.iter().any(|u| u.node == victim_addr))
            })
        })
        .await?;
    println!("  ✓ every other node marks it UNREACHABLE ({:.1}s after the kill); no convergence now, so it must be downed", t.as_secs_f64());
    let msg = demo.nodes[0]
        .client
        .operation(&victim_addr, "Down")
        .await
        .context("step `down`: request failed")?;
    println!("  API: {msg}");
    let rest: Vec<String> = all[..victim].to_vec();
    let t = demo
        .wait_for("down and removal", |_, v| all_up_everywhere(v, &rest))
        .await?;
    println!(
        "  ✓ Down → Removed on every node ({:.1}s)\n",
        t.as_secs_f64()
    );

    println!(
        "Step 4/4: restart node {} on the same port ({victim_addr})",
        victim + 1
    );
    demo.spawn(victim, 2)?;
    let with_new: Vec<String> = all[..=victim].to_vec();
    let t = demo
        .wait_for("restart with a new uid", |_, v| {
            all_up_everywhere(v, &with_new)
                && v.values().all(|view| {
                    view.members
                        .iter()
                        .any(|m| m.node == victim_addr && m.node_uid != old_uid)
                })
        })
        .await?;
    let new_uid = demo.uid_of(&victim_addr).await?;
    println!(
        "  ✓ joined again with new uid {new_uid} (old uid {old_uid} gone) after {:.1}s",
        t.as_secs_f64()
    );
    Ok(())
}
