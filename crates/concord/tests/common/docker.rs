//! Docker helpers for the container tests: a private network and `concord` containers
//! started from the FROM-scratch image (`scripts/docker-image`), removed again when the
//! [`DockerNet`] guard drops — also when the test panics.

use std::process::Command;
use std::time::{Duration, Instant};

use super::client::ManagementClient;
use concord::management::ClusterMembersJson;

/// The image the tests run (`CONCORD_IMAGE`, default `concord:dev`, as
/// `scripts/docker-image` tags it).
pub fn image() -> String {
    std::env::var("CONCORD_IMAGE").unwrap_or_else(|_| "concord:dev".into())
}

/// Runs `docker args…`; returns stdout, or Err with stderr.
pub fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run docker: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A Docker bridge network owned by one test, and the containers started on it.
pub struct DockerNet {
    pub name: String,
    /// First three octets of the network's IPv4 subnet, e.g. "172.18.0".
    prefix: String,
    containers: Vec<String>,
}

impl DockerNet {
    /// Creates a network `concord-<test>-<pid>` with its own /24 subnet (containers get fixed
    /// addresses, which Docker allows only on user-configured subnets); tries subnets
    /// 10.231.x.0/24 until one does not overlap an existing network.
    pub fn create(test: &str) -> DockerNet {
        let name = format!("concord-{test}-{}", std::process::id());
        let _ = docker(&["network", "rm", &name]);
        let start = std::process::id() % 250;
        for i in 0..250 {
            let prefix = format!("10.231.{}", (start + i) % 250);
            let subnet = format!("{prefix}.0/24");
            let created = docker(&[
                "network",
                "create",
                "--label",
                "concord-test",
                "--subnet",
                &subnet,
                &name,
            ]);
            match created {
                Ok(_) => {
                    return DockerNet {
                        name,
                        prefix,
                        containers: Vec::new(),
                    }
                }
                Err(e) if e.contains("overlap") => continue,
                Err(e) => panic!("{e}"),
            }
        }
        panic!("no free 10.231.x.0/24 subnet for a Docker network");
    }

    /// The IPv4 address with last octet `n` on this network.
    pub fn ip(&self, n: u8) -> String {
        format!("{}.{n}", self.prefix)
    }

    /// Container name of the node at `ip(n)`.
    pub fn container(&self, n: u8) -> String {
        format!("{}-n{n}", self.name)
    }

    /// Starts a `concord node` container at `ip(n)` with the given seed nodes and
    /// environment (`KEY=value`).
    pub fn start_node(&mut self, n: u8, seeds: &[u8], env: &[(&str, &str)]) -> String {
        let ip = self.ip(n);
        let name = self.container(n);
        let seeds = format!(
            "[{}]",
            seeds
                .iter()
                .map(|s| format!("\"{}:25520\"", self.ip(*s)))
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut args: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--name".into(),
            name.clone(),
            "--label".into(),
            "concord-test".into(),
            "--network".into(),
            self.name.clone(),
            "--ip".into(),
            ip.clone(),
            "-e".into(),
            format!("CONCORD__REMOTE__HOSTNAME={ip}"),
            "-e".into(),
            format!("CONCORD__CLUSTER__SEED_NODES={seeds}"),
            // Remoting binds every interface in a container: a cluster secret is required.
            "-e".into(),
            "CONCORD__REMOTE__SECRET=docker-test-cluster-secret-0123456789".into(),
        ];
        for (k, v) in env {
            args.push("-e".into());
            args.push(format!("{k}={v}"));
        }
        args.push(image());
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.containers.push(name.clone());
        docker(&refs).unwrap();
        name
    }

    /// `concord://concord@<ip(n)>:25520`.
    pub fn address(&self, n: u8) -> String {
        format!("concord://concord@{}:25520", self.ip(n))
    }

    /// Management API client of the node at `ip(n)` (reached from the host on the bridge).
    pub fn client(&self, n: u8) -> ManagementClient {
        ManagementClient::new(&format!("http://{}:8558", self.ip(n)))
    }

    pub fn members(&self, rt: &tokio::runtime::Runtime, n: u8) -> Option<ClusterMembersJson> {
        rt.block_on(self.client(n).members()).ok()
    }

    /// Every node of `views` sees exactly the members `expected` (by last octet), all Up, none
    /// unreachable.
    pub fn all_up(&self, rt: &tokio::runtime::Runtime, views: &[u8], expected: &[u8]) -> bool {
        let want: Vec<String> = expected.iter().map(|n| self.address(*n)).collect();
        views.iter().all(|v| match self.members(rt, *v) {
            Some(m) => {
                m.members.len() == want.len()
                    && want
                        .iter()
                        .all(|a| m.members.iter().any(|x| &x.node == a && x.status == "Up"))
                    && m.unreachable.is_empty()
            }
            None => false,
        })
    }

    /// `Some(exit code)` once the container of node `n` has stopped.
    pub fn exit_code(&self, n: u8) -> Option<i32> {
        let s = docker(&[
            "inspect",
            "-f",
            "{{.State.Running}} {{.State.ExitCode}}",
            &self.container(n),
        ])
        .ok()?;
        let mut it = s.split_whitespace();
        match (it.next(), it.next()) {
            (Some("false"), Some(code)) => code.parse().ok(),
            _ => None,
        }
    }

    pub fn logs(&self, n: u8) -> String {
        Command::new("docker")
            .args(["logs", &self.container(n)])
            .output()
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_default()
    }

    /// Polls `cond` every 200 ms; on timeout prints every container's log and panics.
    pub fn wait_until(&self, what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while start.elapsed() < timeout {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        for c in &self.containers {
            let out = Command::new("docker").args(["logs", c]).output();
            if let Ok(o) = out {
                eprintln!(
                    "---- log of {c} ----\n{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
            }
        }
        panic!("timed out after {timeout:?} waiting for: {what}");
    }
}

impl Drop for DockerNet {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", c]);
        }
        let _ = docker(&["network", "rm", &self.name]);
    }
}
