//! Resource exhaustion through the remoting port, against a `concord node` process limited
//! to 1,024 file descriptors (the report: 2,000 connections each holding an unfinished
//! maximum-size frame grew a node to 551 MB, it stopped accepting and its management API
//! stopped answering).
//!
//! The attacker passes the handshake (loopback with no protection, the demo's setting),
//! then opens 2,000 connections: half announce a 256 KiB frame and send 200 KiB of it, half
//! send 3 bytes of a frame header and hold their descriptor.
//! Asserted: the management API answers throughout; the node's memory stays within the
//! stated bound (RSS growth below 160 MiB: at most 512 connections — half the descriptors —
//! each holding at most a 64 KiB read buffer, plus the 64 MiB partial-frame budget); the
//! connections over the cap are refused and the unfinished frames time out; the node
//! stays Up, alone in its cluster as before.
//!
//! The same through the management port (the report: 2,000 kept-alive or half-sent-header
//! connections stayed open, RSS 17 → 98 MB; 4,296 exhausted the node's descriptors, the
//! management API stopped answering and remoting's accepts failed): 2,000 connections from
//! 127.0.0.2-127.0.0.201, half idle after a request, half with half-sent headers.
//! Asserted: the node's own host (127.0.0.1) is answered throughout (the local reserve);
//! remoting still completes a handshake; the management server's cap is its share of the
//! 1,024 descriptors (126) and connections over it are refused; RSS grows less than 64 MiB.

mod common;

use std::time::Duration;

use common::wire_peer::{Outcome, WirePeer};
use common::Node;
use concord_core::{Address, Lane, UniqueAddress};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpSocket;

/// The stated bound on RSS growth under the attack, bytes.
const RSS_GROWTH_BOUND: u64 = 160 << 20;

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// Raises this test process's descriptor limit to its hard limit; returns the soft limit.
fn raise_own_fd_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    getrlimit(Resource::RLIMIT_NOFILE).unwrap().0
}

