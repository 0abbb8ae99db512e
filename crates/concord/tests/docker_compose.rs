//! The compose deployment (deploy/docker-compose.yml): replicas find each other through
//! Docker's DNS and bootstrap one cluster with no seed-node list; scaling from 5 to 7 adds two
//! members; the management API (on every interface) serves probes and reads without a
//! token and refuses writes without it (401), and a leave with the token removes a member;
//! a graceful stop (SIGTERM) removes another. Everything the test started is removed when
//! it ends, also on failure (`docker-compose down`).
//!
//! Needs Docker and the image: run through `scripts/test` (README's test command).

mod common;

use std::process::Command;
use std::time::Duration;

use common::client::ManagementClient;
use common::docker::{docker, image};
use common::*;

const T: Duration = Duration::from_secs(90);

/// The management token the compose file requires (`CONCORD_MANAGEMENT_TOKEN`).
const TOKEN: &str = "compose-test-management-token-0123456789";

struct Compose {
    project: String,
    files: Vec<String>,
    env: Vec<(&'static str, String)>,
    /// The CA of the TLS variant (the management API is HTTPS then).
    tls_ca: Option<std::path::PathBuf>,
}

fn deploy_file(name: &str) -> String {
    format!("{}/../../deploy/{name}", env!("CARGO_MANIFEST_DIR"))
}

impl Compose {
    fn new(initial: usize) -> Compose {
        Compose {
            project: format!("concordtest{}", std::process::id()),
            files: vec![deploy_file("docker-compose.yml")],
            env: vec![
                ("CONCORD_IMAGE", image()),
                ("CONCORD_INITIAL_NODES", initial.to_string()),
                (
                    "CONCORD_CLUSTER_SECRET",
                    "compose-test-cluster-secret-0123456789".into(),
                ),
                ("CONCORD_MANAGEMENT_TOKEN", TOKEN.into()),
            ],
            tls_ca: None,
        }
    }

    /// The TLS variant (deploy/docker-compose.tls.yml) with the certificates in `certs`.
    fn tls(initial: usize, certs: &std::path::Path) -> Compose {
        let mut c = Compose::new(initial);
        c.project = format!("concordtlstest{}", std::process::id());
        c.files.push(deploy_file("docker-compose.tls.yml"));
        c.env.retain(|(k, _)| *k != "CONCORD_CLUSTER_SECRET");
        c.env
            .push(("CONCORD_CERTS_DIR", certs.display().to_string()));
        c.tls_ca = Some(certs.join("ca.crt"));
        c
    }

    fn base_args(&self) -> Vec<String> {
        let mut a = vec!["-p".to_string(), self.project.clone()];
        for f in &self.files {
            a.push("-f".into());
            a.push(f.clone());
        }
        a
    }

    fn compose(&self) -> Command {
        let mut cmd = Command::new("docker-compose");
        cmd.args(self.base_args());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }

    fn client(&self, ip: &str) -> ManagementClient {
        match &self.tls_ca {
            None => ManagementClient::new(&format!("http://{ip}:8558")),
            Some(ca) => ManagementClient::new(&format!("https://{ip}:8558"))
                .with_tls(ca, None, false)
                .unwrap(),
        }
    }

    fn run(&self, args: &[&str]) {
        let out = self
            .compose()
            .args(args)
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
                let client = self.client(&self.ip(c));
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
        let logs = self
            .compose()
            .args(["logs", "--no-color"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default();
        panic!("timed out waiting for: {what}\n{logs}");
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = self.compose().args(["down", "-v", "-t", "5"]).output();
    }
}

#[test]
#[ignore = "needs Docker and the concord image: run scripts/test"]
fn compose_replicas_bootstrap_one_cluster_scale_out_and_leave_gracefully() {
    let _s = serial();
    let rt = runtime();
    let compose = Compose::new(5);
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

    // The management API listens on every interface: probes, reads and the bootstrap
    // contact point need no token; writes do.
    let containers = compose.containers();
    let ip = compose.ip(&containers[0]);
    for path in [
        "/ready",
        "/alive",
        "/bootstrap/seed-nodes",
        "/cluster/members",
    ] {
        let r = rt
            .block_on(reqwest::get(format!("http://{ip}:8558{path}")))
            .unwrap();
        assert_eq!(r.status(), 200, "{path} without a token");
    }
    let leaver = format!("concord://concord@{}:25520", compose.ip(&containers[1]));
    match rt.block_on(compose.client(&ip).operation(&leaver, "Leave")) {
        Err(common::client::ClientError::Refused { status: 401, .. }) => {}
        other => panic!("a leave without the token: {other:?}"),
    }
    let with_token = compose.client(&ip).with_token(Some(TOKEN.into()));
    rt.block_on(with_token.operation(&leaver, "Leave"))
        .expect("a leave with the token");
    compose.wait("6 members after the leave", || {
        compose.one_cluster_of(&rt, 6)
    });

    // Graceful stop of one replica: it leaves, exits 0, the others remove it.
    let victim = compose.containers()[0].clone();
    docker(&["stop", "-t", "30", &victim]).unwrap();
    let code = docker(&["inspect", "-f", "{{.State.ExitCode}}", &victim]).unwrap();
    assert_eq!(code, "0", "a graceful stop exits 0");
    compose.wait("5 members after the graceful stop", || {
        compose.one_cluster_of(&rt, 5)
    });
}

#[test]
#[ignore = "needs Docker and the concord image: run scripts/test"]
fn the_tls_variant_forms_one_cluster_over_mutual_tls_from_concord_certs() {
    let _s = serial();
    let rt = runtime();
    let certs = tempfile::tempdir().unwrap();
    let ca_keys = tempfile::tempdir().unwrap();
    let ca_key = ca_keys.path().join("ca.key");
    let d = certs.path();
    concord::tls::certs::create_ca(d, Some(&ca_key), false).unwrap();
    concord::tls::certs::create_node(
        d,
        &["concord".into(), "localhost".into()],
        Some(&ca_key),
        false,
    )
    .unwrap();
    // The container reads the key as its own (root) user; the directory must be reachable.
    let compose = Compose::tls(3, d);
    compose.run(&["up", "-d", "--scale", "concord=3"]);
    compose.wait("one TLS cluster of 3", || compose.one_cluster_of(&rt, 3));
    // The management API is HTTPS only: plain HTTP gets no answer.
    let ip = compose.ip(&compose.containers()[0]);
    let plain = ManagementClient::new(&format!("http://{ip}:8558"));
    assert!(rt.block_on(plain.members()).is_err());
}
