//! Cluster Bootstrap with real processes on loopback: nodes started with `config` discovery
//! and no seed nodes form exactly one cluster, whatever order they start in; a node started
//! later joins the existing cluster through the contact points.

mod common;

use std::time::{Duration, Instant};

use common::*;

const T: Duration = Duration::from_secs(40);

/// Bootstrap with fast timings; `endpoints` are the management ports of every node.
fn bootstrap_env(endpoints: &[u16]) -> Vec<(String, String)> {
    let list = endpoints
        .iter()
        .map(|p| format!("{{host = \"127.0.0.1\", port = {p}}}"))
        .collect::<Vec<_>>()
        .join(", ");
    [
        (
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__SERVICE_NAME".to_string(),
            "shop".to_string(),
        ),
        (
            "CONCORD__DISCOVERY__CONFIG__SERVICES__SHOP__ENDPOINTS".into(),
            format!("[{list}]"),
        ),
    ]
    .into_iter()
    .chain(
        BOOTSTRAP_FAST_ENV
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    )
    .collect()
}

fn start_node(system: &str, ports: (u16, u16), env: &[(String, String)]) -> Node {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Node::start(system, ports.0, ports.1, &[], &env)
}

/// Starts `n` nodes at once in the order `order`, waits for one cluster of all of them.
fn form(system: &str, n: usize, order: &[usize]) -> (Vec<Node>, Vec<(u16, u16)>) {
    start_on_free_ports(2 * n, |p| {
        let ports: Vec<(u16, u16)> = (0..n).map(|i| (p[2 * i], p[2 * i + 1])).collect();
        let env = bootstrap_env(&ports.iter().map(|x| x.1).collect::<Vec<_>>());
        let mut slots: Vec<Option<Node>> = (0..n).map(|_| None).collect();
        for &i in order {
            slots[i] = Some(start_node(system, ports[i], &env));
        }
        let nodes: Vec<Node> = slots.into_iter().map(Option::unwrap).collect();
        (nodes, ports)
    })
}

fn one_cluster(rt: &tokio::runtime::Runtime, nodes: &[Node]) {
    let refs: Vec<&Node> = nodes.iter().collect();
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    wait_until("one cluster of every node", T, &refs, || {
        all_up(rt, &refs, &all)
    });
    let formers = nodes
        .iter()
        .filter(|n| n.log_text().contains("forming a new cluster"))
        .count();
    assert_eq!(formers, 1, "exactly one node forms the cluster");
    // The lowest contact point (management port) is the one that formed it.
    let lowest = nodes.iter().min_by_key(|n| n.management_port).unwrap();
    assert!(lowest.log_text().contains("forming a new cluster"));
}

#[test]
fn five_nodes_started_at_once_form_exactly_one_cluster_ten_times() {
    let _s = serial();
    let rt = runtime();
    let orders: [[usize; 5]; 10] = [
        [0, 1, 2, 3, 4],
        [4, 3, 2, 1, 0],
        [2, 0, 4, 1, 3],
        [1, 3, 0, 4, 2],
        [3, 4, 1, 0, 2],
        [0, 4, 1, 3, 2],
        [2, 1, 3, 0, 4],
        [4, 0, 3, 2, 1],
        [1, 2, 4, 3, 0],
        [3, 0, 2, 4, 1],
    ];
    for (rep, order) in orders.iter().enumerate() {
        let started = Instant::now();
        let (nodes, _) = form(&format!("boot{rep}"), 5, order);
        one_cluster(&rt, &nodes);
        eprintln!(
            "repetition {rep}: start order {order:?} formed one cluster of 5 in {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn a_node_started_later_joins_the_existing_cluster() {
    let _s = serial();
    let rt = runtime();
    // Discovery lists the five running nodes; the sixth, started later, sees all six.
    let (mut nodes, ports) = start_on_free_ports(12, |p| {
        let ports: Vec<(u16, u16)> = (0..6).map(|i| (p[2 * i], p[2 * i + 1])).collect();
        let first = bootstrap_env(&ports[..5].iter().map(|x| x.1).collect::<Vec<_>>());
        let nodes: Vec<Node> = ports[..5]
            .iter()
            .map(|pp| start_node("later", *pp, &first))
            .collect();
        (nodes, ports)
    });
    one_cluster(&rt, &nodes);
    let all = bootstrap_env(&ports.iter().map(|x| x.1).collect::<Vec<_>>());
    nodes.push(start_node("later", ports[5], &all));
    let refs: Vec<&Node> = nodes.iter().collect();
    let addrs: Vec<String> = nodes.iter().map(Node::address).collect();
    wait_until("the sixth node joins", T, &refs, || {
        all_up(&rt, &refs, &addrs)
    });
    assert!(nodes[5]
        .log_text()
        .contains("joining the seed nodes a contact point reported"));
    assert!(!nodes[5].log_text().contains("forming a new cluster"));
}
