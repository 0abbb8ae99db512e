//! `concord-sim`: randomized fault schedules over many seeds (a soak), or one seed replayed.
//!
//! ```text
//! concord-sim --seeds 10000            # seeds 0..10000
//! concord-sim --seed 42                # replay one seed, printing its faults
//! ```

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
    /// Run the scale study for these cluster sizes instead (e.g. 10,100,1000,2400).
    #[arg(long, value_delimiter = ',')]
    scale: Option<Vec<u32>>,
}

fn main() -> ExitCode {
    let a = Args::parse();
    if let Some(sizes) = &a.scale {
        println!(
            "{:>6} {:>10} {:>8} {:>10} {:>14} {:>14} {:>12} {:>14} {:>8}",
            "nodes",
            "join ms",
            "rounds",
            "leave ms",
            "crash→unreach",
            "crash→removed",
            "gossip B/s",
            "gossip msg/s",
            "wall s"
        );
        for n in sizes {
            let r = concord_sim::scale::study(*n, 1);
            let f = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_else(|| "-".into());
            println!(
                "{:>6} {:>10} {:>8.1} {:>10} {:>14} {:>14} {:>12.0} {:>14.2} {:>8.1}",
                r.nodes,
                f(r.join_ms),
                r.join_ms.unwrap_or(0) as f64 / 1000.0,
                f(r.leave_ms),
                f(r.crash_unreachable_ms),
                f(r.crash_removed_ms),
                r.gossip_bytes_per_node_per_s,
                r.gossip_msgs_per_node_per_s,
                r.wall_s
            );
        }
        return ExitCode::SUCCESS;
    }
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
