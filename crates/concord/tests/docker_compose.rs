//! The compose deployment (deploy/docker-compose.yml): replicas find each other through
//! Docker's DNS and bootstrap one cluster with no seed-node list; scaling from 5 to 7 adds two
//! members; a graceful stop (SIGTERM) removes one. Everything the test started is removed
//! when it ends, also on failure (`docker-compose down`).
//!
//! Needs Docker and the image: run through `scripts/test` (README's test command).

mod common;

use std::process::Command;
use std::time::Duration;

use common::docker::{docker, image};
use common::*;
use concord::client::ManagementClient;

const T: Duration = Duration::from_secs(90);

struct Compose {
    project: String,
    file: String,
}

impl Compose {
    fn new() -> Compose {
        let file = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/docker-compose.yml"
        );
        Compose {
            project: format!("concordtest{}", std::process::id()),
            file: file.to_string(),
        }
    }

    fn run(&self, args: &[&str]) {
        let out = Command::new("docker-compose")
            .args(["-p", &self.project, "-f", &self.file])
            .args(args)
            .env("CONCORD_IMAGE", image())
            .env("CONCORD_INITIAL_NODES", "5")
            .output()
            .expect("run docker-compose");
        assert!(
            out.status.success(),
            "docker-compose {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Running containers of the project.
    fn containers(&self) -> Vec<String> {
        let filter = format!("label=com.docker.compose.project={}", self.project);
        docker(&["ps", "-q", "--filter", &filter])
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn ip(&self, container: &str) -> String {
        docker(&[
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            container,
        ])
        .unwrap()
    }

    /// Every running replica sees exactly `n` members, all Up, none unreachable.
    fn one_cluster_of(&self, rt: &tokio::runtime::Runtime, n: usize) -> bool {
        let cs = self.containers();
        cs.len() == n
            && cs.iter().all(|c| {
                let client = ManagementClient::new(&format!("http://{}:8558", self.ip(c)));
                match rt.block_on(client.members()) {
                    Ok(m) => {
                        m.members.len() == n
                            && m.members.iter().all(|x| x.status == "Up")
                            && m.unreachable.is_empty()
                    }
                    Err(_) => false,
                }
            })
    }

    fn wait(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let start = std::time::Instant::now();
        while start.elapsed() < T {
            if cond() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let logs = Command::new("docker-compose")
            .args(["-p", &self.project, "-f", &self.file, "logs", "--no-color"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        panic!("timed out waiting for: {what}\n{logs}");
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = Command::new("docker-compose")
            .args([
                "-p",
                &self.project,
                "-f",
                &self.file,
                "down",
                "-v",
                "-t",
                "5",
            ])
            .output();
    }
}

#[test]
#[ignore = "needs Docker and the concord image: run scripts/test"]
fn compose_replicas_bootstrap_one_cluster_scale_out_and_leave_gracefully() {
    let _s = serial();
    let rt = runtime();
    let compose = Compose::new();
    compose.run(&["up", "-d", "--scale", "concord=5"]);
    compose.wait("one cluster of 5", || compose.one_cluster_of(&rt, 5));
    let formers = compose
        .containers()
        .iter()
        .filter(|c| {
            Command::new("docker")
                .args(["logs", c])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stderr).contains("forming a new cluster"))
                .unwrap_or(false)
        })
        .count();
    assert_eq!(formers, 1, "exactly one replica formed the cluster");

    compose.run(&["up", "-d", "--no-recreate", "--scale", "concord=7"]);
    compose.wait("scaled to 7", || compose.one_cluster_of(&rt, 7));

    // Graceful stop of one replica: it leaves, exits 0, the others remove it.
    let victim = compose.containers()[0].clone();
    docker(&["stop", "-t", "30", &victim]).unwrap();
    let code = docker(&["inspect", "-f", "{{.State.ExitCode}}", &victim]).unwrap();
    assert_eq!(code, "0", "a graceful stop exits 0");
    compose.wait("6 members after the graceful stop", || {
        compose.one_cluster_of(&rt, 6)
    });
}
