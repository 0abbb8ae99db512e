//! Helpers for tests that run real `concord node` processes on loopback.
#![allow(dead_code)]

/// The `concord` binary's bench layer (`src/bin/concord/bench/layer.rs`): a protocol that
/// carries opaque payloads and counts what arrives, for tests that flood a lane.
#[path = "../../src/bin/concord/bench/layer.rs"]
pub mod bench_layer;
/// The `concord` binary's clients of the management and key-value APIs
/// (`src/bin/concord/client`). A binary's modules cannot be imported, so the tests compile
/// its files here; they name the library as `concord::` only.
#[path = "../../src/bin/concord/client/mod.rs"]
pub mod client;
pub mod counter_entity;
pub mod counter_load;
pub mod delivery;
pub mod docker;
pub mod echo_cluster;
pub mod postgres;
pub mod sample_cluster;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use client::ManagementClient;
use concord::management::ClusterMembersJson;

/// Tests that start processes run one at a time (2-core CI machines).
pub static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Fast timings for tests: gossip 100 ms, heartbeat 200 ms, pause 1.5 s.
pub const FAST_ENV: [(&str, &str); 10] = [
    ("CONCORD__CLUSTER__GOSSIP_INTERVAL", "100ms"),
    ("CONCORD__CLUSTER__LEADER_ACTIONS_INTERVAL", "100ms"),
    (
        "CONCORD__CLUSTER__UNREACHABLE_NODES_REAPER_INTERVAL",
        "100ms",
    ),
    ("CONCORD__CLUSTER__PERIODIC_TASKS_INITIAL_DELAY", "100ms"),
    ("CONCORD__CLUSTER__SEED_NODE_TIMEOUT", "1s"),
    ("CONCORD__CLUSTER__RETRY_UNSUCCESSFUL_JOIN_AFTER", "2s"),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__HEARTBEAT_INTERVAL",
        "200ms",
    ),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__ACCEPTABLE_HEARTBEAT_PAUSE",
        "1500ms",
    ),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__EXPECTED_RESPONSE_AFTER",
        "500ms",
    ),
    ("CONCORD__CLUSTER__EXITING_SHUTDOWN_TIMEOUT", "5s"),
];

