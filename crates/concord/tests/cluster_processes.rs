//! Real `concord node` processes on loopback with fast timings: formation, graceful leave,
//! crash → unreachable → down → removed, restart on the same port, refused cluster name,
//! garbage on the remoting port, bad configuration.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use nix::sys::signal::Signal;

const T: Duration = Duration::from_secs(30);

fn start_cluster(system: &str, n: usize) -> Vec<Node> {
    let first = Node::start_bound(system, &[], &[]);
    let seeds = [first.port];
    std::iter::once(first)
        .chain((1..n).map(|_| Node::start_bound(system, &seeds, &[])))
        .collect()
}

#[test]
fn five_nodes_form_leave_crash_down() {
    let _s = serial();
    let rt = runtime();
    let mut nodes = start_cluster("five", 5);
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_until("5 members Up on every node", T, &refs, || {
        all_up(&rt, &refs, &all)
    });
    let leaders: std::collections::BTreeSet<Option<String>> = refs
        .iter()
        .map(|n| members(&rt, n).unwrap().leader)
        .collect();
    assert_eq!(leaders.len(), 1, "one leader: {leaders:?}");
    assert_eq!(
        leaders.into_iter().next().unwrap().as_deref(),
        Some(all.iter().min().unwrap().as_str()),
        "leader is the lowest address"
    );

    // Graceful leave through the CLI; the process exits by itself.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_concord"))
        .args([
            "leave",
            &nodes[4].address(),
            "--management",
            &nodes[0].management_url(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "concord leave: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        nodes[4].wait_exit(T),
        Some(0),
        "leaving node exits 0 by itself"
    );
    let four: Vec<String> = all[..4].to_vec();
    let refs4: Vec<&Node> = nodes[..4].iter().collect();
    wait_until("left node Removed everywhere", T, &refs4, || {
        all_up(&rt, &refs4, &four)
    });
    assert!(nodes[4].log_text().contains("removed from the cluster"));

    // Crash: SIGKILL → unreachable on all others → Down via the API → removed.
    nodes[3].kill9();
    let victim = all[3].clone();
    let refs3: Vec<&Node> = nodes[..3].iter().collect();
    wait_until("crashed node unreachable on all others", T, &refs3, || {
        refs3.iter().all(|n| {
            members(&rt, n).is_some_and(|m| {
                m.unreachable
                    .iter()
                    .any(|u| u.node == victim && !u.observed_by.is_empty())
            })
        })
    });
    let msg = rt
        .block_on(nodes[1].client().operation(&victim, "Down"))
        .unwrap();
    assert_eq!(msg, format!("Downing {victim}"));
    let three: Vec<String> = all[..3].to_vec();
    wait_until("downed node removed everywhere", T, &refs3, || {
        all_up(&rt, &refs3, &three)
    });
}

#[test]
fn restart_on_the_same_port_replaces_the_old_incarnation() {
    let _s = serial();
    let rt = runtime();
    let mut nodes = start_cluster("restart", 3);
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_until("3 Up", T, &refs, || all_up(&rt, &refs, &all));
    }
    let old_uid = members(&rt, &nodes[0])
        .unwrap()
        .members
        .iter()
        .find(|m| m.node == all[2])
        .unwrap()
        .node_uid
        .clone();
    nodes[2].kill9();
    let (port, mport) = (nodes[2].port, nodes[2].management_port);
    let seeds = [nodes[0].port, nodes[1].port];
    nodes[2] = Node::start("restart", port, mport, &seeds, &[]);
    let refs: Vec<&Node> = nodes.iter().collect();
    // No manual down: the new incarnation's Join downs the old one.
    wait_until(
        "new incarnation Up everywhere, old uid gone",
        T,
        &refs,
        || {
            all_up(&rt, &refs, &all)
                && refs.iter().all(|n| {
                    members(&rt, n).is_some_and(|m| m.members.iter().all(|x| x.node_uid != old_uid))
                })
        },
    );
    let log0 = nodes[0].log_text() + &nodes[1].log_text();
    assert!(
        log0.contains("new incarnation of an existing member"),
        "the seed logs why the old one is downed"
    );
}

#[test]
fn sigterm_leaves_gracefully_and_exits() {
    let _s = serial();
    let rt = runtime();
    let mut nodes = start_cluster("term", 3);
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_until("3 Up", T, &refs, || all_up(&rt, &refs, &all));
    }
    nodes[1].signal(Signal::SIGTERM);
    assert_eq!(nodes[1].wait_exit(T), Some(0));
    let rest = vec![all[0].clone(), all[2].clone()];
    let refs = vec![&nodes[0], &nodes[2]];
    wait_until(
        "SIGTERM'd node removed (not unreachable) everywhere",
        T,
        &refs,
        || all_up(&rt, &refs, &rest),
    );
    let log = nodes[1].log_text();
    assert!(log.contains("coordinated shutdown started"), "{log}");
    // Every phase ran, in Akka's order.
    let mut at = 0;
    for phase in concord::Phase::ALL {
        let needle = format!("phase=\"{}\"", phase.name());
        let found = log[at..]
            .find(&needle)
            .unwrap_or_else(|| panic!("phase {phase} missing or out of order in:\n{log}"));
        at += found + needle.len();
    }
    assert!(log.contains("coordinated shutdown completed"), "{log}");
}

