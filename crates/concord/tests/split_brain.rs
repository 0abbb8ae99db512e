//! Split Brain Resolver with real processes on loopback: link faults injected over the
//! management API (`testkit.fault-injection = true`), and real pauses (SIGSTOP).

mod common;

use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(40);

fn sbr_env(strategy: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("CONCORD__TESTKIT__FAULT_INJECTION", "true"),
        (
            "CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__ACTIVE_STRATEGY",
            strategy,
        ),
        ("CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "2s"),
    ]
}

fn start(system: &str, n: usize, env: &[(&str, &str)]) -> Vec<Node> {
    // The first node forms the cluster (it is Up before the others start, so it is the
    // oldest member).
    let rt = runtime();
    let first = Node::start_bound(system, &[], env);
    wait_until("the first node Up", T, &[&first], || {
        all_up(&rt, &[&first], &[first.address()])
    });
    let seeds = [first.port];
    let nodes: Vec<Node> = std::iter::once(first)
        .chain((1..n).map(|_| Node::start_bound(system, &seeds, env)))
        .collect();
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_until("cluster formed", T, &refs, || all_up(&rt, &refs, &all));
    nodes
}

/// Cuts every link between `a` and `b`, both ways, on both sides.
fn partition(rt: &tokio::runtime::Runtime, a: &[&Node], b: &[&Node]) {
    cut(rt, a, b);
    cut(rt, b, a);
}