/// Ports that were free a moment ago. Only for tests that must name ports before a node
/// starts (static discovery lists, DNS records), through [`start_on_free_ports`], which
/// retries when another process takes one in between; everything else starts nodes on
/// port 0 with [`Node::start_bound`] and reads the ports back.
pub fn free_ports(n: usize) -> Vec<u16> {
    let ls: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    ls.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Starts nodes whose configuration must name their ports in advance: picks `n` free ports,
/// runs `start` with them, and if a node could not bind (another process took its port
/// between the pick and the bind) stops them all and tries again with new ports.
pub fn start_on_free_ports<T>(
    n: usize,
    mut start: impl FnMut(&[u16]) -> (Vec<Node>, T),
) -> (Vec<Node>, T) {
    for _ in 0..5 {
        let ports = free_ports(n);
        let (mut nodes, extra) = start(&ports);
        if nodes
            .iter_mut()
            .all(|node| node.wait_running(Duration::from_secs(30)))
        {
            return (nodes, extra);
        }
        eprintln!("a port was taken before a node could bind it; trying new ports");
    }
    panic!("could not start the nodes on free ports in 5 attempts");
}

/// A `concord node` child process; killed when dropped.
pub struct Node {
    /// Loopback IP the node binds and advertises (127.0.0.1 unless started with `start_on`).
    pub host: String,
    pub port: u16,
    pub management_port: u16,
    pub system: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Node {
    pub fn start(
        system: &str,
        port: u16,
        management_port: u16,
        seeds: &[u16],
        extra_env: &[(&str, &str)],
    ) -> Node {
        Node::start_on("127.0.0.1", system, port, management_port, seeds, extra_env)
    }

    /// Like [`Node::start`], on the loopback address `host` (remoting and management).
    pub fn start_on(
        host: &str,
        system: &str,
        port: u16,
        management_port: u16,
        seeds: &[u16],
        extra_env: &[(&str, &str)],
    ) -> Node {
        Node::start_with_args(host, system, port, management_port, seeds, extra_env, &[])
    }

    /// Like [`Node::start_on`], with extra `concord node` arguments (e.g. `--sample`).
    pub fn start_with_args(
        host: &str,
        system: &str,
        port: u16,
        management_port: u16,
        seeds: &[u16],
        extra_env: &[(&str, &str)],
        args: &[&str],
    ) -> Node {
        Node::spawn(
            host,
            system,
            port,
            management_port,
            seeds,
            extra_env,
            args,
            None,
        )
    }

    /// Like [`Node::start_bound`], the process limited to `nofile` file descriptors.
    pub fn start_bound_with_fd_limit(
        system: &str,
        extra_env: &[(&str, &str)],
        nofile: u64,
    ) -> Node {
        let mut node = Node::spawn("127.0.0.1", system, 0, 0, &[], extra_env, &[], Some(nofile));
        node.wait_bound();
        let rt = runtime();
        rt.block_on(node.client().join(&node.address()))
            .expect("the first node joins itself");
        node
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn(
        host: &str,
        system: &str,
        port: u16,
        management_port: u16,
        seeds: &[u16],
        extra_env: &[(&str, &str)],
        args: &[&str],
        nofile: Option<u64>,
    ) -> Node {
        let dir = std::env::temp_dir().join(format!("concord-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("node-{port}-{}.log", rand_suffix()));
        let file = std::fs::File::create(&log).unwrap();
        let seeds = seeds
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_concord"));
        cmd.args([
            "node",
            "--system",
            system,
            "--host",
            host,
            "--port",
            &port.to_string(),
        ])
        .args(["--management-port", &management_port.to_string()])
        .args(args)
        .env("CONCORD__MANAGEMENT__HOSTNAME", host)
        .envs(FAST_ENV)
        .envs(extra_env.iter().copied())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(file));
        if !seeds.is_empty() {
            cmd.args(["--seed-nodes", &seeds]);
        }
        // A fresh data directory per process unless the test gives one: a node restarted
        // by a test starts as a new node (no membership record) unless the test says so.
        if !args.contains(&"--data-dir") {
            let data = dir.join(format!("data-{port}-{}", rand_suffix()));
            cmd.arg("--data-dir").arg(data);
        }
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            // SAFETY: only setrlimit between fork and exec (async-signal-safe).
            unsafe {
                cmd.pre_exec(move || {
                    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, n, n)
                        .map_err(std::io::Error::from)
                });
            }
        }
        let child = cmd.spawn().expect("start concord node");
        Node {
            host: host.to_string(),
            port,
            management_port,
            system: system.to_string(),
            child,
            log,
        }
    }

    /// Starts a node whose remoting and management listeners bind port 0, waits for its
    /// "node running" log line and reads the ports it got. With no `seeds` it joins itself
    /// (a new cluster).
    pub fn start_bound(system: &str, seeds: &[u16], extra_env: &[(&str, &str)]) -> Node {
        Node::start_bound_with_args(system, seeds, extra_env, &[])
    }

    /// Like [`Node::start_bound`], with extra `concord node` arguments.
    pub fn start_bound_with_args(
        system: &str,
        seeds: &[u16],
        extra_env: &[(&str, &str)],
        args: &[&str],
    ) -> Node {
        let mut node = Node::start_with_args("127.0.0.1", system, 0, 0, seeds, extra_env, args);
        node.wait_bound();
        if seeds.is_empty() {
            // With the node's bearer token among `extra_env`, if it has one.
            let token = extra_env
                .iter()
                .find(|(k, _)| *k == "CONCORD__MANAGEMENT__BEARER_TOKEN")
                .map(|(_, v)| v.to_string());
            let rt = runtime();
            rt.block_on(node.client().with_token(token).join(&node.address()))
                .expect("the first node joins itself");
        }
        node
    }

    /// Starts a node that binds port 0 and joins nothing until told to (through its
    /// management API), so that a test can set up faults towards it first.
    pub fn start_unjoined(system: &str, extra_env: &[(&str, &str)]) -> Node {
        let mut node = Node::start_with_args("127.0.0.1", system, 0, 0, &[], extra_env, &[]);
        node.wait_bound();
        node
    }

    /// Waits for the "node running" line and reads the ports the node bound.
    fn wait_bound(&mut self) {
        if !self.wait_running(Duration::from_secs(30)) {
            panic!("node did not report its ports:\n{}", self.log_text());
        }
        let (port, management_port) =
            parse_running_line(&self.log_text()).expect("the running line names the ports");
        self.port = port;
        self.management_port = management_port;
    }

    pub fn address(&self) -> String {
        format!("concord://{}@{}:{}", self.system, self.host, self.port)
    }

    /// The key-value API's port from the "node running" line (`kv=Some(host:port)`).
    pub fn kv_port(&self) -> Option<u16> {
        let log = self.log_text();
        let line = log.lines().find(|l| l.contains("node running"))?;
        let kv = line.split("kv=Some(").nth(1)?.split(')').next()?;
        kv.rsplit(':').next()?.parse().ok()
    }

    pub fn management_url(&self) -> String {
        format!("http://{}:{}", self.host, self.management_port)
    }

    pub fn client(&self) -> ManagementClient {
        ManagementClient::new(&self.management_url())
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for the node's "node running" line; false if it exited first (or `timeout`).
    pub fn wait_running(&mut self, timeout: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if parse_running_line(&self.log_text()).is_some() {
                return true;
            }
            if !self.is_running() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig);
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The remoting and management ports from a node's `node running address=concord://s@h:P
/// management=Some(h:M)` log line.
fn parse_running_line(log: &str) -> Option<(u16, u16)> {
    let line = log.lines().find(|l| l.contains("node running"))?;
    let address = line.split("address=").nth(1)?.split_whitespace().next()?;
    let port = address.rsplit(':').next()?.parse().ok()?;
    let management = line.split("management=Some(").nth(1)?.split(')').next()?;
    let management_port = management.rsplit(':').next()?.parse().ok()?;
    Some((port, management_port))
}

fn rand_suffix() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        % 1_000_000)
        * 1000
        + n % 1000
}

pub fn runtime() -> tokio::runtime::Runtime {
    // reqwest builds its TLS configuration from the process's rustls provider.
    concord::tls::install_default_provider();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// GET /cluster/members of a node (None if it does not answer).
pub fn members(rt: &tokio::runtime::Runtime, n: &Node) -> Option<ClusterMembersJson> {
    rt.block_on(n.client().members()).ok()
}

/// Polls until `cond` or panics after `timeout`, naming `what` and dumping logs.
pub fn wait_until(what: &str, timeout: Duration, nodes: &[&Node], mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if cond() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for n in nodes {
        eprintln!("---- log of {} ----\n{}", n.address(), n.log_text());
    }
    panic!("timed out after {timeout:?} waiting for: {what}");
}

/// True if every node in `views` sees exactly `expected` members, all Up, none unreachable.
pub fn all_up(rt: &tokio::runtime::Runtime, views: &[&Node], expected: &[String]) -> bool {
    views.iter().all(|n| match members(rt, n) {
        Some(m) => {
            m.members.len() == expected.len()
                && expected
                    .iter()
                    .all(|a| m.members.iter().any(|x| &x.node == a && x.status == "Up"))
                && m.unreachable.is_empty()
        }
        None => false,
    })
}

/// Akka's default timings, overriding the fast settings the test helpers start nodes with.
pub const AKKA_DEFAULT_ENV: [(&str, &str); 10] = [
    ("CONCORD__CLUSTER__GOSSIP_INTERVAL", "1s"),
    ("CONCORD__CLUSTER__LEADER_ACTIONS_INTERVAL", "1s"),
    ("CONCORD__CLUSTER__UNREACHABLE_NODES_REAPER_INTERVAL", "1s"),
    ("CONCORD__CLUSTER__PERIODIC_TASKS_INITIAL_DELAY", "1s"),
    ("CONCORD__CLUSTER__SEED_NODE_TIMEOUT", "5s"),
    ("CONCORD__CLUSTER__RETRY_UNSUCCESSFUL_JOIN_AFTER", "10s"),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__HEARTBEAT_INTERVAL",
        "1s",
    ),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__ACCEPTABLE_HEARTBEAT_PAUSE",
        "3s",
    ),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__EXPECTED_RESPONSE_AFTER",
        "1s",
    ),
    ("CONCORD__CLUSTER__EXITING_SHUTDOWN_TIMEOUT", "10s"),
];

