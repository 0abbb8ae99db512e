//! The hostile-peer suite: every attack reported against the remoting port, replayed by a
//! hand-written peer speaking the wire protocol (tests/common/wire_peer.rs) against a
//! cluster of three in-process nodes with the split brain resolver on (keep-majority,
//! stable-after 1 s). After each attack: membership unchanged (three members, all Up,
//! none unreachable, nobody downed or removed) and the management API answering.
//!
//! Two kinds of attacker:
//! - a stranger without the cluster secret: refused at the handshake, whatever it sends;
//! - a peer that passes the handshake (it has the secret — or the cluster runs on loopback
//!   with no protection, as the demo does) but is not a member: the protocol itself
//!   refuses its gossip, bounds its clocks, its gzip and its requests.
//!
//! Resource exhaustion (unfinished frames, file descriptors, memory) is in
//! `hostile_resources.rs`, against a node process.

mod common;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::wire_peer::{
    gossip_envelope, membership_envelope, raw_gossip_envelope, write_frame, Outcome, WirePeer,
};
use common::{fast_config, port_of, start_first, wait_for, wait_self_up};
use concord::{Config, Node};
use concord_core::vector_clock::VectorClock;
use concord_core::{Address, ClusterMessage, Gossip, Lane, MemberStatus, UniqueAddress};

const SECRET: &str = "hostile-suite-cluster-secret-0123456789";

fn config(system: &str, secret: bool) -> Config {
    let mut c = fast_config(system, &[]);
    c.cluster.split_brain_resolver.stable_after = Duration::from_secs(1);
    if secret {
        c.remote.secret = Some(concord::config::SecretString(SECRET.into()));
    }
    c
}

async fn cluster(system: &str, secret: bool) -> Vec<Node> {
    cluster_with(system, secret, |_| {}).await
}

/// [`cluster`] with `adjust` applied to every node's configuration.
async fn cluster_with(system: &str, secret: bool, adjust: impl Fn(&mut Config)) -> Vec<Node> {
    let mut c = config(system, secret);
    adjust(&mut c);
    let first = start_first(c).await;
    wait_self_up(&first).await;
    let seed = port_of(&first);
    let mut nodes = vec![first];
    for _ in 0..2 {
        let mut c = config(system, secret);
        adjust(&mut c);
        c.cluster.seed_nodes = vec![format!("127.0.0.1:{seed}")];
        nodes.push(Node::start(c).await.unwrap());
    }
    for n in &nodes {
        wait_for("three members Up", || healthy(n, 3)).await;
    }
    nodes
}

/// `count` members, all Up, none unreachable, and the node running.
fn healthy(n: &Node, count: usize) -> bool {
    let v = n.cluster().view();
    n.cluster().shutdown_reason().is_none()
        && v.members.len() == count
        && v.members.values().all(|m| m.status == MemberStatus::Up)
        && v.unreachable.is_empty()
}

fn incarnations(nodes: &[Node]) -> BTreeSet<UniqueAddress> {
    nodes
        .iter()
        .map(|n| n.cluster().self_unique_address().clone())
        .collect()
}

