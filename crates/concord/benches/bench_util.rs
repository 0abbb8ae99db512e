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
