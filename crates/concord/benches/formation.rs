//! Start → all members Up on all nodes, for real `concord node` processes on loopback:
//! 5 and 25 nodes, with default timings and with gossip-interval 100 ms.
//! Run: `cargo bench -p concord --bench formation`.

mod bench_util;
#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use std::time::{Duration, Instant};

use common::*;

fn run(n: usize, env: &[(&str, &str)]) -> Option<f64> {
    let rt = runtime();
    let ports = free_ports(2 * n);
    let seeds = [ports[0], ports[2]];
    let start = Instant::now();
    let nodes: Vec<Node> = (0..n)
        .map(|i| Node::start("bench", ports[2 * i], ports[2 * i + 1], &seeds, env))
        .collect();
    let all: Vec<String> = nodes.iter().map(Node::address).collect();
    let refs: Vec<&Node> = nodes.iter().collect();
    while start.elapsed() < Duration::from_secs(120) {
        if all_up(&rt, &refs, &all) {
            return Some(start.elapsed().as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn main() {
    println!("formation on {}", bench_util::machine());
    let mut rows = Vec::new();
    for n in [5usize, 25] {
        for (label, interval) in [
            ("default timings (gossip 1s)", "1s"),
            ("gossip-interval 100ms", "100ms"),
        ] {
            let mut env: Vec<(&str, &str)> = AKKA_DEFAULT_ENV.to_vec();
            env[0].1 = interval;
            if interval == "100ms" {
                env[1].1 = "100ms";
            }
            let mut samples = Vec::new();
            for _ in 0..3 {
                match run(n, &env) {
                    Some(s) => samples.push(s),
                    None => println!("  {n} nodes, {label}: did not converge within 120 s"),
                }
            }
            samples.sort_by(|a, b| a.total_cmp(b));
            if let Some(med) = samples.get(samples.len() / 2) {
                println!("{n:>3} nodes, {label:<28}: start → all Up on all nodes, median {med:.2} s of {:?}", samples.iter().map(|s| format!("{s:.2}")).collect::<Vec<_>>());
                rows.push(serde_json::json!({"nodes": n, "settings": label, "median_s": med, "samples_s": samples}));
            }
        }
    }
    bench_util::write_result(
        "formation",
        &serde_json::json!({"machine": bench_util::machine(), "rows": rows}),
    );
}
