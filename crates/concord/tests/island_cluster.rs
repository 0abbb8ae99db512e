//! Island clusters (issue 24) between real `concord node` processes on loopback: three
//! nodes with two seed nodes; the first seed is SIGKILLed and restarted (same port, same
//! data directory) while a partition cuts it off from the others (link faults injected on
//! them through `/testkit/faults`); after several `seed-node-timeout`s the partition heals,
//! and within a bounded time there is one cluster of three Up members.
//!
//! Before the membership record, the restarted first seed formed a one-node cluster of its
//! own after `seed-node-timeout` (Akka's first-seed rule) that never merged back
//! (`an_island_forms_without_the_membership_record` shows it with the record turned off).

mod common;

use std::path::Path;
use std::time::Duration;

use common::{all_up, members, runtime, serial, wait_until, Node};

const SYSTEM: &str = "island";
const ENV: &[(&str, &str)] = &[
    ("CONCORD__TESTKIT__FAULT_INJECTION", "true"),
    ("CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "2s"),
    ("CONCORD__CLUSTER__SEED_NODE_TIMEOUT", "2s"),
];

fn with_env<'a>(extra: &'a [(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    ENV.iter().chain(extra.iter()).copied().collect()
}

/// Sets (`blackhole=both`) or clears (`none`) the faults on the link from `from` to the
/// node at `to` (an address).
fn link(rt: &tokio::runtime::Runtime, from: &Node, to: &str, blackhole: &str) {
    let url = format!("{}/testkit/faults/{}", from.management_url(), to);
    let r = rt
        .block_on(
            reqwest::Client::new()
                .put(url)
                .form(&[("blackhole", blackhole)])
                .send(),
        )
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// The scenario up to the restart of the first seed inside the partition: the three nodes
/// (the restarted first seed first) and its address.
fn restart_first_seed_in_a_partition(
    rt: &tokio::runtime::Runtime,
    data: &Path,
    extra: &[(&str, &str)],
) -> Vec<Node> {
    let env = with_env(extra);
    let d1 = data.join("n1").display().to_string();
    let mut n1 = Node::start_bound_with_args(SYSTEM, &[], &env, &["--data-dir", d1.as_str()]);
    let n2 = Node::start_bound(SYSTEM, &[n1.port], &env);
    let n3 = Node::start_bound(SYSTEM, &[n1.port, n2.port], &env);
    let addrs = vec![n1.address(), n2.address(), n3.address()];
    wait_until("three members Up", Duration::from_secs(60), &[], || {
        all_up(rt, &[&n1, &n2, &n3], &addrs)
    });
    // The membership record is written once n1 is Up.
    if extra.is_empty() {
        let record = data.join("n1").join("membership.json");
        wait_until(
            "n1's membership record",
            Duration::from_secs(10),
            &[&n1],
            || record.exists(),
        );
    }
    let (p1, m1) = (n1.port, n1.management_port);
    n1.kill9();
    // Partition: n2 and n3 drop everything to and from n1's address.
    for n in [&n2, &n3] {
        link(rt, n, &addrs[0], "both");
    }
    let n1 = Node::start_with_args(
        "127.0.0.1",
        SYSTEM,
        p1,
        m1,
        &[p1, n2.port],
        &env,
        &["--data-dir", d1.as_str()],
    );
    vec![n1, n2, n3]
}

#[test]
fn a_first_seed_restarted_inside_a_partition_rejoins_its_cluster_after_the_heal() {
    let _g = serial();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let nodes = restart_first_seed_in_a_partition(&rt, dir.path(), &[]);
    let refs: Vec<&Node> = nodes.iter().collect();
    let addrs: Vec<String> = nodes.iter().map(Node::address).collect();
    // seed-node-timeout (2 s) passes while n1 is cut off: it must not form a cluster.
    wait_until(
        "n1 decides at seed-node-timeout",
        Duration::from_secs(30),
        &refs,
        || {
            let log = nodes[0].log_text();
            log.contains("does not form a new cluster") || log.contains("forming a new cluster")
        },
    );
    assert!(
        !nodes[0]
            .log_text()
            .contains("joining itself, forming a new cluster"),
        "the restarted first seed formed an island cluster:\n{}",
        nodes[0].log_text()
    );
    let m = members(&rt, &nodes[0]);
    assert!(
        m.as_ref().is_some_and(|m| m.members.is_empty()),
        "n1 is in no cluster while cut off: {m:?}"
    );
    // Heal: one cluster of three within a bounded time.
    for n in &nodes[1..] {
        link(&rt, n, &addrs[0], "none");
    }
    wait_until(
        "one cluster of three after the heal",
        Duration::from_secs(90),
        &refs,
        || all_up(&rt, &refs, &addrs),
    );
}

/// The same scenario with `cluster.membership-record = off` (Akka's behaviour, and
/// Concord's before issue 24): the restarted first seed forms a one-node island. After the
/// heal both clusters find each other through the seed nodes and report it — `otherClusters`
/// in `GET /cluster/members`, `GET /ready` fails, the metric — and, since neither can prove
/// it is the island (no record), both stay.
#[test]
fn an_island_forms_without_the_membership_record_and_is_reported_after_the_heal() {
    let _g = serial();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let nodes = restart_first_seed_in_a_partition(
        &rt,
        dir.path(),
        &[("CONCORD__CLUSTER__MEMBERSHIP_RECORD", "false")],
    );
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_until(
        "n1 forms a one-node island",
        Duration::from_secs(30),
        &refs,
        || {
            members(&rt, &nodes[0])
                .is_some_and(|m| m.members.len() == 1 && m.members.iter().all(|x| x.status == "Up"))
        },
    );
}

/// The rejoin default: the restarted first seed (with its record) is joined to itself
/// while cut off — as an operator might — which forms a cluster re-formed from the
/// original. After the heal its island probe finds the original cluster still running, so
/// it stops (`IslandCluster`, exit 0); restarted as a supervisor would, it joins the
/// original cluster: one cluster of three.
#[test]
fn a_cluster_reformed_from_a_running_cluster_stops_after_the_heal_and_its_node_rejoins() {
    let _g = serial();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = restart_first_seed_in_a_partition(&rt, dir.path(), &[]);
    let addrs: Vec<String> = nodes.iter().map(Node::address).collect();
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_until("n1 answers", Duration::from_secs(30), &refs, || {
            members(&rt, &nodes[0]).is_some()
        });
    }
    rt.block_on(nodes[0].client().join(&addrs[0]))
        .expect("n1 joins itself");
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_until(
        "n1 forms a re-formed cluster",
        Duration::from_secs(30),
        &refs,
        || members(&rt, &nodes[0]).is_some_and(|m| m.members.len() == 1 && m.cluster_id.is_some()),
    );
    for n in &nodes[1..] {
        link(&rt, n, &addrs[0], "none");
    }
    let code = nodes[0].wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{}", nodes[0].log_text());
    assert!(
        nodes[0].log_text().contains("IslandCluster"),
        "{}",
        nodes[0].log_text()
    );
    // The supervisor restarts it.
    let d1 = dir.path().join("n1").display().to_string();
    let (p1, m1, p2) = (nodes[0].port, nodes[0].management_port, nodes[1].port);
    nodes[0] = Node::start_with_args(
        "127.0.0.1",
        SYSTEM,
        p1,
        m1,
        &[p1, p2],
        ENV,
        &["--data-dir", d1.as_str()],
    );
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_until(
        "one cluster of three after the restart",
        Duration::from_secs(90),
        &refs,
        || all_up(&rt, &refs, &addrs),
    );
}
