//! Who may speak remoting (issue 24, "a client certificate is accepted as a node"): over
//! TLS only a node certificate — one `concord certs create-node` made, carrying the
//! `concord:node` role — completes the remoting handshake, in both directions; a client
//! certificate of the same CA (`create-client`, for the management and key-value APIs) or a
//! node certificate made before roles existed is refused and never learns the node's uid.
//! By default a peer's certificate must name the host it claims or is dialled at. A
//! handshake must name this node's advertised address (host and port). In-process nodes on
//! loopback; the certificates come from the binary or, for the pre-role kind, from rcgen.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::wire_peer::{wire_address, wire_unique, Outcome, WirePeer};
use common::{fast_config, start_first, wait_for, wait_self_up};
use concord::config::TlsConfig;
use concord::remote::wire;
use concord::remote::PROTOCOL_VERSION;
use concord::{Config, Node};
use concord_core::{Address, Lane, MemberStatus, UniqueAddress};
use prost::Message;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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

/// `dir`: a CA, a node certificate for loopback, a client certificate `root`.
fn make_certs(dir: &Path) {
    certs(dir, &["create-ca"]);
    certs(dir, &["create-node", "127.0.0.1", "localhost"]);
    certs(dir, &["create-client", "root"]);
}

/// A certificate of the CA of `dir` as `create-node` made them before node roles: server
/// and client authentication, naming `hosts`, no `concord:node`. Written as `NAME.crt`,
/// `NAME.key`.
fn pre_role_node_certificate(dir: &Path, hosts: &[&str], name: &str) -> (PathBuf, PathBuf) {
    use rcgen::{
        CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::from_pem(&std::fs::read_to_string(dir.join("ca.key")).unwrap()).unwrap();
    let ca_pem = std::fs::read_to_string(dir.join("ca.crt")).unwrap();
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).unwrap();
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let mut params = CertificateParams::new(hosts).unwrap();
    params.distinguished_name.push(DnType::CommonName, "node");
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let (crt, k) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (crt, k)
}

/// A node certificate of the CA of `dir` (from `concord certs create-node`) naming only
/// `hosts`, in the subdirectory `sub`.
fn node_certificate_naming(dir: &Path, hosts: &[&str], sub: &str) -> (PathBuf, PathBuf) {
    let other = dir.join(sub);
    std::fs::create_dir_all(&other).unwrap();
    std::fs::copy(dir.join("ca.crt"), other.join("ca.crt")).unwrap();
    let ca_key = dir.join("ca.key");
    let mut args = vec!["create-node", "--ca-key", ca_key.to_str().unwrap()];
    args.extend_from_slice(hosts);
    certs(&other, &args);
    (other.join("node.crt"), other.join("node.key"))
}

/// `[remote.tls]` as an operator writes it: the three files, every other key at its default.
fn tls_section(cert: &Path, key: &Path, ca: &Path) -> TlsConfig {
    toml::from_str(&format!(
        "certificate = '{}'\nprivate-key = '{}'\nca-certificates = '{}'",
        cert.display(),
        key.display(),
        ca.display()
    ))
    .unwrap()
}

fn tls_config(system: &str, seeds: &[u16], dir: &Path) -> Config {
    let mut c = fast_config(system, seeds);
    c.remote.tls = Some(tls_section(
        &dir.join("node.crt"),
        &dir.join("node.key"),
        &dir.join("ca.crt"),
    ));
    c
}

fn stat(
    n: &Node,
    f: impl Fn(&concord::remote::TransportStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    f(n.transport().stats()).load(Ordering::Relaxed)
}

fn alone_and_up(n: &Node) -> bool {
    let v = n.cluster().view();
    v.members.len() == 1 && v.members.values().all(|m| m.status == MemberStatus::Up)
}

async fn write_frame(s: &mut (impl AsyncWrite + Unpin), body: &[u8]) -> std::io::Result<()> {
    s.write_all(&(body.len() as u32).to_be_bytes()).await?;
    s.write_all(body).await?;
    s.flush().await
}

async fn read_frame(s: &mut (impl AsyncRead + Unpin)) -> std::io::Result<Bytes> {
    let len = s.read_u32().await? as usize;
    if len > 1 << 20 {
        return Err(std::io::Error::other("frame too large"));
    }
    let mut body = vec![0; len];
    s.read_exact(&mut body).await?;
    Ok(Bytes::from(body))
}

fn roots(ca: &Path) -> rustls::RootCertStore {
    let mut r = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        r.add(c.unwrap()).unwrap();
    }
    r
}

