//! The HTTP servers' limits (management and key-value APIs), on an in-process node over
//! raw loopback sockets: half-sent headers are closed after `header-read-timeout`; idle
//! kept-alive connections and stalled bodies after `idle-timeout`; a source over its cap is
//! refused while another source is served (sources are 127.0.0.x addresses the client
//! socket binds); with a server's cap full, the node's own host (127.0.0.1) is still served
//! and remoting still accepts; a request with both `Transfer-Encoding` and `Content-Length`
//! answers 400; a `Host` with userinfo (`localhost:1@evil.example`) is not read as
//! `localhost`.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{fast_config, port_of, wait_for, wait_for_async, wait_self_up};
use concord::kv::{KeyValueStore, KvStore};
use concord::{Config, Node};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How long a test waits for the server to close a connection it should close.
const CLOSE_BOUND: Duration = Duration::from_secs(20);

struct Served {
    node: Node,
    kv: KvStore,
    _dir: tempfile::TempDir,
}

impl Served {
    fn management(&self) -> SocketAddr {
        self.node.management_addr().expect("management served")
    }

    fn kv(&self) -> SocketAddr {
        self.kv.http_addr().expect("key-value API served")
    }

    /// Both servers, named.
    fn servers(&self) -> [(&'static str, SocketAddr); 2] {
        [("management", self.management()), ("kv", self.kv())]
    }
}

/// A node that formed its own cluster, serving the management and key-value APIs on
/// loopback; `tune` sets the limits under test.
async fn start(system: &str, tune: impl Fn(&mut Config)) -> Served {
    let dir = tempfile::tempdir().unwrap();
    let mut c = fast_config(system, &[]);
    c.update_section(|kv: &mut concord::kv::KvConfig| {
        kv.http_port = Some(0);
        kv.n = 1;
        kv.r = "one".into();
        kv.w = "one".into();
    })
    .expect("the section parses");
    c.data_dir = dir.path().display().to_string();
    tune(&mut c);
    let (layer, kv) = KeyValueStore::new();
    let node = Node::builder(c).layer(layer).start().await.unwrap();
    let me = node.self_address().clone();
    node.cluster().join(me).await.unwrap();
    wait_self_up(&node).await;
    wait_for_async("the store's segments synchronised", || async {
        kv.status()
            .await
            .is_ok_and(|s| s.status.pending_segments == 0)
    })
    .await;
    Served {
        node,
        kv,
        _dir: dir,
    }
}

/// A connection to `to` from the loopback address `from` (e.g. "127.0.0.2").
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(to).await.unwrap()
}

/// Reads until the server closes the connection (end of stream or reset); returns the time
/// it took and what was read, or None if it stayed open for `bound`.
async fn until_closed(s: &mut TcpStream, bound: Duration) -> Option<(Duration, String)> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = bound.checked_sub(start.elapsed())?;
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => {
                return Some((start.elapsed(), String::from_utf8_lossy(&got).into_owned()))
            }
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `request` from `from` and reads the whole answer (the request asks to close).
async fn exchange(from: &str, to: SocketAddr, request: &str) -> String {
    let mut s = connect_from(from, to).await;
    s.write_all(request.as_bytes()).await.unwrap();
    until_closed(&mut s, CLOSE_BOUND)
        .await
        .expect("the server answers and closes")
        .1
}

