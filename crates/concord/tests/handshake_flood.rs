//! Handshake places cannot be starved without credentials (issue 24: 128 unauthenticated
//! places held 5 s each let a flood refuse 19 of 20 legitimate handshakes in secret mode,
//! and a restarted member took 30.5 s to return). A connection must send its first bytes
//! within `handshake-first-byte-timeout`; one source address holds at most
//! `max-pending-handshakes-per-address` handshakes; the addresses of current members always
//! find a place. Other loopback addresses (127.0.0.2, ...) play other hosts: the nodes and
//! their members are on 127.0.0.1.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::wire_peer::{tcp_from, Outcome, WirePeer};
use common::{fast_config, port_of, start_first, wait_for, wait_self_up};
use concord::{Config, Node};
use concord_core::{Address, Lane, MemberStatus, UniqueAddress};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SECRET: &str = "handshake-flood-cluster-secret-0123456789";

fn secret_config(system: &str, seeds: &[u16]) -> Config {
    let mut c = fast_config(system, seeds);
    c.remote.secret = Some(concord::config::SecretString(SECRET.into()));
    c
}

fn stat(
    n: &Node,
    f: impl Fn(&concord::remote::TransportStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    f(n.transport().stats()).load(Ordering::Relaxed)
}

fn all_up(n: &Node, count: usize) -> bool {
    let v = n.cluster().view();
    v.members.len() == count && v.members.values().all(|m| m.status == MemberStatus::Up)
}

fn made_up(system: &str, port: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new(system, "127.0.0.1", port), 4242)
}

/// Keeps opening connections from `source` to `target` that never send a byte, holding up
/// to `held` of them (the oldest dropped first), until `stop`.
fn flood(source: &'static str, target: Address, held: usize, stop: Arc<AtomicBool>) {
    tokio::spawn(async move {
        let ip = Some(source.parse().unwrap());
        let mut conns = std::collections::VecDeque::new();
        while !stop.load(Ordering::Relaxed) {
            for _ in 0..50 {
                if let Ok(c) = tcp_from(ip, &target).await {
                    conns.push_back(c);
                }
                while conns.len() > held {
                    conns.pop_front();
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_one_address_do_not_keep_members_out() {
    let sys = "flood-a";
    let first = start_first(secret_config(sys, &[])).await;
    wait_self_up(&first).await;
    let seed = port_of(&first);
    let second = Node::start(secret_config(sys, &[seed])).await.unwrap();
    wait_for("two members Up", || all_up(&first, 2) && all_up(&second, 2)).await;
    let target = first.self_address().clone();
    let uid = first.cluster().self_unique_address().uid;

    let stop = Arc::new(AtomicBool::new(false));
    flood("127.0.0.2", target.clone(), 600, stop.clone());
    wait_for("the flood under way", || {
        stat(&first, |s| &s.connections_refused) > 50
            || first.transport().inbound_connections().0 > 100
    })
    .await;

    // Handshakes from a member's address (127.0.0.1) with the secret: every one completes.
    let mut accepted = 0;
    let mut outcomes = Vec::new();
    for i in 0..20 {
        let (_, o) = WirePeer::new(made_up(sys, 45_000 + i))
            .with_secret(SECRET.as_bytes())
            .connect(&target, Lane::Control)
            .await;
        if matches!(o, Outcome::Accepted(u) if u == uid) {
            accepted += 1;
        }
        outcomes.push(o);
    }
    eprintln!("{accepted} of 20 handshakes from a member's address completed during the flood");
    assert_eq!(accepted, 20, "{outcomes:?}");

    // A member restarted on its address comes back during the flood.
    let port = port_of(&second);
    second.stop().await;
    let started = tokio::time::Instant::now();
    let mut c = secret_config(sys, &[seed]);
    c.remote.port = port;
    let again = Node::start(c).await.unwrap();
    let new_uid = again.cluster().self_unique_address().uid;
    wait_for("the restarted member Up", || {
        all_up(&first, 2)
            && first
                .cluster()
                .view()
                .members
                .keys()
                .any(|u| u.uid == new_uid)
    })
    .await;
    eprintln!(
        "the restarted member was Up again after {:.1} s of the flood",
        started.elapsed().as_secs_f64()
    );
    stop.store(true, Ordering::Relaxed);
    again.stop().await;
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_handshakes() {
    let sys = "flood-b";
    let mut c = fast_config(sys, &[]);
    // Long enough that nothing times out while the test looks.
    c.remote.handshake_timeout = Duration::from_secs(60);
    let node = start_first(c).await;
    wait_self_up(&node).await;
    let target = node.self_address().clone();

    // 40 connections from 127.0.0.3 that each send one byte of a handshake and stop.
    let refused_before = node
        .transport()
        .stats()
        .connections_refused
        .load(Ordering::Relaxed);
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut s = tcp_from(Some("127.0.0.3".parse().unwrap()), &target)
            .await
            .unwrap();
        let _ = s.write_all(&[0]).await;
        held.push(s);
    }
    wait_for("all but the per-address share refused", || {
        stat(&node, |s| &s.connections_refused) >= refused_before + 32
    })
    .await;
    // Another address still gets in at once; 127.0.0.3 does not.
    let (_, other) = WirePeer::new(made_up(sys, 46_000))
        .with_source_ip("127.0.0.4")
        .connect(&target, Lane::Control)
        .await;
    assert!(matches!(other, Outcome::Accepted(0)), "{other:?}");
    let (_, same) = WirePeer::new(made_up(sys, 46_001))
        .with_source_ip("127.0.0.3")
        .connect(&target, Lane::Control)
        .await;
    assert!(matches!(same, Outcome::Closed), "{same:?}");
    // Once they are gone, 127.0.0.3 is welcome again.
    drop(held);
    let mut outcome = Outcome::Closed;
    for _ in 0..100 {
        let (_, o) = WirePeer::new(made_up(sys, 46_002))
            .with_source_ip("127.0.0.3")
            .connect(&target, Lane::Control)
            .await;
        outcome = o;
        if matches!(outcome, Outcome::Accepted(_)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(outcome, Outcome::Accepted(0)), "{outcome:?}");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_is_closed_long_before_the_handshake_timeout() {
    let sys = "flood-c";
    let mut c = fast_config(sys, &[]);
    c.remote.handshake_timeout = Duration::from_secs(60);
    let node = start_first(c).await;
    wait_self_up(&node).await;
    let target = node.self_address().clone();
    let timeouts = stat(&node, |s| &s.handshake_timeouts);

    let mut silent = tcp_from(Some("127.0.0.5".parse().unwrap()), &target)
        .await
        .unwrap();
    let mut started = tcp_from(Some("127.0.0.5".parse().unwrap()), &target)
        .await
        .unwrap();
    started.write_all(&[0]).await.unwrap();
    let mut b = [0u8; 1];
    // The default first-byte deadline is 1 s; 30 s is far below the 60 s handshake timeout.
    let r = tokio::time::timeout(Duration::from_secs(30), silent.read(&mut b)).await;
    assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "still open: {r:?}");
    wait_for("the deadline counted", || {
        stat(&node, |s| &s.handshake_timeouts) > timeouts
    })
    .await;
    // A connection that began its handshake has the rest of handshake-timeout.
    let r = tokio::time::timeout(Duration::from_secs(2), started.read(&mut b)).await;
    assert!(r.is_err(), "a begun handshake was closed: {r:?}");
    node.stop().await;
}