/// Fast Cluster Bootstrap timings for tests: lookups and probes every 200 ms, stable margin 1 s.
pub const BOOTSTRAP_FAST_ENV: [(&str, &str); 3] = [
    (
        "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__INTERVAL",
        "200ms",
    ),
    (
        "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__STABLE_MARGIN",
        "1s",
    ),
    ("CONCORD__BOOTSTRAP__CONTACT_POINT__PROBE_INTERVAL", "200ms"),
];

/// A configuration for an in-process node with the fast test timings: remoting and
/// management on ports the kernel picks (port 0, read back from the node), seed nodes on
/// loopback `seeds`.
pub fn fast_config(system: &str, seeds: &[u16]) -> concord::Config {
    let overrides = concord::config::env_overrides(
        FAST_ENV.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let mut c = concord::Config::load(None, &overrides).unwrap();
    c.system = system.into();
    c.remote.port = 0;
    c.management.port = 0;
    c.cluster.seed_nodes = seeds.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    // A fresh data directory (membership record, stores) per node.
    c.data_dir = std::env::temp_dir()
        .join(format!("concord-test-{}", std::process::id()))
        .join(format!("data-{}", rand_suffix()))
        .display()
        .to_string();
    c
}

/// Starts an in-process node with `config` that forms a new cluster by joining itself.
pub async fn start_first(config: concord::Config) -> concord::Node {
    let n = concord::Node::start(config).await.unwrap();
    let me = n.self_address().clone();
    n.cluster().join(me).await.unwrap();
    n
}

/// The remoting port of an in-process node (to use it as a seed).
pub fn port_of(n: &concord::Node) -> u16 {
    n.remoting_addr().port()
}

/// Polls `cond` every 100 ms for up to 30 s; panics naming `what`.
pub async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..300 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Like [`wait_for`], with a condition that is itself asynchronous (asks a node).
pub async fn wait_for_async<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if cond().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Waits until the in-process node `n` sees itself Up.
pub async fn wait_self_up(n: &concord::Node) {
    wait_for("self Up", || {
        n.cluster()
            .view()
            .self_member()
            .is_some_and(|m| m.status == concord_core::MemberStatus::Up)
    })
    .await;
}

/// The number of members of `n`'s view with `status`.
pub fn count_status(n: &concord::Node, status: concord_core::MemberStatus) -> usize {
    n.cluster().view().members_with_status(status).count()
}
pub mod wire_peer;

/// `concord events <entity_type> --max <max> --management <url>`: the JSON objects it
/// prints, one per line.
pub async fn events_cli(url: &str, entity_type: &str, max: usize) -> Vec<serde_json::Value> {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_concord"))
        .args([
            "events",
            entity_type,
            "--max",
            &max.to_string(),
            "--management",
            url,
        ])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `GET url`, its body as JSON (a test's failure if the request or the body fails).
pub async fn get_json(url: &str) -> serde_json::Value {
    get_json_with(&reqwest::Client::new(), url).await
}

/// [`get_json`] through `http` (e.g. a client that trusts a test CA).
pub async fn get_json_with(http: &reqwest::Client, url: &str) -> serde_json::Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}