/// The status code of an HTTP/1.1 answer, 0 if none.
fn status(answer: &str) -> u16 {
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// A GET every server answers (the key-value API's reads are guarded: `Host` must name it).
fn probe(server: &str, to: SocketAddr) -> String {
    let path = if server == "kv" {
        "/kv-status"
    } else {
        "/alive"
    };
    format!("GET {path} HTTP/1.1\r\nHost: {to}\r\nConnection: close\r\n\r\n")
}

/// Opens a connection from `from` that has sent half its headers and holds it.
async fn half_sent(from: &str, to: SocketAddr) -> TcpStream {
    let mut s = connect_from(from, to).await;
    s.write_all(format!("GET /alive HTTP/1.1\r\nHost: {to}\r\n").as_bytes())
        .await
        .unwrap();
    s
}

/// Waits until a connection from `from` is refused: closed at once, without an answer
/// other than 503. (Connections opened just before may still be in the accept queue, so
/// a connection admitted by mistake is told apart by staying open.)
async fn refused(from: &str, to: SocketAddr) -> bool {
    let mut s = connect_from(from, to).await;
    let _ = s
        .write_all(format!("GET /alive HTTP/1.1\r\nHost: {to}\r\n").as_bytes())
        .await;
    match until_closed(&mut s, Duration::from_secs(5)).await {
        Some((_, answer)) => answer.is_empty() || status(&answer) == 503,
        None => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_headers_are_closed_after_the_header_read_timeout() {
    let n = start("hdrtimeout", |c| {
        c.management.header_read_timeout = Duration::from_secs(1);
        c.management.idle_timeout = Duration::from_secs(60);
        c.update_section(|kv: &mut concord::kv::KvConfig| {
            kv.http_header_read_timeout = Duration::from_secs(1);
            kv.http_idle_timeout = Duration::from_secs(60);
        })
        .expect("the section parses");
    })
    .await;
    for (server, addr) in n.servers() {
        // Slowloris: a header line every 200 ms, never the blank line. The bytes keep the
        // connection from being idle; only the header-read timeout can close it.
        let mut s = half_sent("127.0.0.2", addr).await;
        let start = Instant::now();
        let mut closed = false;
        while start.elapsed() < CLOSE_BOUND {
            if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
                closed = true;
                break;
            }
            let mut b = [0u8; 1024];
            match tokio::time::timeout(Duration::from_millis(200), s.read(&mut b)).await {
                Ok(Ok(0)) | Ok(Err(_)) => {
                    closed = true;
                    break;
                }
                _ => {}
            }
        }
        let took = start.elapsed();
        assert!(
            closed,
            "{server}: half-sent headers still open after {took:?}"
        );
        assert!(
            took >= Duration::from_millis(900),
            "{server}: closed after {took:?}, before the 1 s header-read timeout"
        );
        // The server still serves whole requests.
        assert_eq!(
            status(&exchange("127.0.0.2", addr, &probe(server, addr)).await),
            200
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kept_alive_connections_and_stalled_bodies_are_closed_after_the_idle_timeout() {
    let n = start("idletimeout", |c| {
        c.management.header_read_timeout = Duration::from_secs(60);
        c.management.idle_timeout = Duration::from_secs(1);
        c.update_section(|kv: &mut concord::kv::KvConfig| {
            kv.http_header_read_timeout = Duration::from_secs(60);
            kv.http_idle_timeout = Duration::from_secs(1);
        })
        .expect("the section parses");
    })
    .await;
    for (server, addr) in n.servers() {
        // A kept-alive connection after its request.
        let mut s = connect_from("127.0.0.2", addr).await;
        let request = probe(server, addr).replace("Connection: close", "Connection: keep-alive");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut b = [0u8; 4096];
        let n = s.read(&mut b).await.unwrap();
        assert_eq!(status(&String::from_utf8_lossy(&b[..n])), 200, "{server}");
        let (took, _) = until_closed(&mut s, CLOSE_BOUND)
            .await
            .unwrap_or_else(|| panic!("{server}: an idle kept-alive connection stays open"));
        assert!(
            took >= Duration::from_millis(900),
            "{server}: closed after {took:?}"
        );

        // A request whose body stops after 10 of its 100 bytes.
        let mut s = connect_from("127.0.0.2", addr).await;
        let path = if server == "kv" {
            "/kv/stalled"
        } else {
            "/cluster/members"
        };
        s.write_all(
            format!("PUT {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 100\r\n\r\n0123456789")
                .as_bytes(),
        )
        .await
        .unwrap();
        assert!(
            until_closed(&mut s, CLOSE_BOUND).await.is_some(),
            "{server}: a stalled body keeps its connection open"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_over_its_cap_is_refused_while_another_source_is_served() {
    let n = start("persource", |c| {
        c.management.max_connections_per_source = 3;
        c.management.header_read_timeout = Duration::from_secs(60);
        c.update_section(|kv: &mut concord::kv::KvConfig| {
            kv.http_max_connections_per_source = 3;
            kv.http_header_read_timeout = Duration::from_secs(60);
        })
        .expect("the section parses");
    })
    .await;
    for (server, addr) in n.servers() {
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(half_sent("127.0.0.2", addr).await);
        }
        assert!(
            refused("127.0.0.2", addr).await,
            "{server}: a fourth connection from 127.0.0.2 is admitted"
        );
        let answer = exchange("127.0.0.3", addr, &probe(server, addr)).await;
        assert_eq!(
            status(&answer),
            200,
            "{server}: 127.0.0.3 is not served: {answer}"
        );
        // The held connections are still open: the cap refused only the one over it.
        for s in &mut held {
            let mut b = [0u8; 16];
            assert!(
                tokio::time::timeout(Duration::from_millis(50), s.read(&mut b))
                    .await
                    .is_err(),
                "{server}: a held connection was closed"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_cap_full_the_nodes_own_host_is_served_and_remoting_accepts() {
    let n = start("reserve", |c| {
        c.management.max_connections = 4;
        c.management.max_connections_per_source = 2;
        c.management.header_read_timeout = Duration::from_secs(60);
        c.update_section(|kv: &mut concord::kv::KvConfig| {
            kv.http_max_connections = 4;
            kv.http_max_connections_per_source = 2;
            kv.http_header_read_timeout = Duration::from_secs(60);
        })
        .expect("the section parses");
    })
    .await;
    let mut held = Vec::new();
    for (server, addr) in n.servers() {
        for from in ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"] {
            held.push(half_sent(from, addr).await);
        }
        assert!(
            refused("127.0.0.4", addr).await,
            "{server}: a connection over the server's cap is admitted"
        );
        // The reserve: the node's own host still gets an answer.
        let answer = exchange("127.0.0.1", addr, &probe(server, addr)).await;
        assert_eq!(
            status(&answer),
            200,
            "{server}: 127.0.0.1 is not served: {answer}"
        );
    }
    let c = n.node.cluster().clone();
    let answer = exchange(
        "127.0.0.1",
        n.management(),
        "GET /cluster/members HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.contains(&c.self_address().to_string()), "{answer}");
    // Remoting still accepts: a second node joins.
    let second = Node::start(fast_config("reserve", &[port_of(&n.node)]))
        .await
        .unwrap();
    wait_for("the second node Up", || {
        c.view()
            .members_with_status(concord_core::MemberStatus::Up)
            .count()
            == 2
    })
    .await;
    drop(held);
    second.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_transfer_encoding_and_content_length_answers_400() {
    let n = start("smuggle", |c| c.testkit.fault_injection = true).await;
    for (server, addr) in n.servers() {
        // Write routes that answer 2xx to an empty body.
        let (method, path) = if server == "kv" {
            ("PUT", "/kv/k")
        } else {
            ("DELETE", "/testkit/faults")
        };
        // The chunked body is empty; read by its Content-Length, the body would end at
        // "0\r\n\r\n" and "GET /..." would be a second, smuggled request.
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 42\r\n\
             Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /alive HTTP/1.1\r\nHost: {addr}\r\n\r\n"
        );
        let answer = exchange("127.0.0.2", addr, &request).await;
        assert_eq!(status(&answer), 400, "{server}: {answer}");
        assert_eq!(
            answer.matches("HTTP/1.1 ").count(),
            1,
            "{server}: only one answer: {answer}"
        );
        // Content-Length before Transfer-Encoding, too.
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n\
             Content-Length: 5\r\nConnection: close\r\n\r\n0\r\n\r\n"
        );
        assert_eq!(
            status(&exchange("127.0.0.2", addr, &request).await),
            400,
            "{server}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_with_userinfo_is_not_read_as_this_node() {
    let n = start("hostparse", |c| c.testkit.fault_injection = true).await;
    let addr = n.management();
    let write = |host: &str| {
        format!("DELETE /testkit/faults HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
    };
    // The write route answers when addressed to this node ...
    let ok = exchange(
        "127.0.0.1",
        addr,
        &write(&format!("localhost:{}", addr.port())),
    )
    .await;
    assert_eq!(status(&ok), 200, "{ok}");
    // ... and a Host whose authority has userinfo names evil.example, not localhost.
    let evil = exchange("127.0.0.1", addr, &write("localhost:1@evil.example")).await;
    assert_eq!(status(&evil), 400, "{evil}");
    assert!(evil.contains("Host"), "{evil}");
    // The key-value API guards its reads the same way.
    let kv = n.kv();
    let read =
        |host: &str| format!("GET /kv/k HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let evil = exchange("127.0.0.1", kv, &read("localhost:1@evil.example")).await;
    assert_eq!(status(&evil), 400, "{evil}");
    let fine = exchange("127.0.0.1", kv, &read(&format!("localhost:{}", kv.port()))).await;
    assert_eq!(status(&fine), 404, "{fine}");
}
