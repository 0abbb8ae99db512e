//! `concord node --sample` as real processes on loopback: the sample singleton runs once
//! (activation intervals from every node's log, against the machine's one wall clock: any
//! overlap fails) across a graceful leave of its node, a crash, and a partition that cuts
//! it off from the majority, and the sample counter
//! is replicated with majority/all consistency and survives a full cluster restart from
//! its durable store. The sample's routes obey the management API's access rules (bearer
//! token for writes).

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{all_up, runtime, serial, wait_until, Node};
use nix::sys::signal::Signal;

const SYSTEM: &str = "sample";

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

const ENV: &[(&str, &str)] = &[
    ("CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "2s"),
    ("CONCORD__SINGLETON__REMOVAL_MARGIN", "2s"),
    ("CONCORD__TESTKIT__FAULT_INJECTION", "true"),
];

fn data_dir(dir: &std::path::Path, i: usize) -> String {
    dir.join(format!("node-{i}")).display().to_string()
}

/// Node `i`, first start: ports 0, read back from the node (no seeds: it joins itself).
fn start_new(i: usize, seeds: &[u16], dir: &std::path::Path) -> Node {
    let data = data_dir(dir, i);
    Node::start_bound_with_args(
        SYSTEM,
        seeds,
        ENV,
        &["--sample", "--data-dir", data.as_str()],
    )
}

/// Node `i` again, on the ports it had.
fn restart(i: usize, port: u16, mgmt: u16, seeds: &[u16], dir: &std::path::Path) -> Node {
    let data = data_dir(dir, i);
    Node::start_with_args(
        "127.0.0.1",
        SYSTEM,
        port,
        mgmt,
        seeds,
        ENV,
        &["--sample", "--data-dir", data.as_str()],
    )
}

/// Sends `req`; the status and JSON body (`None` if no answer or not JSON).
fn send(
    rt: &tokio::runtime::Runtime,
    req: reqwest::RequestBuilder,
) -> Option<(u16, serde_json::Value)> {
    rt.block_on(async {
        let r = req.timeout(Duration::from_secs(5)).send().await.ok()?;
        let status = r.status().as_u16();
        Some((status, r.json().await.ok()?))
    })
}

fn get_json(rt: &tokio::runtime::Runtime, url: &str) -> Option<(u16, serde_json::Value)> {
    send(rt, reqwest::Client::new().get(url))
}

fn post_form(
    rt: &tokio::runtime::Runtime,
    url: &str,
    form: &[(&str, &str)],
) -> Option<(u16, serde_json::Value)> {
    send(rt, reqwest::Client::new().post(url).form(form))
}

/// (node, incarnation) the sample singleton reports through `n`'s proxy.
fn singleton_at(rt: &tokio::runtime::Runtime, n: &Node) -> Option<(String, u64)> {
    let (status, v) = get_json(rt, &format!("{}/sample/singleton", n.management_url()))?;
    if status != 200 {
        return None;
    }
    Some((v["node"].as_str()?.to_string(), v["incarnation"].as_u64()?))
}

/// Activation intervals from the logs: (node port, incarnation, start, end).
fn intervals(nodes: &[&Node], killed: &[(u16, u64)]) -> Vec<(u16, u64, u64, u64)> {
    let mut v = Vec::new();
    for n in nodes {
        let text = n.log_text();
        let field = |line: &str, name: &str| -> Option<u64> {
            let i = line.find(&format!("{name}="))?;
            line[i + name.len() + 1..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        };
        for line in text
            .lines()
            .filter(|l| l.contains("sample singleton started"))
        {
            let (Some(inc), Some(start)) = (field(line, "incarnation"), field(line, "at_ms"))
            else {
                continue;
            };
            let end = text
                .lines()
                .filter(|l| l.contains("sample singleton stopped"))
                .find(|l| field(l, "incarnation") == Some(inc))
                .and_then(|l| field(l, "at_ms"))
                .or_else(|| killed.iter().find(|(p, _)| *p == n.port).map(|(_, t)| *t))
                .unwrap_or(u64::MAX);
            v.push((n.port, inc, start, end));
        }
    }
    v.sort_by_key(|x| x.2);
    v
}

fn check_no_overlap(v: &[(u16, u64, u64, u64)]) {
    for w in v.windows(2) {
        assert!(
            w[0].3 <= w[1].2,
            "two sample singletons at once: {:?} and {:?}",
            w[0],
            w[1]
        );
    }
}

#[test]
fn sample_singleton_and_counter_across_leave_crash_and_full_restart() {
    let _g = serial();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let first = start_new(0, &[], dir.path());
    wait_until(
        "the first node Up",
        Duration::from_secs(30),
        &[&first],
        || all_up(&rt, &[&first], &[first.address()]),
    );
    let first_port = first.port;
    let mut nodes: Vec<Node> = std::iter::once(first)
        .chain((1..5).map(|i| start_new(i, &[first_port], dir.path())))
        .collect();
    let remoting: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let mgmt: Vec<u16> = nodes.iter().map(|n| n.management_port).collect();
    let seeds = [remoting[0], remoting[1]];
    let addrs: Vec<String> = nodes.iter().map(Node::address).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    wait_until("5 nodes Up", Duration::from_secs(60), &refs, || {
        all_up(&rt, &refs, &addrs)
    });
    drop(refs);

    // Pub-sub: once every node's chat subscription is known on node 0, a message
    // published there reaches the subscriber on every node.
    let mut attempt = 0;
    let mut delivered = String::new();
    wait_until(
        "a chat message published to all 5 nodes",
        Duration::from_secs(60),
        &[],
        || {
            attempt += 1;
            let text = format!("hello-{attempt}");
            let url = format!("{}/sample/chat", nodes[0].management_url());
            let sent = post_form(&rt, &url, &[("text", &text)]);
            if sent.is_some_and(|(s, v)| s == 200 && v["nodes"].as_u64() == Some(5)) {
                delivered = text;
                return true;
            }
            false
        },
    );
    wait_until(
        "every node received the chat message",
        Duration::from_secs(30),
        &[],
        || {
            nodes.iter().all(|n| {
                get_json(&rt, &format!("{}/sample/chat", n.management_url())).is_some_and(
                    |(_, v)| {
                        v["messages"].as_array().is_some_and(|m| {
                            m.iter().filter(|x| x["text"] == delivered.as_str()).count() == 1
                        })
                    },
                )
            })
        },
    );
    // Cluster metrics: every node knows all five members' load.
    wait_until(
        "every node has five members' metrics",
        Duration::from_secs(60),
        &[],
        || {
            nodes.iter().all(|n| {
                get_json(&rt, &format!("{}/cluster/metrics", n.management_url())).is_some_and(
                    |(_, v)| {
                        v["nodes"].as_array().is_some_and(|a| {
                            a.len() == 5
                                && a.iter().all(|e| {
                                    e["metrics"]["memory-rss"]["value"].as_f64() > Some(0.0)
                                })
                        })
                    },
                )
            })
        },
    );

    // One singleton, the same answer from every node.
    let mut first = None;
    wait_until(
        "every proxy finds the singleton",
        Duration::from_secs(30),
        &[],
        || {
            let answers: Vec<_> = nodes.iter().map(|n| singleton_at(&rt, n)).collect();
            let same = answers.iter().all(|a| a.is_some() && *a == answers[0]);
            if same {
                first = answers[0].clone();
            }
            same
        },
    );
    let (at, inc) = first.unwrap();

    // The counter: a majority write on one node, an all read on another.
    let url = |n: &Node| format!("{}/sample/ddata/counter/visits", n.management_url());
    let (s, v) = post_form(
        &rt,
        &url(&nodes[1]),
        &[("delta", "7"), ("consistency", "majority")],
    )
    .unwrap();
    assert_eq!((s, v["value"].as_i64()), (200, Some(7)), "{v}");
    let (s, v) = post_form(
        &rt,
        &url(&nodes[2]),
        &[("delta", "-2"), ("consistency", "all")],
    )
    .unwrap();
    assert_eq!((s, v["value"].as_i64()), (200, Some(5)), "{v}");
    let (s, v) = get_json(&rt, &format!("{}?consistency=all", url(&nodes[4]))).unwrap();
    assert_eq!((s, v["value"].as_i64()), (200, Some(5)), "{v}");
    let (s, _) = get_json(
        &rt,
        &format!(
            "{}/sample/ddata/counter/none?consistency=majority",
            nodes[0].management_url()
        ),
    )
    .unwrap();
    assert_eq!(s, 404);
    let (s, _) = post_form(&rt, &url(&nodes[0]), &[("delta", "x")]).unwrap();
    assert_eq!(s, 400);

    // Graceful leave of the singleton's node: it moves, after the old one stopped.
    let holder = nodes
        .iter()
        .position(|n| n.address() == at)
        .expect("a member runs it");
    nodes[holder].signal(Signal::SIGTERM);
    assert_eq!(nodes[holder].wait_exit(Duration::from_secs(30)), Some(0));
    let rest: Vec<usize> = (0..5).filter(|i| *i != holder).collect();
    let mut moved = None;
    wait_until(
        "the singleton moves after a leave",
        Duration::from_secs(30),
        &[],
        || {
            moved = singleton_at(&rt, &nodes[rest[0]]).filter(|(a, i)| *a != at && *i != inc);
            moved.is_some()
        },
    );
    let (at2, _) = moved.unwrap();

    // Crash of the new holder: it moves again only after downing and the removal margin.
    let holder2 = nodes.iter().position(|n| n.address() == at2).unwrap();
    nodes[holder2].kill9();
    let killed = vec![(nodes[holder2].port, wall_ms())];
    let live: Vec<usize> = rest.iter().copied().filter(|i| *i != holder2).collect();
    wait_until(
        "the singleton moves after a crash",
        Duration::from_secs(60),
        &[],
        || singleton_at(&rt, &nodes[live[0]]).is_some_and(|(a, _)| a != at2 && a != at),
    );
    // A partition cuts the holder off from the two others: the majority's resolver downs
    // it, it downs itself and stops, and only then does the singleton start on the majority.
    let mut third = None;
    wait_until(
        "the third holder is known",
        Duration::from_secs(30),
        &[],
        || {
            third = singleton_at(&rt, &nodes[live[0]]);
            third.is_some()
        },
    );
    let (at3, _) = third.unwrap();
    let holder3 = live
        .iter()
        .copied()
        .find(|i| nodes[*i].address() == at3)
        .unwrap();
    let majority: Vec<usize> = live.iter().copied().filter(|i| *i != holder3).collect();
    let http = reqwest::Client::new();
    for &m in &majority {
        for (from, to) in [(holder3, m), (m, holder3)] {
            let url = format!(
                "{}/testkit/faults/{}",
                nodes[from].management_url(),
                nodes[to].address()
            );
            let r = rt
                .block_on(http.put(url).form(&[("blackhole", "both")]).send())
                .unwrap();
            assert_eq!(r.status(), 200);
        }
    }
    wait_until(
        "the singleton moves to the majority side",
        Duration::from_secs(60),
        &[],
        || {
            singleton_at(&rt, &nodes[majority[0]])
                .is_some_and(|(a, _)| a != at3 && a != at2 && a != at)
        },
    );
    assert_eq!(
        nodes[holder3].wait_exit(Duration::from_secs(30)),
        Some(0),
        "the cut-off node downed itself"
    );
    let v = intervals(&nodes.iter().collect::<Vec<_>>(), &killed);
    assert!(v.len() >= 4, "four activations: {v:?}");
    check_no_overlap(&v);

    // Full cluster restart: the durable counter is back on every node.
    for i in &majority {
        nodes[*i].signal(Signal::SIGTERM);
    }
    for i in &majority {
        nodes[*i].wait_exit(Duration::from_secs(30));
    }
    let restarted: Vec<Node> = (0..5)
        .map(|i| restart(i, remoting[i], mgmt[i], &seeds, dir.path()))
        .collect();
    let refs: Vec<&Node> = restarted.iter().collect();
    wait_until(
        "the restarted cluster is Up",
        Duration::from_secs(60),
        &refs,
        || all_up(&rt, &refs, &addrs),
    );
    for n in &restarted {
        let (s, v) = get_json(&rt, &format!("{}?consistency=local", url(n))).unwrap();
        assert_eq!(
            (s, v["value"].as_i64()),
            (200, Some(5)),
            "{}: {v}",
            n.address()
        );
    }
    drop(nodes);
}

/// The status `req` answered (`None` if no answer).
fn status(rt: &tokio::runtime::Runtime, req: reqwest::RequestBuilder) -> Option<u16> {
    rt.block_on(async {
        let r = req.timeout(Duration::from_secs(5)).send().await.ok()?;
        Some(r.status().as_u16())
    })
}

/// The sample's routes on a node with a bearer token: a write without the token is refused
/// and changes nothing, one with it counts, reads need no token; the sample singleton
/// answers through its proxy.
#[test]
fn sample_routes_answer_and_obey_the_management_access_rules() {
    let _g = serial();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let data = data_dir(dir.path(), 0);
    let node = Node::start_bound_with_args(
        "sample-routes",
        &[],
        &[("CONCORD__MANAGEMENT__BEARER_TOKEN", "s3cret")],
        &["--sample", "--data-dir", data.as_str()],
    );
    let url = format!("{}/sample/ddata/counter/c", node.management_url());
    let http = reqwest::Client::new();
    assert_eq!(
        status(&rt, http.post(&url).form(&[("delta", "3")])),
        Some(401)
    );
    assert_eq!(status(&rt, http.get(&url)), Some(404));
    let (s, v) = send(
        &rt,
        http.post(&url)
            .bearer_auth("s3cret")
            .form(&[("delta", "3"), ("consistency", "local")]),
    )
    .unwrap();
    assert_eq!(s, 200, "{v}");
    let (s, v) = get_json(&rt, &url).unwrap();
    assert_eq!((s, v["value"].as_i64()), (200, Some(3)), "{v}");
    let mut answer = None;
    wait_until(
        "the sample singleton answers",
        Duration::from_secs(30),
        &[&node],
        || {
            answer = singleton_at(&rt, &node);
            answer.is_some()
        },
    );
    assert_eq!(answer.unwrap().0, node.address());
}