#[test]
fn unfinished_frames_on_thousands_of_connections_neither_exhaust_the_node_nor_silence_it() {
    let _serial = common::serial();
    let attackers = (raise_own_fd_limit().saturating_sub(200)).min(2000) as u16;
    let node = Node::start_bound_with_fd_limit(
        "exhaust",
        &[("CONCORD__REMOTE__READ_TIMEOUT", "8s")],
        1024,
    );
    let rt = common::runtime();
    common::wait_until("the node Up", Duration::from_secs(30), &[&node], || {
        common::members(&rt, &node)
            .is_some_and(|m| m.members.len() == 1 && m.members[0].status == "Up")
    });
    rt.block_on(async {
        let client = node.client();
        let pid = node.child.id();
        let baseline = rss_bytes(pid);
        let target = Address::new("exhaust", "127.0.0.1", node.port);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let alive = format!("{}/alive", node.management_url());

        // The attack: connections opened in waves, each with an unfinished frame.
        let mut held = Vec::new();
        let mut accepted = 0u32;
        let mut max_rss = baseline;
        for wave in 0..(attackers / 100).max(1) {
            let mut tasks = Vec::new();
            for i in 0..100u16 {
                let port = 30_000 + wave * 100 + i;
                let target = target.clone();
                tasks.push(tokio::spawn(async move {
                    let peer = WirePeer::new(UniqueAddress::new(
                        Address::new("exhaust", "127.0.0.1", port),
                        u64::from(port),
                    ));
                    let (conn, outcome) = peer.connect(&target, Lane::Ordinary).await;
                    let mut conn = conn?;
                    if !matches!(outcome, Outcome::Accepted(_)) {
                        return None;
                    }
                    // A 256 KiB frame (the lane's limit), 200 KiB of it sent — or, on every
                    // other connection, 3 bytes of a frame header: a cheap connection
                    // that only holds a descriptor.
                    let bytes = if port % 2 == 0 {
                        let mut b = (256u32 << 10).to_be_bytes().to_vec();
                        b.extend(std::iter::repeat_n(0x5a, 200 << 10));
                        b
                    } else {
                        vec![0, 0, 1]
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(2), conn.write_all(&bytes)).await;
                    Some(conn)
                }));
            }
            for t in tasks {
                if let Ok(Some(c)) = t.await {
                    accepted += 1;
                    held.push(c);
                }
            }
            // The management API answers between every wave.
            let r = http.get(&alive).send().await.expect("management answers during the attack");
            assert!(r.status().is_success());
            max_rss = max_rss.max(rss_bytes(pid));
        }
        assert!(accepted > 0, "the attack got past the handshake");
        // Hold everything past the read timeout while watching memory and the API.
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let r = http.get(&alive).send().await.expect("management answers while held");
            assert!(r.status().is_success());
            max_rss = max_rss.max(rss_bytes(pid));
        }
        let growth = max_rss.saturating_sub(baseline);
        eprintln!(
            "attack: {attackers} connections, {accepted} past the handshake; RSS {} MiB -> max {} MiB (+{} MiB)",
            baseline >> 20,
            max_rss >> 20,
            growth >> 20
        );
        assert!(
            growth < RSS_GROWTH_BOUND,
            "RSS grew {} MiB (bound {} MiB)",
            growth >> 20,
            RSS_GROWTH_BOUND >> 20
        );
        let metrics = http
            .get(format!("{}/metrics", node.management_url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let refused = metric(&metrics, "concord_remote_connections_refused_total");
        let timeouts = metric(&metrics, "concord_remote_read_timeouts_total");
        let cap = metric(&metrics, "concord_remote_max_inbound_connections");
        let budget = metric(&metrics, "concord_remote_buffer_limit_hits_total");
        eprintln!("refused {refused}, read timeouts {timeouts}, buffer budget hits {budget}, cap {cap}");
        assert_eq!(cap, 512, "half of 1,024 descriptors");
        assert!(refused > 0 || attackers <= 512, "connections over the cap refused");
        assert!(timeouts > 0, "unfinished frames time out");
        drop(held);
        let m = client.members().await.unwrap();
        assert_eq!(m.members.len(), 1);
        assert_eq!(m.members[0].status, "Up");
    });
}

/// The stated bound on RSS growth under the HTTP flood, bytes: at most 128 connections
/// (the management server's share of 1,024 descriptors), each holding at most 64 KiB of
/// buffers, plus the runtime's own growth.
const HTTP_RSS_GROWTH_BOUND: u64 = 64 << 20;

#[test]
fn thousands_of_http_connections_neither_exhaust_descriptors_nor_lock_out_the_operator() {
    let _serial = common::serial();
    let attackers = (raise_own_fd_limit().saturating_sub(200)).min(2000) as usize;
    let node = Node::start_bound_with_fd_limit("httpflood", &[], 1024);
    let rt = common::runtime();
    common::wait_until("the node Up", Duration::from_secs(30), &[&node], || {
        common::members(&rt, &node)
            .is_some_and(|m| m.members.len() == 1 && m.members[0].status == "Up")
    });
    rt.block_on(async {
        let pid = node.child.id();
        let baseline = rss_bytes(pid);
        let management: std::net::SocketAddr = format!("127.0.0.1:{}", node.management_port)
            .parse()
            .unwrap();
        // reqwest connects from 127.0.0.1, the node's own host; a new connection for each
        // request, so each check needs the node to accept one.
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .pool_max_idle_per_host(0)
            .build()
            .unwrap();
        let alive = format!("{}/alive", node.management_url());
        let mut held = Vec::new();
        let mut max_rss = baseline;
        let mut i = 0usize;
        while i < attackers {
            let mut tasks = Vec::new();
            for _ in 0..100.min(attackers - i) {
                let from: std::net::SocketAddr =
                    format!("127.0.0.{}:0", 2 + i % 200).parse().unwrap();
                let idle_after_request = i.is_multiple_of(2);
                i += 1;
                tasks.push(tokio::spawn(async move {
                    let socket = TcpSocket::new_v4().ok()?;
                    socket.bind(from).ok()?;
                    let mut s =
                        tokio::time::timeout(Duration::from_secs(2), socket.connect(management))
                            .await
                            .ok()?
                            .ok()?;
                    let bytes: &[u8] = if idle_after_request {
                        b"GET /alive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
                    } else {
                        b"GET /alive HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    };
                    let _ = tokio::time::timeout(Duration::from_secs(2), s.write_all(bytes)).await;
                    Some(s)
                }));
            }
            for t in tasks {
                if let Ok(Some(s)) = t.await {
                    held.push(s);
                }
            }
            let r = http
                .get(&alive)
                .send()
                .await
                .expect("the node's own host is answered during the flood");
            assert!(r.status().is_success());
            max_rss = max_rss.max(rss_bytes(pid));
        }
        // Remoting still accepts and completes a handshake.
        let target = Address::new("httpflood", "127.0.0.1", node.port);
        let peer = WirePeer::new(UniqueAddress::new(
            Address::new("httpflood", "127.0.0.1", 29_999),
            29_999,
        ));
        let (_conn, outcome) = tokio::time::timeout(
            Duration::from_secs(10),
            peer.connect(&target, Lane::Control),
        )
        .await
        .expect("remoting answers the handshake during the flood");
        assert!(
            matches!(outcome, Outcome::Accepted(_)),
            "remoting during the flood: {outcome:?}"
        );
        let m = node
            .client()
            .members()
            .await
            .expect("members during the flood");
        assert_eq!(m.members.len(), 1);
        let metrics = http
            .get(format!("{}/metrics", node.management_url()))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let cap = metrics
            .lines()
            .find(|l| {
                l.starts_with("concord_http_max_connections") && l.contains("server=\"management\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0) as u64;
        let refused = metric(&metrics, "concord_http_connections_refused_total");
        let growth = max_rss.saturating_sub(baseline);
        drop(held);
        // Closed connections give their places back: the cap's worth are served again.
        let mut answered = 0;
        for k in 0..130usize {
            let from: std::net::SocketAddr = format!("127.0.0.{}:0", 2 + k % 200).parse().unwrap();
            let socket = TcpSocket::new_v4().unwrap();
            socket.bind(from).unwrap();
            if let Ok(mut s) = socket.connect(management).await {
                let req = b"GET /alive HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
                if s.write_all(req).await.is_ok() {
                    let mut answer = String::new();
                    use tokio::io::AsyncReadExt;
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut answer))
                            .await;
                    answered += usize::from(answer.starts_with("HTTP/1.1 200"));
                }
            }
        }
        let after = rss_bytes(pid);
        eprintln!(
            "HTTP flood: {attackers} connections; management cap {cap}, refused {refused}; \
             RSS {} MiB -> max {} MiB (+{} MiB), {} MiB after; {answered}/130 answered after",
            baseline >> 20,
            max_rss >> 20,
            growth >> 20,
            after >> 20
        );
        assert_eq!(
            cap, 126,
            "the management server's share of 1,024 descriptors, less the reserve"
        );
        assert!(refused > 0, "connections over the caps are refused");
        assert!(
            growth < HTTP_RSS_GROWTH_BOUND,
            "RSS grew {} MiB (bound {} MiB)",
            growth >> 20,
            HTTP_RSS_GROWTH_BOUND >> 20
        );
        assert_eq!(answered, 130, "places come back when connections close");
    });
}
