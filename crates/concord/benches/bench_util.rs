//! Shared bits of the macro benchmarks: machine description and JSON result files.
#![allow(dead_code)]

use std::path::PathBuf;

pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, {cpu}")
}

/// Writes `target/bench-results/<name>.json`.
pub fn write_result(name: &str, json: &serde_json::Value) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-results");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{name}.json"));
    let _ = std::fs::write(
        &path,
        serde_json::to_string_pretty(json).unwrap_or_default(),
    );
    println!("result written to {}", path.display());
}

/// Akka's default timings, overriding the fast settings the test helpers start nodes with.
pub const AKKA_DEFAULT_ENV: [(&str, &str); 10] = [
    ("CONCORD__CLUSTER__GOSSIP_INTERVAL", "1s"),
    ("CONCORD__CLUSTER__LEADER_ACTIONS_INTERVAL", "1s"),
    ("CONCORD__CLUSTER__UNREACHABLE_NODES_REAPER_INTERVAL", "1s"),
    ("CONCORD__CLUSTER__PERIODIC_TASKS_INITIAL_DELAY", "1s"),
    ("CONCORD__CLUSTER__SEED_NODE_TIMEOUT", "5s"),
    ("CONCORD__CLUSTER__RETRY_UNSUCCESSFUL_JOIN_AFTER", "10s"),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__HEARTBEAT_INTERVAL",
        "1s",
    ),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__ACCEPTABLE_HEARTBEAT_PAUSE",
        "3s",
    ),
    (
        "CONCORD__CLUSTER__FAILURE_DETECTOR__EXPECTED_RESPONSE_AFTER",
        "1s",
    ),
    ("CONCORD__CLUSTER__EXITING_SHUTDOWN_TIMEOUT", "10s"),
];
