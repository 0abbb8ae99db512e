//! Replays one seed and prints every node's domain events (debugging aid).
use concord_sim::schedule::{run_seed_with, RunConfig};

fn main() {
    let seed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (r, sim) = run_seed_with(seed, &RunConfig::default(), true);
    println!(
        "{:?}",
        r.as_ref()
            .map(|x| &x.faults)
            .map_err(|e| e.lines().next().unwrap_or("").to_string())
    );
    for (a, evs) in &sim.events {
        println!(
            "== {a} running={} reason={:?}",
            sim.nodes[a].is_running(),
            sim.nodes[a].core().shutdown_reason()
        );
        for e in evs {
            let m = e
                .member()
                .map(|m| format!("{}:{}", m.address().host, m.status))
                .unwrap_or_default();
            println!("   {} {}", e.type_name(), m);
        }
    }
}
