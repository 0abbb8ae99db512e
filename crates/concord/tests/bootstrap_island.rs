//! Island clusters found through Cluster Bootstrap's contact points, with real `concord node`
//! processes on loopback: clusters formed by bootstrap have no seed nodes, so only the
//! island watch (`bootstrap.island-watch-interval`) can find another cluster of their
//! system name.
//!
//! Three nodes form one cluster through bootstrap (`config` discovery lists all three; the
//! third starts last, so it is in no member's seed-node list). The third is SIGKILLed and restarted (same ports, same data directory, so its
//! membership record names the cluster) with a discovery answer that lists only itself
//! — as a partial DNS answer during a partition might — and `required-contact-point-nr =
//! 1`: it forms a cluster re-formed from the original. The original's island watch probes
//! its contact point, the island probe sends it InitJoin, both report the other cluster,
//! and with the default `island-resolution = "rejoin"` the island stops (exit 0);
//! restarted as a supervisor would (discovery whole again), it joins the original: one
//! cluster of three.

mod common;

use std::time::Duration;

use common::*;

const SYSTEM: &str = "bootisland";

/// Bootstrap with fast timings, discovery listing the management ports `endpoints`, and
/// the island watch every second.
fn env(endpoints: &[u16], extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let list = endpoints
        .iter()
        .map(|p| format!("{{host = \"127.0.0.1\", port = {p}}}"))
        .collect::<Vec<_>>()
        .join(", ");
    [
        (
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__SERVICE_NAME",
            "shop".to_string(),
        ),
        (
            "CONCORD__DISCOVERY__CONFIG__SERVICES__SHOP__ENDPOINTS",
            format!("[{list}]"),
        ),
        ("CONCORD__BOOTSTRAP__ISLAND_WATCH_INTERVAL", "1s".into()),
        (
            "CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER",
            "2s".into(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .chain(
        BOOTSTRAP_FAST_ENV
            .iter()
            .chain(extra.iter())
            .map(|(k, v)| (k.to_string(), v.to_string())),
    )
    .collect()
}

/// Starts a node on `ports` (remoting, management) with `env` and the data directory `data`.
fn start(ports: (u16, u16), env: &[(String, String)], data: &str) -> Node {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Node::start_with_args(
        "127.0.0.1",
        SYSTEM,
        ports.0,
        ports.1,
        &[],
        &env,
        &["--data-dir", data],
    )
}

#[test]
fn a_cluster_reformed_through_bootstrap_is_found_through_the_contact_points_and_rejoins() {
    let _g = serial();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<String> = (0..3)
        .map(|i| dir.path().join(format!("n{i}")).display().to_string())
        .collect();
    // The first two form the cluster (the third, not started yet, has the highest contact
    // point, so the lowest of the two may form it); the third joins later, so it is in
    // neither's seed-node list and only the island watch can find it.
    let first_two = [
        (
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__REQUIRED_CONTACT_POINT_NR",
            "2",
        ),
        (
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__CONTACT_WITH_ALL_CONTACT_POINTS",
            "false",
        ),
    ];
    let (mut nodes, ports) = start_on_free_ports(6, |p| {
        let mut ports: Vec<(u16, u16)> = (0..3).map(|i| (p[2 * i], p[2 * i + 1])).collect();
        ports.sort_by_key(|x| x.1);
        let all = env(&ports.iter().map(|x| x.1).collect::<Vec<_>>(), &first_two);
        let nodes: Vec<Node> = (0..2).map(|i| start(ports[i], &all, &data[i])).collect();
        (nodes, ports)
    });
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        let addrs: Vec<String> = nodes.iter().map(Node::address).collect();
        wait_until("one cluster of two", Duration::from_secs(60), &refs, || {
            all_up(&rt, &refs, &addrs)
        });
    }
    let all = env(&ports.iter().map(|x| x.1).collect::<Vec<_>>(), &[]);
    nodes.push(start(ports[2], &all, &data[2]));
    assert!(nodes[2].wait_running(Duration::from_secs(30)));
    let addrs: Vec<String> = nodes.iter().map(Node::address).collect();
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_until(
            "one cluster of three",
            Duration::from_secs(60),
            &refs,
            || all_up(&rt, &refs, &addrs),
        );
        let record = dir.path().join("n2").join("membership.json");
        wait_until(
            "the third node's membership record",
            Duration::from_secs(10),
            &refs,
            || record.exists(),
        );
    }
    let original = members(&rt, &nodes[0])
        .and_then(|m| m.cluster_id)
        .expect("the original cluster's identity");

    // The third node restarts seeing only itself through discovery: an island re-formed
    // from the original.
    nodes[2].kill9();
    let alone = env(
        &[ports[2].1],
        &[(
            "CONCORD__BOOTSTRAP__CONTACT_POINT_DISCOVERY__REQUIRED_CONTACT_POINT_NR",
            "1",
        )],
    );
    nodes[2] = start(ports[2], &alone, &data[2]);
    assert!(nodes[2].wait_running(Duration::from_secs(30)));
    let island = {
        let refs: Vec<&Node> = nodes.iter().collect();
        let mut island = None;
        wait_until(
            "the restarted node forms a cluster of its own",
            Duration::from_secs(30),
            &refs,
            || {
                island = members(&rt, &nodes[2])
                    .filter(|m| m.members.len() == 1)
                    .and_then(|m| m.cluster_id);
                island.is_some()
            },
        );
        island.unwrap()
    };
    assert_ne!(island, original);

    // The original finds it through the contact points and reports it; the island stops.
    let (a, b) = nodes.split_at_mut(2);
    let refs: Vec<&Node> = a.iter().collect();
    let mut reported = false;
    let mut exited = None;
    wait_until(
        "the original reports the island and the island stops",
        Duration::from_secs(60),
        &refs,
        || {
            reported = reported
                || a.iter().any(|n| {
                    members(&rt, n).is_some_and(|m| {
                        m.other_clusters
                            .iter()
                            .any(|o| o.cluster_id == island && !o.this_cluster_yields)
                    })
                });
            if exited.is_none() {
                exited = b[0].child.try_wait().ok().flatten();
            }
            reported && exited.is_some()
        },
    );
    let log = b[0].log_text();
    assert_eq!(exited.and_then(|s| s.code()), Some(0), "{log}");
    assert!(log.contains("IslandCluster"), "{log}");

    // Restarted by its supervisor, with discovery whole again, it joins the original.
    nodes[2] = start(ports[2], &all, &data[2]);
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_until(
        "one cluster of three after the restart",
        Duration::from_secs(60),
        &refs,
        || all_up(&rt, &refs, &addrs),
    );
    assert!(nodes[2]
        .log_text()
        .contains("joining the seed nodes a contact point reported"));
    assert_eq!(
        members(&rt, &nodes[2]).and_then(|m| m.cluster_id),
        Some(original)
    );
}