#[test]
fn a_node_with_another_cluster_name_is_refused_and_the_log_says_why() {
    let _s = serial();
    let rt = runtime();
    let alpha = Node::start_bound("alpha", &[], &[]);
    wait_until("alpha Up", T, &[&alpha], || {
        all_up(&rt, &[&alpha], &[alpha.address()])
    });
    // beta's seed is alpha's host:port, so it asks concord://beta@...:alpha-port.
    let beta = Node::start_bound("beta", &[alpha.port], &[]);
    wait_until("alpha logs the refusal", T, &[&alpha, &beta], || {
        alpha
            .log_text()
            .contains("cluster name `beta` does not match this node's cluster name `alpha`")
    });
    wait_until("beta logs the refusal", T, &[&alpha, &beta], || {
        beta.log_text().contains("handshake refused by peer")
    });
    let a = members(&rt, &alpha).unwrap();
    assert_eq!(a.members.len(), 1, "beta did not join alpha");
    let b = members(&rt, &beta).unwrap();
    assert!(b.members.is_empty(), "beta is in no cluster");
}

#[test]
fn garbage_on_the_remoting_port_closes_only_that_connection() {
    let _s = serial();
    let rt = runtime();
    let nodes = start_cluster("garbage", 2);
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_until("2 Up", T, &refs, || all_up(&rt, &refs, &all));
    let payloads: Vec<Vec<u8>> = vec![
        vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3], // length beyond maximum-frame-size
        [vec![0, 0, 0, 8], b"\x0a\xffgarbage".to_vec()].concat(), // malformed handshake protobuf
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), // wrong protocol
    ];
    let count = payloads.len();
    for p in payloads {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", nodes[0].port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&p).unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap_or(0);
        assert_eq!(n, 0, "the node closes the connection without answering");
    }
    // Wait for the node to have handled every connection (each counted as a refused
    // handshake; the log line is rate-limited to one per peer and interval), then check
    // that nothing else changed.
    let metric = |name: &str| -> u64 {
        let text = rt
            .block_on(async {
                reqwest::get(format!("{}/metrics", nodes[0].management_url()))
                    .await?
                    .text()
                    .await
            })
            .unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    wait_until("each bad connection closed and counted", T, &refs, || {
        metric("concord_remote_handshakes_refused_total") >= count as u64
    });
    assert!(nodes[0]
        .log_text()
        .contains("inbound connection closed: handshake refused"));
    assert!(all_up(&rt, &refs, &all), "the cluster is unaffected");
}

#[test]
fn bad_configuration_fails_at_start_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("concord-badcfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("bad.toml");
    std::fs::write(&f, "[cluster.failure-detector]\nthreshold = \"high\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(["node", "--config", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cluster.failure-detector.threshold"), "{err}");
}

#[test]
fn cli_reports_an_unreachable_management_api_with_nonzero_exit() {
    let p = free_ports(1)[0];
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_concord"))
        .args(["members", "--management", &format!("http://127.0.0.1:{p}")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the management API"));
}

/// The `THP_enabled` line of a process's `/proc/<pid>/status` (Linux ≥ 5.0: 0 once the
/// process turned transparent huge pages off with `prctl(PR_SET_THP_DISABLE)`).
#[cfg(target_os = "linux")]
fn thp_enabled(node: &Node) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.child.id())).ok()?;
    let line = status.lines().find(|l| l.starts_with("THP_enabled:"))?;
    Some(line.split_whitespace().nth(1)?.to_owned())
}

#[test]
#[cfg(target_os = "linux")]
fn a_node_runs_without_transparent_huge_pages_unless_mimalloc_is_told_otherwise() {
    let _s = serial();
    let plain = Node::start_bound("thp", &[], &[]);
    let Some(flag) = thp_enabled(&plain) else {
        eprintln!(
            "this kernel does not report THP_enabled in /proc/<pid>/status: nothing to check"
        );
        return;
    };
    assert_eq!(
        flag, "0",
        "a node turns transparent huge pages off for itself"
    );
    let allowed = Node::start_bound("thp", &[], &[("MIMALLOC_ALLOW_THP", "1")]);
    assert_eq!(
        thp_enabled(&allowed).as_deref(),
        Some("1"),
        "MIMALLOC_ALLOW_THP=1 leaves the choice to the allocator"
    );
}
