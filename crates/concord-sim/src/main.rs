//! `concord-sim`: randomized fault schedules over many seeds (a soak), or one seed replayed.
//!
//! ```text
//! concord-sim --seeds 10000            # seeds 0..10000
//! concord-sim --seed 42                # replay one seed, printing its faults
//! ```
//!
//! The scale study (convergence times and gossip traffic for 10–2400 nodes) runs as
//! `cargo bench -p concord-sim --bench scale`, which sizes the traffic with the wire codec.

use std::process::ExitCode;

use clap::Parser;
use concord_sim::schedule::{run_seed, RunConfig};

#[derive(Parser)]
#[command(
    name = "concord-sim",
    about = "Deterministic Concord cluster simulator"
)]
struct Args {
    /// Run seeds start..start+seeds.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Replay exactly this seed (prints its fault schedule).
    #[arg(long)]
    seed: Option<u64>,
    /// Cluster size.
    #[arg(long, default_value_t = 5)]
    nodes: u32,
    /// Faults per run.
    #[arg(long, default_value_t = 6)]
    faults: usize,
}

fn main() -> ExitCode {
    let a = Args::parse();
    let cfg = RunConfig {
        nodes: a.nodes,
        faults: a.faults,
        ..RunConfig::default()
    };
    let seeds: Vec<u64> = match a.seed {
        Some(s) => vec![s],
        None => (a.start..a.start + a.seeds).collect(),
    };
    let started = std::time::Instant::now();
    let mut failed = 0;
    for s in &seeds {
        match run_seed(*s, &cfg) {
            Ok(r) => {
                if a.seed.is_some() {
                    for (t, f) in &r.faults {
                        println!("{t:>10} ms  {f:?}");
                    }
                    println!(
                        "seed {s}: ok, {} nodes running at the end",
                        r.running_at_end
                    );
                }
            }
            Err(e) => {
                failed += 1;
                eprintln!("FAILED {e}");
            }
        }
    }
    println!(
        "{} passed, {} failed ({} seeds, {} nodes, {} faults each, {:.1}s)",
        seeds.len() - failed,
        failed,
        seeds.len(),
        cfg.nodes,
        cfg.faults,
        started.elapsed().as_secs_f64()
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