fn chain(cert: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Dials `target` over TLS presenting `cert`, claims to be `me` in the remoting handshake
/// and returns the uid the node revealed, or why there was none.
async fn handshake_presenting(
    cert: &Path,
    key: &Path,
    ca: &Path,
    target: &Address,
    me: &UniqueAddress,
) -> Result<u64, String> {
    let client = rustls::ClientConfig::builder_with_provider(concord::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots(ca))
        .with_client_auth_cert(chain(cert), PrivateKeyDer::from_pem_file(key).unwrap())
        .unwrap();
    let tcp = tokio::net::TcpStream::connect(target.host_port())
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(target.host.clone()).unwrap();
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS: {e}"))?;
    let hs = wire::Handshake {
        from: Some(wire_unique(me)),
        to: Some(wire_address(target)),
        protocol_version: PROTOCOL_VERSION,
        cluster_name: target.system.clone(),
        lane: Lane::Control.index() as u32,
        nonce: Bytes::new(),
    };
    // With TLS 1.3 the server judges the client's certificate after the client finished:
    // a refusal arrives as an alert on the first read.
    write_frame(&mut s, &hs.encode_to_vec())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let frame = tokio::time::timeout(Duration::from_secs(20), read_frame(&mut s))
        .await
        .map_err(|_| "no reply".to_string())?
        .map_err(|e| format!("read: {e}"))?;
    match wire::HandshakeReply::decode(frame)
        .map_err(|e| e.to_string())?
        .result
    {
        Some(wire::handshake_reply::Result::Accepted(u)) => Ok(u.uid),
        Some(wire::handshake_reply::Result::Rejected(r)) => Err(format!("rejected: {r}")),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// A TLS server on loopback presenting `cert`, playing a node: it records the uid of every
/// remoting handshake it receives. Returns its port and the uids learned.
async fn impostor(cert: &Path, key: &Path) -> (u16, Arc<Mutex<Vec<u64>>>) {
    let server = rustls::ServerConfig::builder_with_provider(concord::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain(cert), PrivateKeyDer::from_pem_file(key).unwrap())
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let learned = Arc::new(Mutex::new(Vec::new()));
    let l = learned.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, l) = (acceptor.clone(), l.clone());
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(tcp).await else {
                    return;
                };
                let frame = tokio::time::timeout(Duration::from_secs(20), read_frame(&mut s)).await;
                if let Ok(Ok(f)) = frame {
                    if let Ok(hs) = wire::Handshake::decode(f) {
                        l.lock().unwrap().push(hs.from.map_or(0, |u| u.uid));
                    }
                }
            });
        }
    });
    (port, learned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_pre_role_certificates_are_refused_by_a_node_and_learn_no_uid() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_certs(d);
    let (old_crt, old_key) = pre_role_node_certificate(d, &["127.0.0.1"], "pre-role");
    let sys = "ident-a";
    let node = start_first(tls_config(sys, &[], d)).await;
    wait_self_up(&node).await;
    let target = node.self_address().clone();
    let uid = node.cluster().self_unique_address().uid;
    let me = |port| UniqueAddress::new(Address::new(sys, "127.0.0.1", port), 99);
    let ca = d.join("ca.crt");

    // A node certificate gets in and learns the uid (the test can tell the difference).
    let ok = handshake_presenting(
        &d.join("node.crt"),
        &d.join("node.key"),
        &ca,
        &target,
        &me(40_001),
    )
    .await;
    assert_eq!(ok, Ok(uid));

    for (what, crt, key) in [
        (
            "client certificate",
            d.join("client.root.crt"),
            d.join("client.root.key"),
        ),
        ("pre-role node certificate", old_crt, old_key),
    ] {
        let before = stat(&node, |s| &s.authentication_failures);
        let r = handshake_presenting(&crt, &key, &ca, &target, &me(40_002)).await;
        assert!(r.is_err(), "a {what} completed the handshake: {r:?}");
        eprintln!("{what}: {}", r.unwrap_err());
        wait_for("the refusal counted", || {
            stat(&node, |s| &s.authentication_failures) > before
        })
        .await;
    }
    assert!(alone_and_up(&node));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_does_not_handshake_with_a_peer_serving_a_client_pre_role_or_misnamed_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_certs(d);
    let (old_crt, old_key) = pre_role_node_certificate(d, &["127.0.0.1"], "pre-role");
    let (misnamed_crt, misnamed_key) = node_certificate_naming(d, &["node9.example"], "node9");
    for (what, crt, key) in [
        (
            "client certificate",
            d.join("client.root.crt"),
            d.join("client.root.key"),
        ),
        ("pre-role node certificate", old_crt, old_key),
        (
            "node certificate for another host",
            misnamed_crt,
            misnamed_key,
        ),
    ] {
        let (port, learned) = impostor(&crt, &key).await;
        // The impostor is the node's seed: the node dials it.
        let node = Node::start(tls_config("ident-b", &[port], d))
            .await
            .unwrap();
        wait_for(
            "the node refused the impostor, or the impostor learned the uid",
            || {
                stat(&node, |s| &s.outbound_authentication_failures) > 0
                    || !learned.lock().unwrap().is_empty()
            },
        )
        .await;
        assert_eq!(
            *learned.lock().unwrap(),
            Vec::<u64>::new(),
            "a peer serving a {what} received the node's handshake (and uid)"
        );
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_peer_certificate_must_name_the_host_it_claims() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_certs(d);
    let (crt, key) = node_certificate_naming(d, &["node9.example"], "node9");
    let sys = "ident-c";
    let node = start_first(tls_config(sys, &[], d)).await;
    wait_self_up(&node).await;
    let target = node.self_address().clone();
    let claimed = UniqueAddress::new(Address::new(sys, "127.0.0.1", 40_003), 98);
    let r = handshake_presenting(&crt, &key, &d.join("ca.crt"), &target, &claimed).await;
    assert!(
        r.as_ref().is_err_and(|e| e.contains("127.0.0.1")),
        "a certificate for node9.example passed as 127.0.0.1: {r:?}"
    );
    assert!(alone_and_up(&node));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_does_not_start_with_a_certificate_other_nodes_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_certs(d);
    let (old_crt, old_key) = pre_role_node_certificate(d, &["127.0.0.1"], "pre-role");
    let (misnamed_crt, misnamed_key) = node_certificate_naming(d, &["node9.example"], "node9");
    let ca = d.join("ca.crt");
    for (what, crt, key, expect) in [
        (
            "client certificate",
            d.join("client.root.crt"),
            d.join("client.root.key"),
            "create-node",
        ),
        ("pre-role node certificate", old_crt, old_key, "create-node"),
        (
            "node certificate for another host",
            misnamed_crt,
            misnamed_key,
            "verify-peer-hostname",
        ),
    ] {
        let mut c = fast_config("ident-d", &[]);
        c.remote.tls = Some(tls_section(&crt, &key, &ca));
        let r = Node::start(c).await;
        let e = match r {
            Ok(n) => {
                n.stop().await;
                panic!("a node started with a {what}");
            }
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("remote.tls") && e.contains(expect),
            "{what}: {e}"
        );
        eprintln!("{what}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_naming_another_host_is_refused() {
    let sys = "ident-e";
    let node = start_first(fast_config(sys, &[])).await;
    wait_self_up(&node).await;
    let target = node.self_address().clone();
    let stranger = |port| UniqueAddress::new(Address::new(sys, "127.0.0.1", port), 97);
    let (_, ok) = WirePeer::new(stranger(40_004))
        .connect(&target, Lane::Control)
        .await;
    assert!(matches!(ok, Outcome::Accepted(_)), "{ok:?}");
    let elsewhere = Address::new(sys, "10.1.2.3", target.port);
    let (conn, refused) = WirePeer::new(stranger(40_005))
        .claiming_target(elsewhere)
        .connect(&target, Lane::Control)
        .await;
    assert!(
        conn.is_none() && matches!(&refused, Outcome::Rejected(r) if r.contains("10.1.2.3")),
        "{refused:?}"
    );
    node.stop().await;
}

/// The configuration of the Compose and Kubernetes TLS files (deploy/), from the same
/// environment variables: one node certificate for every replica, naming the service's DNS
/// name and localhost but not the address each replica advertises.
fn shared_certificate_config(
    system: &str,
    seeds: &[u16],
    dir: &Path,
    verify: Option<&str>,
) -> Config {
    let mut env: Vec<(String, String)> = common::FAST_ENV
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    for (k, f) in [
        ("CONCORD__REMOTE__TLS__CERTIFICATE", "node.crt"),
        ("CONCORD__REMOTE__TLS__PRIVATE_KEY", "node.key"),
        ("CONCORD__REMOTE__TLS__CA_CERTIFICATES", "ca.crt"),
    ] {
        env.push((k.into(), dir.join(f).display().to_string()));
    }
    if let Some(v) = verify {
        env.push((
            "CONCORD__REMOTE__TLS__VERIFY_PEER_HOSTNAME".into(),
            v.into(),
        ));
    }
    let mut c = Config::load(None, &concord::config::env_overrides(env)).unwrap();
    c.system = system.into();
    c.remote.port = 0;
    c.management.port = 0;
    c.cluster.seed_nodes = seeds.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_sharing_one_certificate_form_a_cluster_as_the_deploy_files_configure_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certs(d, &["create-ca"]);
    certs(d, &["create-node", "concord", "localhost"]);
    let sys = "ident-f";
    // Without the deploy files' setting the host-name check is on: such a node does not start.
    let e = Node::start(shared_certificate_config(sys, &[], d, None))
        .await
        .err()
        .map(|e| e.to_string());
    assert!(
        e.as_ref()
            .is_some_and(|e| e.contains("verify-peer-hostname")),
        "{e:?}"
    );
    let first = start_first(shared_certificate_config(sys, &[], d, Some("false"))).await;
    wait_self_up(&first).await;
    let seed = common::port_of(&first);
    let second = Node::start(shared_certificate_config(sys, &[seed], d, Some("false")))
        .await
        .unwrap();
    wait_for("two members Up on both", || {
        [&first, &second].iter().all(|n| {
            let v = n.cluster().view();
            v.members.len() == 2 && v.members.values().all(|m| m.status == MemberStatus::Up)
        })
    })
    .await;
    second.stop().await;
    first.stop().await;
}
