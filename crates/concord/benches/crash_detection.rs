//! Crash → Unreachable on all other nodes, default failure-detector settings
//! (heartbeat 1 s, threshold 8, acceptable-heartbeat-pause 3 s; Akka documents about 5.5 s).
//! 5 real processes; 10 s of warm-up so the detector has a history; SIGKILL one; time until
//! every survivor's `/cluster/members` lists it as unreachable. Three runs.
//! Run: `cargo bench -p concord --bench crash_detection`.

mod bench_util;
#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::time::{Duration, Instant};

use common::*;

fn run() -> Option<f64> {
    let rt = runtime();
    let n = 5;
    let ports = free_ports(2 * n);
    let seeds = [ports[0], ports[2]];
    let mut nodes: Vec<Node> = (0..n)
        .map(|i| {
            Node::start(
                "crash",
                ports[2 * i],
                ports[2 * i + 1],
                &seeds,
                &AKKA_DEFAULT_ENV,
            )
        })
        .collect();
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    {
        let refs: Vec<&Node> = nodes.iter().collect();
        let t = Instant::now();
        while !all_up(&rt, &refs, &all) {
            if t.elapsed() > Duration::from_secs(60) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    std::thread::sleep(Duration::from_secs(10));
    let victim = all[4].clone();
    let killed = Instant::now();
    nodes[4].kill9();
    let refs: Vec<&Node> = nodes[..4].iter().collect();
    while killed.elapsed() < Duration::from_secs(60) {
        let all_see = refs.iter().all(|n| {
            members(&rt, n).is_some_and(|m| m.unreachable.iter().any(|u| u.node == victim))
        });
        if all_see {
            return Some(killed.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn main() {
    println!("crash_detection on {}", bench_util::machine());
    let mut samples = Vec::new();
    for i in 0..3 {
        match run() {
            Some(s) => {
                println!(
                    "  run {}: crash → unreachable on all 4 survivors in {s:.2} s",
                    i + 1
                );
                samples.push(s);
            }
            None => println!("  run {}: not detected within 60 s", i + 1),
        }
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    if let Some(med) = samples.get(samples.len() / 2) {
        println!("median {med:.2} s (Akka documents about 5.5 s with these settings)");
    }
    bench_util::write_result(
        "crash_detection",
        &serde_json::json!({"machine": bench_util::machine(), "samples_s": samples}),
    );
}