/// Blackholes (both directions) every link from the nodes of `a` to the nodes of `b`, set
/// on the `a` side only.
fn cut(rt: &tokio::runtime::Runtime, a: &[&Node], b: &[&Node]) {
    let http = reqwest::Client::new();
    for n in a {
        for y in b {
            let url = format!("{}/testkit/faults/{}", n.management_url(), y.address());
            let r = rt
                .block_on(http.put(url).form(&[("blackhole", "both")]).send())
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    }
}

/// The sum of the series `name` in `n`'s `/metrics` (0 if it does not answer).
fn metric(rt: &tokio::runtime::Runtime, n: &Node, name: &str) -> u64 {
    let text = rt
        .block_on(async {
            reqwest::get(format!("{}/metrics", n.management_url()))
                .await?
                .text()
                .await
        })
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

fn survivors_up(rt: &tokio::runtime::Runtime, survivors: &[&Node]) -> bool {
    let addrs: Vec<String> = survivors.iter().map(|n| n.address()).collect();
    all_up(rt, survivors, &addrs)
        && survivors
            .iter()
            .all(|n| rt.block_on(n.client().ready()).unwrap_or(false))
}

fn expect_exit(nodes: &mut [Node], idx: &[usize]) {
    for i in idx {
        let code = nodes[*i].wait_exit(T);
        assert_eq!(
            code,
            Some(0),
            "node {} should have been downed and exited; log:\n{}",
            nodes[*i].address(),
            nodes[*i].log_text()
        );
        assert!(
            nodes[*i].log_text().contains("Down"),
            "it says it was downed"
        );
    }
}

#[test]
fn keep_majority_3_2_minority_exits_majority_continues() {
    let _s = serial();
    let rt = runtime();
    let mut nodes = start("km", 5, &sbr_env("keep-majority"));
    {
        let (a, b) = nodes.split_at(3);
        partition(
            &rt,
            &a.iter().collect::<Vec<_>>(),
            &b.iter().collect::<Vec<_>>(),
        );
    }
    expect_exit(&mut nodes, &[3, 4]);
    let majority: Vec<&Node> = nodes[..3].iter().collect();
    wait_until(
        "majority removes the minority and stays ready",
        T,
        &majority,
        || survivors_up(&rt, &majority),
    );
    assert!(
        nodes[..3]
            .iter()
            .any(|n| n.log_text().contains("split brain resolver decision")),
        "the majority's leader logs its decision"
    );
}

#[test]
fn keep_majority_tie_2_2_with_a_joining_node_keeps_the_lowest_address_side() {
    let _s = serial();
    let rt = runtime();
    let mut env = sbr_env("keep-majority");
    env.push(("CONCORD__CLUSTER__ALLOW_WEAKLY_UP_MEMBERS", "off"));
    let mut nodes = start("tie", 4, &env);
    // Sides by address: the two lowest addresses against the two highest.
    let mut order: Vec<usize> = (0..4).collect();
    order.sort_by_key(|i| nodes[*i].address());
    let (low, high) = (vec![order[0], order[1]], vec![order[2], order[3]]);
    partition(
        &rt,
        &low.iter().map(|i| &nodes[*i]).collect::<Vec<_>>(),
        &high.iter().map(|i| &nodes[*i]).collect::<Vec<_>>(),
    );
    // A fifth node joins the high side during the partition: it stays Joining, is not
    // counted, and goes down with its side. The low side is cut from it before it joins
    // (its first gossip would otherwise race the cut, and a low node that saw it join
    // would see the membership change while unstable: Akka's rule then downs all).
    let joiner = Node::start_unjoined("tie", &env);
    let low_nodes: Vec<&Node> = low.iter().map(|i| &nodes[*i]).collect();
    cut(&rt, &low_nodes, &[&joiner]);
    cut(&rt, &[&joiner], &low_nodes);
    rt.block_on(joiner.client().join(&nodes[high[0]].address()))
        .expect("the joiner asks the high side to join");
    nodes.push(joiner);
    expect_exit(&mut nodes, &[high[0], high[1], 4]);
    let survivors: Vec<&Node> = low.iter().map(|i| &nodes[*i]).collect();
    wait_until("the lowest-address side survives", T, &survivors, || {
        survivors_up(&rt, &survivors)
    });
}

#[test]
fn keep_oldest_without_down_if_alone_keeps_the_lone_oldest() {
    let _s = serial();
    let rt = runtime();
    let mut env = sbr_env("keep-oldest");
    env.push((
        "CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__KEEP_OLDEST__DOWN_IF_ALONE",
        "false",
    ));
    let mut nodes = start("ko", 3, &env);
    {
        let (a, b) = nodes.split_at(1);
        partition(
            &rt,
            &a.iter().collect::<Vec<_>>(),
            &b.iter().collect::<Vec<_>>(),
        );
    }
    expect_exit(&mut nodes, &[1, 2]);
    let survivors = vec![&nodes[0]];
    wait_until("the oldest survives alone", T, &survivors, || {
        survivors_up(&rt, &survivors)
    });
}

#[test]
fn static_quorum_side_below_quorum_exits() {
    let _s = serial();
    let rt = runtime();
    let mut env = sbr_env("static-quorum");
    env.push((
        "CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STATIC_QUORUM__QUORUM_SIZE",
        "2",
    ));
    let mut nodes = start("sq", 3, &env);
    {
        let (a, b) = nodes.split_at(1);
        partition(
            &rt,
            &a.iter().collect::<Vec<_>>(),
            &b.iter().collect::<Vec<_>>(),
        );
    }
    expect_exit(&mut nodes, &[0]);
    let survivors: Vec<&Node> = nodes[1..].iter().collect();
    wait_until("the quorum side survives", T, &survivors, || {
        survivors_up(&rt, &survivors)
    });
}

#[test]
fn down_all_downs_both_sides() {
    let _s = serial();
    let rt = runtime();
    let mut nodes = start("da", 3, &sbr_env("down-all"));
    {
        let (a, b) = nodes.split_at(1);
        partition(
            &rt,
            &a.iter().collect::<Vec<_>>(),
            &b.iter().collect::<Vec<_>>(),
        );
    }
    expect_exit(&mut nodes, &[0, 1, 2]);
}

#[test]
fn fault_injection_is_refused_unless_enabled() {
    let _s = serial();
    let rt = runtime();
    let nodes = start("nofi", 2, &[]);
    let url = format!(
        "{}/testkit/faults/{}",
        nodes[0].management_url(),
        nodes[1].address()
    );
    let r = rt
        .block_on(
            reqwest::Client::new()
                .put(url)
                .form(&[("blackhole", "both")])
                .send(),
        )
        .unwrap();
    assert_eq!(r.status(), 403);
    // Let the protocol run a few rounds (a blackhole would make the peer unreachable by
    // then), counted by the node's gossip rounds rather than by the wall clock.
    let rounds =
        |rt: &tokio::runtime::Runtime| metric(rt, &nodes[0], "concord_cluster_gossip_rounds_total");
    let before = rounds(&rt);
    wait_until("ten more gossip rounds", T, &[&nodes[0]], || {
        rounds(&rt) >= before + 10
    });
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    assert!(
        all_up(&rt, &nodes.iter().collect::<Vec<_>>(), &all),
        "nothing changed"
    );
}

#[test]
fn a_1s_pause_is_not_unreachable_a_15s_pause_is_downed_and_exits_after_resume() {
    let _s = serial();
    let rt = runtime();
    // Akka's default failure-detector settings (fast gossip keeps the rest of the test quick).
    let mut env: Vec<(&str, &str)> = AKKA_DEFAULT_ENV
        .iter()
        .copied()
        .filter(|(k, _)| k.contains("FAILURE_DETECTOR") || k.contains("REAPER"))
        .collect();
    env.push(("CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "4s"));
    let mut nodes = start("pause", 3, &env);
    // Let the failure detectors learn the 1 s heartbeat rhythm: a few heartbeat round
    // trips measured on each node.
    for n in &nodes {
        wait_until("heartbeats measured", T, &[n], || {
            metric(&rt, n, "concord_cluster_heartbeat_rtt_seconds_count") >= 8
        });
    }
    let victim = nodes[2].address();
    let others: Vec<&Node> = nodes[..2].iter().collect();
    let seen_unreachable = |rt: &tokio::runtime::Runtime| {
        others
            .iter()
            .any(|n| members(rt, n).is_some_and(|m| m.unreachable.iter().any(|u| u.node == victim)))
    };

    nodes[2].signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_secs(1));
    nodes[2].signal(Signal::SIGCONT);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(6) {
        assert!(
            !seen_unreachable(&rt),
            "a 1 s pause must not be reported unreachable"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    nodes[2].signal(Signal::SIGSTOP);
    let paused_at = Instant::now();
    wait_until(
        "15 s pause: unreachable, downed by the SBR and removed",
        Duration::from_secs(15),
        &others,
        || {
            let addrs: Vec<String> = others.iter().map(|n| n.address()).collect();
            all_up(&rt, &others, &addrs)
        },
    );
    let left = Duration::from_secs(15).saturating_sub(paused_at.elapsed());
    std::thread::sleep(left);
    nodes[2].signal(Signal::SIGCONT);
    assert_eq!(
        nodes[2].wait_exit(T),
        Some(0),
        "after SIGCONT it learns it was removed and exits; log:\n{}",
        nodes[2].log_text()
    );
    let log = nodes[2].log_text();
    assert!(
        log.contains("quarantined")
            || log.contains("removed from the cluster")
            || log.contains("Down"),
        "{log}"
    );
}