/// For `d`: every node keeps exactly the original incarnations, all Up and reachable,
/// and each node's management API answers.
async fn nothing_changes(nodes: &[Node], d: Duration) {
    let want = incarnations(nodes);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let end = tokio::time::Instant::now() + d;
    loop {
        for n in nodes {
            let v = n.cluster().view();
            let have: BTreeSet<UniqueAddress> = v.members.keys().cloned().collect();
            assert_eq!(have, want, "membership changed at {}", n.self_address());
            assert!(
                healthy(n, want.len()),
                "{}: {:?}",
                n.self_address(),
                v.members
            );
            let alive = http
                .get(format!("http://{}/alive", n.management_addr().unwrap()))
                .send()
                .await
                .expect("the management API answers");
            assert!(alive.status().is_success());
        }
        if tokio::time::Instant::now() >= end {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A gossip as an attacker would forge it: the members a node shows, at version 1 of its
/// leader.
fn gossip_of(n: &Node) -> Gossip {
    let v = n.cluster().view();
    let mut g = Gossip::empty();
    g.members = v.members.clone();
    if let Some(l) = &v.leader {
        g.version = g.version.increment(l);
    }
    g
}

fn made_up(system: &str, port: u16, uid: u64) -> UniqueAddress {
    UniqueAddress::new(Address::new(system, "127.0.0.1", port), uid)
}

fn join() -> ClusterMessage {
    ClusterMessage::Join {
        roles: Default::default(),
        app_version: "1.0.0".into(),
    }
}

/// 64 MiB of zeros, gzipped: about 65 KB on the wire.
fn gzip_bomb() -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        enc.write_all(&zeros).unwrap();
    }
    enc.finish().unwrap()
}

fn stat(
    n: &Node,
    f: impl Fn(&concord::remote::TransportStats) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    f(n.transport().stats()).load(Ordering::Relaxed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_without_the_secret_change_nothing() {
    let sys = "hostile-a";
    let nodes = cluster(sys, true).await;
    let target = nodes[0].self_address().clone();
    let me = nodes[0].cluster().self_unique_address().clone();
    let victim = nodes[1].cluster().self_unique_address().clone();
    let before = stat(&nodes[0], |s| &s.authentication_failures);
    let mut attempts = 0;
    // Sends `frames` on a connection whose handshake was challenged, ignoring the refusal
    // as an attacker would. Returns what the handshake said.
    async fn attack(peer: WirePeer, target: &Address, frames: Vec<Vec<u8>>) -> Outcome {
        let (conn, outcome) = peer.connect(target, Lane::Control).await;
        if let Some(mut c) = conn {
            for f in frames {
                if write_frame(&mut c, &f).await.is_err() {
                    break;
                }
            }
        }
        outcome
    }
    // 1. Made-up nodes join (then would go silent so keep-majority downs the real ones).
    for i in 0..5 {
        let o = attack(
            WirePeer::new(made_up(sys, 40_000 + i, 900 + u64::from(i))),
            &target,
            vec![membership_envelope(&join(), 0)],
        )
        .await;
        assert!(matches!(o, Outcome::Challenged), "{o:?}");
        attempts += 1;
    }
    // 2. A Join claiming a real member's host:port with another uid.
    let o = attack(
        WirePeer::new(UniqueAddress::new(victim.address.clone(), 31337)),
        &target,
        vec![membership_envelope(&join(), 0)],
    )
    .await;
    assert!(matches!(o, Outcome::Challenged), "{o:?}");
    attempts += 1;
    // 3. Gossip with a tombstone for the receiver, from a non-member.
    let mut g = gossip_of(&nodes[0]);
    g.tombstones.insert(me.clone(), 1);
    g.members.remove(&me);
    let o = attack(
        WirePeer::new(made_up(sys, 40_100, 1)),
        &target,
        vec![gossip_envelope(&me, &g)],
    )
    .await;
    assert!(matches!(o, Outcome::Challenged), "{o:?}");
    attempts += 1;
    // 4. Forged gossip posing as a member, marking another member Down.
    let mut g = gossip_of(&nodes[0]);
    let m = g.members[&victim].with_status(MemberStatus::Down);
    g.members.insert(victim.clone(), m);
    g.version = g
        .version
        .increment(&nodes[2].cluster().self_unique_address().clone());
    let o = attack(
        WirePeer::new(nodes[2].cluster().self_unique_address().clone()),
        &target,
        vec![gossip_envelope(&me, &g)],
    )
    .await;
    assert!(matches!(o, Outcome::Challenged), "{o:?}");
    attempts += 1;
    // 5. gzip bombs.
    let bomb = gzip_bomb();
    let o = attack(
        WirePeer::new(made_up(sys, 40_200, 2)),
        &target,
        vec![raw_gossip_envelope(&me, bomb); 5],
    )
    .await;
    assert!(matches!(o, Outcome::Challenged), "{o:?}");
    attempts += 1;
    // 6. InitJoins claiming many sender addresses.
    for i in 0..50 {
        let o = attack(
            WirePeer::new(made_up(sys, 41_000 + i, 5)),
            &target,
            vec![membership_envelope(
                &ClusterMessage::InitJoin { cluster: None },
                0,
            )],
        )
        .await;
        assert!(matches!(o, Outcome::Challenged), "{o:?}");
        attempts += 1;
    }
    wait_for("every attempt counted as an authentication failure", || {
        stat(&nodes[0], |s| &s.authentication_failures) >= before + attempts
    })
    .await;
    // The resolver decides after 1 s of stable unreachability: 4 s is well past it.
    nothing_changes(&nodes, Duration::from_secs(4)).await;
    assert!(
        nodes[0].transport().outbound_peers() <= 2,
        "no connection to a made-up address"
    );
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_past_the_handshake_that_is_not_a_member_cannot_use_gossip() {
    let sys = "hostile-b";
    let nodes = cluster(sys, true).await;
    let target = nodes[0].self_address().clone();
    let me = nodes[0].cluster().self_unique_address().clone();
    let (b, c) = (
        nodes[1].cluster().self_unique_address().clone(),
        nodes[2].cluster().self_unique_address().clone(),
    );
    let insider =
        |port: u16| WirePeer::new(made_up(sys, port, 4242)).with_secret(SECRET.as_bytes());

    // The handshake hands the uid out only because this peer proved the secret.
    let (conn, o) = insider(42_000).connect(&target, Lane::Control).await;
    assert!(matches!(o, Outcome::Accepted(u) if u == me.uid), "{o:?}");
    let mut conn = conn.unwrap();

    // 1. A tombstone for the receiver, from a non-member: refused before it is read.
    let refused = nodes[0].cluster().core_stats().refused_non_member;
    let mut g = gossip_of(&nodes[0]);
    g.tombstones.insert(me.clone(), 1);
    g.members.remove(&me);
    write_frame(&mut conn, &gossip_envelope(&me, &g))
        .await
        .unwrap();
    // 2. Forged gossip from the non-member marking a member Down.
    let mut g = gossip_of(&nodes[0]);
    let m = g.members[&b].with_status(MemberStatus::Down);
    g.members.insert(b.clone(), m);
    g.version = g.version.increment(&made_up(sys, 42_000, 4242));
    write_frame(&mut conn, &gossip_envelope(&me, &g))
        .await
        .unwrap();
    wait_for("both gossips refused as from a non-member", || {
        nodes[0].cluster().core_stats().refused_non_member >= refused + 2
    })
    .await;

    // 3. Posing as member C, gossip whose clock puts the leader's counter at 2^64 − 1.
    let implausible = nodes[0].cluster().core_stats().implausible_clocks;
    let leader = nodes[0].cluster().view().leader.clone().unwrap();
    let mut g = gossip_of(&nodes[0]);
    let mut entries: Vec<(UniqueAddress, u64)> =
        g.version.entries().map(|(k, v)| (k.clone(), v)).collect();
    entries.push((leader.clone(), u64::MAX));
    g.version = VectorClock::from_entries(entries);
    let (poser, o) = WirePeer::new(c.clone())
        .with_secret(SECRET.as_bytes())
        .connect(&target, Lane::Control)
        .await;
    assert!(matches!(o, Outcome::Accepted(_)), "{o:?}");
    let mut poser = poser.unwrap();
    write_frame(&mut poser, &gossip_envelope(&me, &g))
        .await
        .unwrap();
    wait_for("the implausible clock refused", || {
        nodes[0].cluster().core_stats().implausible_clocks > implausible
    })
    .await;

    // 4. A stream of gzip bombs (65 KB each, 64 MiB inflated): each is refused at the
    //    decompression limit and closes only its own connection.
    let hits = stat(&nodes[0], |s| &s.decompression_limit_hits);
    let bomb = raw_gossip_envelope(&me, gzip_bomb());
    for i in 0..20 {
        let (conn, _) = insider(43_000 + i).connect(&target, Lane::Control).await;
        if let Some(mut conn) = conn {
            let _ = write_frame(&mut conn, &bomb).await;
        }
    }
    wait_for("the bombs refused at the limit", || {
        stat(&nodes[0], |s| &s.decompression_limit_hits) >= hits + 20
    })
    .await;
    nothing_changes(&nodes, Duration::from_secs(3)).await;

    // The leader's own later changes are still seen everywhere: a fourth node joins.
    let mut cfg = config(sys, true);
    cfg.cluster.seed_nodes = vec![format!("127.0.0.1:{}", port_of(&nodes[0]))];
    let d = Node::start(cfg).await.unwrap();
    for n in &nodes {
        wait_for("the fourth node Up everywhere", || healthy(n, 4)).await;
    }
    d.stop().await;
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_joins_from_thousands_of_made_up_addresses_open_few_connections() {
    // On loopback with no protection (the demo's setting), anyone on the host passes the
    // handshake; the node still answers only a bounded number of strangers.
    let sys = "hostile-c";
    let nodes = cluster(sys, false).await;
    let target = nodes[0].self_address().clone();
    let throttled = nodes[0].cluster().core_stats().join_requests_throttled;
    let started = tokio::time::Instant::now();
    let mut conns = Vec::new();
    for i in 0..2000u16 {
        // Ports nobody listens on.
        let (conn, o) = WirePeer::new(made_up(sys, 20_000 + i, 7))
            .connect(&target, Lane::Control)
            .await;
        assert!(matches!(o, Outcome::Accepted(0)), "{o:?}");
        let mut conn = conn.unwrap();
        write_frame(
            &mut conn,
            &membership_envelope(&ClusterMessage::InitJoin { cluster: None }, 0),
        )
        .await
        .unwrap();
        conns.push(conn);
        if conns.len() >= 100 {
            conns.clear();
        }
    }
    let elapsed = started.elapsed().as_secs();
    wait_for("most InitJoins throttled", || {
        nodes[0].cluster().core_stats().join_requests_throttled >= throttled + 1000
    })
    .await;
    let answered = 2000 - (nodes[0].cluster().core_stats().join_requests_throttled - throttled);
    let bound = concord_core::cluster_core::JOIN_REQUEST_BURST
        + concord_core::cluster_core::JOIN_REQUESTS_PER_SECOND * (elapsed + 1);
    assert!(answered <= bound, "{answered} answered, bound {bound}");
    // Lanes to the made-up addresses are retired after their connects fail.
    wait_for("outbound state back to the members", || {
        nodes[0].transport().outbound_peers() <= 2
    })
    .await;
    nothing_changes(&nodes, Duration::from_secs(2)).await;
    for n in &nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gossip_from_600_made_up_joining_peers_admits_only_within_the_join_limit() {
    // Issue 24: past the handshake, 600 made-up peers each gossip a state listing
    // themselves (and the other 599) as Joining. That gossip used to be taken as each
    // sender's Join without the join rate limit: all 600 were admitted. Now the admission
    // check bounds them like Joins, and nobody but a sender is ever taken from its gossip.
    //
    // This test measures the admission bound alone, so it runs without the split brain
    // resolver: the made-up members admitted within the bound never answer, and each one
    // detected unreachable is a reachability change; on a loaded machine, where 600
    // handshakes take over a minute, down-all-when-unstable (or keep-majority's
    // membership-change guard) then downed the node mid-attack and its next handshake was
    // refused. That effect of admitted made-up members is Akka's rule and documented in
    // docs/SECURITY.md; it is not what this test is about.
    let sys = "hostile-d";
    let nodes = cluster_with(sys, true, |c| c.cluster.downing_provider = "none".into()).await;
    let target = nodes[0].self_address().clone();
    let me = nodes[0].cluster().self_unique_address().clone();
    let real = incarnations(&nodes);
    let throttled = nodes[0].cluster().core_stats().join_requests_throttled;
    let senders: Vec<UniqueAddress> = (0..600u16).map(|i| made_up(sys, 30_000 + i, 9)).collect();
    let mut g = gossip_of(&nodes[0]);
    for s in &senders {
        g.members.insert(
            s.clone(),
            concord_core::Member::joining(s.clone(), Default::default(), "1.0.0"),
        );
        g.version = g.version.increment(s);
    }
    let frame = gossip_envelope(&me, &g);
    let started = tokio::time::Instant::now();
    let mut conns = Vec::new();
    for s in &senders {
        let (conn, o) = WirePeer::new(s.clone())
            .with_secret(SECRET.as_bytes())
            .connect(&target, Lane::Control)
            .await;
        assert!(matches!(o, Outcome::Accepted(_)), "{o:?}");
        let mut conn = conn.unwrap();
        write_frame(&mut conn, &frame).await.unwrap();
        conns.push(conn);
        if conns.len() >= 100 {
            conns.clear();
        }
    }
    // Every gossip handled: each sender was either admitted or refused and counted.
    let admitted = || {
        nodes[0]
            .cluster()
            .view()
            .members
            .keys()
            .filter(|m| !real.contains(*m))
            .count() as u64
    };
    wait_for("every made-up sender admitted or refused", || {
        admitted() + (nodes[0].cluster().core_stats().join_requests_throttled - throttled) >= 600
    })
    .await;
    let admitted = admitted();
    // The bucket refills while queued gossip is still being handled: the bound is taken
    // when the last one was.
    let elapsed = started.elapsed().as_secs();
    let bound = concord_core::cluster_core::JOIN_REQUEST_BURST
        + concord_core::cluster_core::JOIN_REQUESTS_PER_SECOND * (elapsed + 1);
    eprintln!("{admitted} of 600 made-up senders admitted in {elapsed} s (bound {bound})");
    assert!(
        admitted <= bound,
        "{admitted} made-up members admitted, bound {bound}"
    );
    for n in &nodes {
        n.stop().await;
    }
}
