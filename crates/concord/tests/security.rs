//! Security settings end to end (issue: authenticated, encrypted remoting and management):
//! a TLS cluster made from `concord certs` output, peers without the right certificate
//! refused; a cluster secret, peers without it refused; secure by default; the
//! management API over HTTPS with client certificates, and its Host/Origin checks, 413
//! and 409. In-process nodes on loopback; the certificate files come from the binary.

mod common;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::client::ManagementClient;
use common::wire_peer::{membership_envelope, write_frame, Outcome, WirePeer};
use common::{fast_config, port_of, start_first, wait_for, wait_self_up};
use concord::config::TlsConfig;
use concord::{Config, Node};
use concord_core::{Address, ClusterMessage, Lane, MemberStatus, UniqueAddress};
use rustls::pki_types::pem::PemObject;

fn certs(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_concord"))
        .arg("certs")
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "concord certs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `concord certs` in `dir`: a CA, a node certificate for loopback, a client `root`.
fn make_certs(dir: &Path) {
    certs(dir, &["create-ca"]);
    certs(dir, &["create-node", "127.0.0.1", "localhost"]);
    certs(dir, &["create-client", "root"]);
}

fn tls(dir: &Path) -> TlsConfig {
    TlsConfig {
        certificate: dir.join("node.crt"),
        private_key: dir.join("node.key"),
        ca_certificates: dir.join("ca.crt"),
        verify_peer_hostname: Some(true),
    }
}

fn tls_config(system: &str, seeds: &[u16], dir: &Path) -> Config {
    let mut c = fast_config(system, seeds);
    c.remote.tls = Some(tls(dir));
    c.management.tls = Some(tls(dir));
    c
}

fn all_up(n: &Node, count: usize) -> bool {
    let v = n.cluster().view();
    v.members.len() == count && v.members.values().all(|m| m.status == MemberStatus::Up)
}

async fn form(configs: Vec<Config>) -> Vec<Node> {
    let mut nodes = Vec::new();
    let mut it = configs.into_iter();
    let first = start_first(it.next().unwrap()).await;
    wait_self_up(&first).await;
    let seed = port_of(&first);
    nodes.push(first);
    for mut c in it {
        c.cluster.seed_nodes = vec![format!("127.0.0.1:{seed}")];
        nodes.push(Node::start(c).await.unwrap());
    }
    let n = nodes.len();
    for node in &nodes {
        wait_for("every node Up everywhere", || all_up(node, n)).await;
    }
    nodes
}

fn auth_failures(n: &Node) -> u64 {
    n.transport()
        .stats()
        .authentication_failures
        .load(Ordering::Relaxed)
}

/// Holds membership for `d` and checks it never changes from `count` members all Up.
async fn membership_stays(nodes: &[Node], count: usize, d: Duration) {
    let end = tokio::time::Instant::now() + d;
    while tokio::time::Instant::now() < end {
        for n in nodes {
            assert!(
                all_up(n, count),
                "membership changed: {:?}",
                n.cluster().view().members
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn stranger(system: &str, port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new(system, "127.0.0.1", port), 777)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_forms_from_concord_certs_and_refuses_peers_without_a_trusted_certificate() {
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let other_ca = tempfile::tempdir().unwrap();
    make_certs(other_ca.path());
    let sys = "tls";
    let nodes = form((0..3).map(|_| tls_config(sys, &[], dir.path())).collect()).await;
    let seed = port_of(&nodes[0]);
    let target = nodes[0].self_address().clone();

    // 1. A node whose certificate comes from another CA cannot join.
    let before = auth_failures(&nodes[0]);
    let intruder = Node::start(tls_config(sys, &[seed], other_ca.path()))
        .await
        .unwrap();
    wait_for("the foreign certificate refused", || {
        auth_failures(&nodes[0]) > before
    })
    .await;
    membership_stays(&nodes, 3, Duration::from_secs(2)).await;
    assert!(intruder.cluster().view().self_member().is_none());
    intruder.stop().await;

    // 2. A TLS client with no certificate.
    let before = auth_failures(&nodes[0]);
    let roots = {
        let mut r = rustls::RootCertStore::empty();
        for c in
            rustls::pki_types::CertificateDer::pem_file_iter(dir.path().join("ca.crt")).unwrap()
        {
            r.add(c.unwrap()).unwrap();
        }
        r
    };
    let client = rustls::ClientConfig::builder_with_provider(concord::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(nodes[0].remoting_addr())
        .await
        .unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    // The server requires a certificate: the handshake (or the first read) fails.
    if let Ok(mut s) = connector.connect(name, tcp).await {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _ = s.write_all(&[0, 0, 0, 1, 0]).await;
        let mut b = [0u8; 16];
        let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await;
        assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "{r:?}");
    }
    wait_for("the certificate-less client refused", || {
        auth_failures(&nodes[0]) > before
    })
    .await;

    // 3. Plain TCP speaking the protocol: it never gets to send its Join.
    let before = auth_failures(&nodes[0]);
    let peer = WirePeer::new(stranger(sys, 1));
    let (conn, outcome) = peer.connect(&target, Lane::Control).await;
    assert!(
        conn.is_none() && matches!(outcome, Outcome::Closed | Outcome::Rejected(_)),
        "{outcome:?}"
    );
    wait_for("the plain TCP peer refused", || {
        auth_failures(&nodes[0]) > before
    })
    .await;
    membership_stays(&nodes, 3, Duration::from_secs(1)).await;

    // The management API over HTTPS: reads with the CA, writes with a client certificate.
    let base = format!("https://{}", nodes[0].management_addr().unwrap());
    let ca = dir.path().join("ca.crt");
    let anonymous = ManagementClient::new(&base)
        .with_tls(&ca, None, true)
        .unwrap();
    assert_eq!(anonymous.members().await.unwrap().members.len(), 3);
    // The dashboard over HTTPS: the page and its JSON (reads need no certificate).
    let http = anonymous.http_and_token().0;
    let page = http.get(format!("{base}/dashboard")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("Concord dashboard"));
    let state = common::get_json_with(http, &format!("{base}/dashboard/state")).await;
    assert_eq!(
        state["members"].as_array().map(Vec::len),
        Some(3),
        "{state}"
    );
    let refused = anonymous.operation(&target.to_string(), "Leave").await;
    assert!(
        matches!(
            refused,
            Err(common::client::ClientError::Refused { status: 401, .. })
        ),
        "{refused:?}"
    );
    let root = ManagementClient::new(&base)
        .with_tls(
            &ca,
            Some((
                &dir.path().join("client.root.crt"),
                &dir.path().join("client.root.key"),
            )),
            true,
        )
        .unwrap();
    let again = root.join(&format!("127.0.0.1:{seed}")).await;
    assert!(
        matches!(
            again,
            Err(common::client::ClientError::Refused { status: 409, .. })
        ),
        "a member joining again: {again:?}"
    );
    // A client trusting another CA does not talk to this node.
    let stranger_ca = ManagementClient::new(&base)
        .with_tls(&other_ca.path().join("ca.crt"), None, false)
        .unwrap();
    assert!(stranger_ca.members().await.is_err());
    // Plain HTTP to the HTTPS port fails.
    let plain = ManagementClient::new(&format!("http://{}", nodes[0].management_addr().unwrap()));
    assert!(plain.members().await.is_err());
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_reloaded_when_their_files_change() {
    let dir = tempfile::tempdir().unwrap();
    make_certs(dir.path());
    let sys = "rotate";
    let nodes = form(vec![tls_config(sys, &[], dir.path())]).await;
    let ctx = nodes[0].transport().settings().tls.clone().unwrap();
    let before = std::fs::read(dir.path().join("node.crt")).unwrap();
    // mtime granularity: make sure the rewrite is seen as a change.
    tokio::time::sleep(Duration::from_millis(20)).await;
    certs(dir.path(), &["create-node", "--overwrite", "127.0.0.1"]);
    assert_ne!(std::fs::read(dir.path().join("node.crt")).unwrap(), before);
    wait_for("the new certificate loaded", || {
        ctx.stats.reloads.load(Ordering::Relaxed) >= 1
    })
    .await;
    // The cluster takes a node with the new certificate.
    let n2 = Node::start(tls_config(sys, &[port_of(&nodes[0])], dir.path()))
        .await
        .unwrap();
    wait_for("the new node Up", || all_up(&nodes[0], 2)).await;
    n2.stop().await;
    nodes[0].stop().await;
}

fn secret_config(system: &str, seeds: &[u16], secret: &str) -> Config {
    let mut c = fast_config(system, seeds);
    c.remote.secret = Some(concord::config::SecretString(secret.into()));
    c
}

const SECRET: &str = "a-long-random-cluster-secret-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_secret_keeps_out_peers_without_it() {
    let sys = "secret";
    let nodes = form((0..3).map(|_| secret_config(sys, &[], SECRET)).collect()).await;
    let seed = port_of(&nodes[0]);
    let target = nodes[0].self_address().clone();

    // A node with the wrong secret cannot join.
    let before = auth_failures(&nodes[0]);
    let wrong = Node::start(secret_config(sys, &[seed], "another-secret-entirely-0000"))
        .await
        .unwrap();
    wait_for("the wrong secret refused", || {
        auth_failures(&nodes[0]) > before
    })
    .await;
    membership_stays(&nodes, 3, Duration::from_secs(2)).await;
    wrong.stop().await;

    // A node without a secret: its handshake is challenged and it gives up.
    let before = auth_failures(&nodes[0]);
    let none = Node::start(fast_config(sys, &[seed])).await.unwrap();
    wait_for("the secret-less node refused", || {
        auth_failures(&nodes[0]) > before
    })
    .await;
    membership_stays(&nodes, 3, Duration::from_secs(1)).await;
    none.stop().await;

    // A hand-written peer that ignores the challenge and sends a Join anyway.
    let peer = WirePeer::new(stranger(sys, 2));
    let (conn, outcome) = peer.connect(&target, Lane::Control).await;
    assert!(matches!(outcome, Outcome::Challenged), "{outcome:?}");
    let mut conn = conn.unwrap();
    let join = ClusterMessage::Join {
        roles: Default::default(),
        app_version: "0".into(),
    };
    let _ = write_frame(&mut conn, &membership_envelope(&join, 0)).await;
    membership_stays(&nodes, 3, Duration::from_secs(1)).await;

    // With the secret, the node's uid is revealed; a wrong one gets a refusal only.
    let (_, ok) = WirePeer::new(stranger(sys, 3))
        .with_secret(SECRET.as_bytes())
        .connect(&target, Lane::Control)
        .await;
    let uid = nodes[0].cluster().self_unique_address().uid;
    assert!(matches!(ok, Outcome::Accepted(u) if u == uid), "{ok:?}");
    let (_, bad) = WirePeer::new(stranger(sys, 4))
        .with_secret(b"guess-guess-guess-guess")
        .connect(&target, Lane::Control)
        .await;
    assert!(
        matches!(bad, Outcome::Rejected(ref r) if r.contains("secret")),
        "{bad:?}"
    );
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_the_uid_is_withheld() {
    let n = start_first(fast_config("uid", &[])).await;
    wait_self_up(&n).await;
    let (_, outcome) = WirePeer::new(stranger("uid", 5))
        .connect(n.self_address(), Lane::Control)
        .await;
    assert!(matches!(outcome, Outcome::Accepted(0)), "{outcome:?}");
    n.stop().await;
}

fn concord_node(env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_concord"));
    cmd.args(["node", "--port", "0", "--management-port", "0"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.env(
        "CONCORD__CLUSTER__SHUTDOWN_AFTER_UNSUCCESSFUL_JOIN_SEED_NODES",
        "1s",
    );
    cmd.output().unwrap()
}

#[test]
fn binding_beyond_loopback_without_protection_refuses_to_start() {
    let out = concord_node(&[("CONCORD__REMOTE__BIND_HOSTNAME", "0.0.0.0")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    for key in [
        "remote.bind-hostname",
        "[remote.tls]",
        "remote.secret",
        "remote.insecure",
    ] {
        assert!(err.contains(key), "the message names {key}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_insecure_is_explicit_and_shows_in_the_members_route() {
    let mut c = fast_config("insecure", &[]);
    c.remote.bind_hostname = Some("0.0.0.0".into());
    assert!(Node::start(c.clone()).await.is_err());
    c.remote.insecure = true;
    let n = start_first(c).await;
    wait_self_up(&n).await;
    let body: serde_json::Value = reqwest::get(format!(
        "http://{}/cluster/members",
        n.management_addr().unwrap()
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let warnings = body["warnings"].as_array().unwrap();
    assert!(warnings[0].as_str().unwrap().contains("remote.insecure"));
    n.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_routes_check_host_and_origin_and_answer_413_and_409() {
    let n = start_first(fast_config("mgmt", &[])).await;
    wait_self_up(&n).await;
    let addr = n.management_addr().unwrap();
    let url = format!("http://{addr}/cluster/members");
    let http = reqwest::Client::new();
    let join = [("address", format!("127.0.0.1:{}", port_of(&n)))];
    let status = |r: reqwest::Response| r.status().as_u16();
    // A join posted with one extra header: the status.
    let post = |header: &'static str, value: String| {
        let (http, url, join) = (http.clone(), url.clone(), join.clone());
        async move {
            let r = http.post(&url).header(header, value).form(&join);
            r.send().await.unwrap().status().as_u16()
        }
    };
    // DNS rebinding: the request reaches the node but names another host.
    assert_eq!(post("Host", "evil.example".into()).await, 403);
    // A cross-site form post from a browser.
    assert_eq!(post("Origin", "https://evil.example".into()).await, 403);
    assert_eq!(post("Origin", "null".into()).await, 403);
    // Same origin: accepted, and as the node is already a member, 409.
    assert_eq!(post("Origin", format!("http://{addr}")).await, 409);
    let r = http.post(&url).form(&join).send().await.unwrap();
    assert_eq!(status(r), 409);
    // Over the body limit: 413, declared or streamed.
    let big = "a=".to_string() + &"x".repeat(100 * 1024);
    let r = http
        .post(&url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(status(r), 413);
    // A chunked body declares no length: refused before it is read (bodies need
    // Content-Length; a chunked request may also have carried one that hyper dropped).
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "PUT /cluster HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            big.len()
        );
        // The answer comes after the head alone.
        s.write_all(head.as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 12];
        s.read_exact(&mut answer).await.unwrap();
        assert_eq!(
            &answer,
            b"HTTP/1.1 400",
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    // Reads are not affected by Host.
    let r = http
        .get(&url)
        .header("Host", "anything.example")
        .send()
        .await
        .unwrap();
    assert_eq!(status(r), 200);
    assert_eq!(n.cluster().view().members.len(), 1);
    n.stop().await;
}
