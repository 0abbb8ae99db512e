//! Reliable delivery between real `concord node --sample` processes on the built-in
//! replicated journal: values are appended to 50 sample logs through four of five nodes
//! (each node's reliable producer stores them in its durable queue before answering 202,
//! then delivers them to the event-sourced logs); a node hosting logs is SIGKILLed and
//! restarted with its data, then a node whose producer is in use — its queue holding
//! values not yet delivered — likewise. Afterwards every accepted value is in its log
//! exactly once, in its sender's order (a value whose request failed may be there too,
//! once).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::sample_cluster::{kill_and_wait_removed, SampleCluster};
use common::{all_up, runtime, serial, wait_until, Node};

const SYS: &str = "delivery-proc";
const LOGS: usize = 50;

/// Per (log, sender) the values sent and those accepted (202), in send order.
#[derive(Default)]
struct Record {
    sent: BTreeMap<(usize, usize), Vec<u64>>,
    acked: BTreeMap<(usize, usize), Vec<u64>>,
}

/// Appends `"{sender}-{seq}"` to every log in turn through the node at `port` until
/// `stop` (a request that fails is not retried: its value may or may not be stored).
fn sender(
    sender: usize,
    port: Arc<Mutex<u16>>,
    record: Arc<Mutex<Record>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let rt = runtime();
        let http = reqwest::Client::new();
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            for l in 0..LOGS {
                let p = *port.lock().unwrap();
                record
                    .lock()
                    .unwrap()
                    .sent
                    .entry((l, sender))
                    .or_default()
                    .push(seq);
                let ok = rt.block_on(async {
                    http.post(format!("http://127.0.0.1:{p}/sample/log/r{l}"))
                        .form(&[("value", format!("{sender}-{seq}"))])
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await
                        .is_ok_and(|r| r.status() == 202)
                });
                if ok {
                    record
                        .lock()
                        .unwrap()
                        .acked
                        .entry((l, sender))
                        .or_default()
                        .push(seq);
                } else {
                    std::thread::sleep(Duration::from_millis(50));
                }
                seq += 1;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

fn read_log(rt: &tokio::runtime::Runtime, port: u16, l: usize) -> Option<Vec<String>> {
    rt.block_on(async {
        let r = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/sample/log/r{l}"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        let v: serde_json::Value = r.json().await.ok()?;
        Some(
            v["values"]
                .as_array()?
                .iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect(),
        )
    })
}

fn log_regions(rt: &tokio::runtime::Runtime, via: &Node) -> BTreeMap<String, usize> {
    rt.block_on(via.client().shards("log"))
        .map(|r| {
            r.regions
                .into_iter()
                .map(|x| (x.shard_region, x.shards.len()))
                .collect()
        })
        .unwrap_or_default()
}

/// What is wrong with log `l` (values from each sender in order, once, sent, and every
/// accepted one there), or `None`.
fn check(l: usize, values: &[String], record: &Record) -> Option<String> {
    let mut by_sender: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for v in values {
        let Some((s, n)) = v.split_once('-') else {
            return Some(format!("r{l} holds {v}, never sent"));
        };
        let (Ok(s), Ok(n)) = (s.parse::<usize>(), n.parse::<u64>()) else {
            return Some(format!("r{l} holds {v}, never sent"));
        };
        by_sender.entry(s).or_default().push(n);
    }
    for (s, got) in &by_sender {
        if got.windows(2).any(|w| w[0] >= w[1]) {
            return Some(format!(
                "r{l}: sender {s}'s values out of order or twice: {got:?}"
            ));
        }
        let sent = record.sent.get(&(l, *s));
        if let Some(n) = got.iter().find(|n| !sent.is_some_and(|x| x.contains(n))) {
            return Some(format!("r{l} holds {s}-{n}, never sent"));
        }
    }
    for ((ll, s), acked) in &record.acked {
        if *ll != l {
            continue;
        }
        let got = by_sender.get(s).cloned().unwrap_or_default();
        if let Some(n) = acked.iter().find(|n| got.binary_search(n).is_err()) {
            return Some(format!("r{l}: accepted {s}-{n} is missing"));
        }
    }
    None
}

#[test]
fn sigkilled_consumer_and_producer_nodes_lose_no_accepted_value_and_apply_none_twice() {
    let _serial = serial();
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let c = SampleCluster {
        system: SYS,
        env: vec![
            (
                "CONCORD__CLUSTER__SPLIT_BRAIN_RESOLVER__STABLE_AFTER".into(),
                "2s".into(),
            ),
            ("CONCORD__SHARDING__REBALANCE_INTERVAL".into(), "1s".into()),
            ("CONCORD__SHARDING__NUMBER_OF_SHARDS".into(), "60".into()),
            (
                "CONCORD__RELIABLE_DELIVERY__RESEND_INTERVAL_MIN".into(),
                "500ms".into(),
            ),
            (
                "CONCORD__RELIABLE_DELIVERY__RESEND_INTERVAL_MAX".into(),
                "3s".into(),
            ),
        ],
        dir: dir.path().to_path_buf(),
    };
    let n1 = c.start(1, &[]);
    let seeds = [n1.port];
    let mut nodes = vec![n1];
    for i in 2..=5 {
        nodes.push(c.start(i, &seeds));
    }
    let addrs: Vec<String> = nodes.iter().map(Node::address).collect();
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        wait_until("5 Up", Duration::from_secs(90), &refs, || {
            all_up(&rt, &refs, &addrs)
        });
    }
    // Senders through nodes 1 to 4; node 5 only hosts logs.
    let record = Arc::new(Mutex::new(Record::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let ports: Vec<Arc<Mutex<u16>>> = nodes[..4]
        .iter()
        .map(|n| Arc::new(Mutex::new(n.management_port)))
        .collect();
    let senders: Vec<_> = (0..4)
        .map(|s| sender(s, ports[s].clone(), record.clone(), stop.clone()))
        .collect();
    let accepted =
        |r: &Arc<Mutex<Record>>| -> usize { r.lock().unwrap().acked.values().map(Vec::len).sum() };
    // The consumer's node (node 5, hosting logs), then a producer's node (node 4).
    for victim in [4usize, 3] {
        let before = accepted(&record);
        wait_until(
            "values accepted",
            Duration::from_secs(90),
            &[&nodes[0]],
            || accepted(&record) > before + 200,
        );
        let addr = nodes[victim].address();
        wait_until(
            "logs on the victim",
            Duration::from_secs(60),
            &[&nodes[0]],
            || {
                log_regions(&rt, &nodes[0])
                    .get(&addr)
                    .is_some_and(|n| *n >= 2)
            },
        );
        kill_and_wait_removed(&rt, &mut nodes, victim, &addrs);
        c.restart_and_wait_up(&rt, &mut nodes, victim, &addrs, &seeds);
    }
    // The restarted producer's node accepts again (its producer recovered its queue).
    let before = record
        .lock()
        .unwrap()
        .acked
        .iter()
        .filter(|((_, s), _)| *s == 3)
        .map(|(_, v)| v.len())
        .sum::<usize>();
    wait_until(
        "the restarted producer accepts",
        Duration::from_secs(90),
        &[&nodes[3]],
        || {
            record
                .lock()
                .unwrap()
                .acked
                .iter()
                .filter(|((_, s), _)| *s == 3)
                .map(|(_, v)| v.len())
                .sum::<usize>()
                > before + 50
        },
    );
    stop.store(true, Ordering::Relaxed);
    for s in senders {
        s.join().unwrap();
    }
    let record = record.lock().unwrap();
    let total: usize = record.acked.values().map(Vec::len).sum();
    assert!(total > 500, "only {total} values accepted");
    // Every log, read through node 1 until complete (delivery goes on after the load).
    for l in 0..LOGS {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let problem = match read_log(&rt, nodes[0].management_port, l) {
                Some(values) => check(l, &values, &record),
                None => Some("no answer".into()),
            };
            let Some(p) = problem else { break };
            // Order and duplicates fail at once; a missing value may be on its way.
            if !(p.contains("missing") || p == "no answer") || std::time::Instant::now() > deadline
            {
                for n in &nodes {
                    eprintln!("---- log of {} ----\n{}", n.address(), n.log_text());
                }
                panic!("{p}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    eprintln!("{total} values accepted through four nodes, all delivered once, in order");
}
