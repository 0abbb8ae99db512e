//! The key-value store between real `concord node --kv-port 0` processes on loopback: five
//! nodes take 10,000 keys (N = 3, W = 2); a node is SIGKILLed and another joins while a
//! reader reads random keys with R = 2 through the running nodes — every read finds its
//! value throughout — and once transfers finish every key has exactly three replicas
//! again (30,000 copies, none misplaced) and reads back.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{all_up, runtime, serial, wait_until, Node};

const KEYS: usize = 10_000;
const ENV: &[(&str, &str)] = &[("CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER", "2s")];

fn start(system: &str, seeds: &[u16], dir: &std::path::Path, i: usize) -> Node {
    let data = dir.join(format!("node-{i}")).display().to_string();
    Node::start_bound_with_args(
        system,
        seeds,
        ENV,
        &["--kv-port", "0", "--data-dir", data.as_str()],
    )
}

fn value(i: usize) -> String {
    format!("value-{i}")
}

/// Reads `key` with R = 2 through `port`: its value, or why not.
async fn read(http: &reqwest::Client, port: u16, i: usize) -> Result<String, String> {
    let r = http
        .get(format!("http://127.0.0.1:{port}/kv/key-{i}?r=2"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let text = r.text().await.map_err(|e| e.to_string())?;
    if status == 200 {
        Ok(text)
    } else {
        Err(format!("{status}: {text}"))
    }
}

fn status(rt: &tokio::runtime::Runtime, port: u16) -> Option<serde_json::Value> {
    rt.block_on(async {
        reqwest::get(format!("http://127.0.0.1:{port}/kv-status"))
            .await
            .ok()?
            .json()
            .await
            .ok()
    })
}

#[test]
fn ten_thousand_keys_stay_readable_through_a_kill_and_a_join_and_regain_three_replicas() {
    let _g = serial();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let system = "kvproc";
    let first = start(system, &[], dir.path(), 0);
    let seed = first.port;
    let mut nodes = vec![first];
    for i in 1..5 {
        nodes.push(start(system, &[seed], dir.path(), i));
    }
    let addresses = |nodes: &[Node]| nodes.iter().map(Node::address).collect::<Vec<_>>();
    let expected = addresses(&nodes);
    wait_until("five members Up", Duration::from_secs(60), &[], || {
        all_up(&rt, &nodes.iter().collect::<Vec<_>>(), &expected)
    });
    let ports: Vec<u16> = nodes
        .iter()
        .map(|n| n.kv_port().expect("kv port"))
        .collect();

    // 10,000 keys, written through every node, 32 at a time.
    rt.block_on(async {
        let http = reqwest::Client::new();
        let mut tasks = tokio::task::JoinSet::new();
        for w in 0..32 {
            let (http, ports) = (http.clone(), ports.clone());
            tasks.spawn(async move {
                for i in (w..KEYS).step_by(32) {
                    let port = ports[i % ports.len()];
                    let r = http
                        .put(format!("http://127.0.0.1:{port}/kv/key-{i}?w=2"))
                        .body(value(i))
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await
                        .expect("the node answers");
                    assert_eq!(
                        r.status(),
                        204,
                        "key-{i}: {}",
                        r.text().await.unwrap_or_default()
                    );
                }
            });
        }
        while let Some(r) = tasks.join_next().await {
            r.expect("writer");
        }
    });

    // A reader reads random keys with R = 2 through the running nodes the whole time.
    let live = Arc::new(Mutex::new(ports.clone()));
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (live, stop, reads) = (live.clone(), stop.clone(), reads.clone());
        std::thread::spawn(move || {
            let rt = runtime();
            let http = reqwest::Client::new();
            let mut failures = Vec::new();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                i = (i * 7919 + 13) % KEYS;
                let port = {
                    let l = live.lock().unwrap();
                    l[i % l.len()]
                };
                match rt.block_on(read(&http, port, i)) {
                    Ok(v) if v == value(i) => {}
                    Ok(v) => failures.push(format!("key-{i} read {v}")),
                    Err(e) => failures.push(format!("key-{i} via {port}: {e}")),
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
            failures
        })
    };
    wait_until(
        "the reader reading before the kill",
        Duration::from_secs(30),
        &[],
        || reads.load(Ordering::Relaxed) >= 20,
    );

    // SIGKILL node 2: the reader stops using it at once; the split brain resolver downs it.
    live.lock().unwrap().retain(|p| *p != ports[2]);
    let mut killed = nodes.remove(2);
    killed.kill9();
    let survivors = addresses(&nodes);
    wait_until(
        "the killed node removed",
        Duration::from_secs(60),
        &[],
        || all_up(&rt, &nodes.iter().collect::<Vec<_>>(), &survivors),
    );
    // A new node joins.
    nodes.push(start(system, &[seed], dir.path(), 5));
    let expected = addresses(&nodes);
    wait_until("the new node Up", Duration::from_secs(60), &[], || {
        all_up(&rt, &nodes.iter().collect::<Vec<_>>(), &expected)
    });
    let new_port = nodes[4].kv_port().expect("kv port");
    live.lock().unwrap().push(new_port);

    // Transfers finish: every key has exactly three replicas, none misplaced.
    let ports: Vec<u16> = nodes.iter().map(|n| n.kv_port().unwrap()).collect();
    let settled = |rt: &tokio::runtime::Runtime| {
        let s: Vec<serde_json::Value> = ports.iter().filter_map(|p| status(rt, *p)).collect();
        s.len() == ports.len()
            && s.iter()
                .all(|x| x["misplacedKeys"] == 0 && x["pendingSegments"] == 0)
            && s.iter()
                .map(|x| x["keys"].as_u64().unwrap_or(0))
                .sum::<u64>()
                == 3 * KEYS as u64
    };
    let all: Vec<&Node> = nodes.iter().collect();
    wait_until(
        "three replicas of every key",
        Duration::from_secs(120),
        &all,
        || settled(&rt),
    );
    stop.store(true, Ordering::Relaxed);
    let failures = reader.join().unwrap();
    let done = reads.load(Ordering::Relaxed);
    assert!(done > 100, "the reader read throughout ({done} reads)");
    assert!(
        failures.is_empty(),
        "{} of {done} reads failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    let new_keys = status(&rt, new_port).unwrap()["keys"].as_u64().unwrap();
    assert!(
        new_keys > 1_000,
        "the new node took its share ({new_keys} keys)"
    );

    // Every key reads back with R = 2.
    rt.block_on(async {
        let http = reqwest::Client::new();
        for i in 0..KEYS {
            let port = ports[i % ports.len()];
            assert_eq!(
                read(&http, port, i).await.as_deref(),
                Ok(value(i).as_str()),
                "key-{i}"
            );
        }
    });
}
