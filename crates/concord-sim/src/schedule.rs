//! Randomized fault schedules from a seed: partitions, heals, crashes, restarts with a new
//! uid, pauses. Each run checks the invariants after every step and at the end; a failure
//! reports the seed and the command that replays it.

use std::collections::BTreeSet;

use concord_core::settings::ClusterSettings;
use concord_core::split_brain_resolver::{DowningStrategy, SbrSettings};
use concord_core::Address;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::invariants::Checker;
use crate::network::{NetworkConfig, Partitions};
use crate::sim::Simulation;

/// One fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Split the nodes into two groups.
    Partition(BTreeSet<Address>),
    /// Remove all partitions.
    Heal,
    /// Kill a node.
    Crash(Address),
    /// Start a new incarnation at a crashed or shut-down node's address.
    Restart(Address),
    /// Stop a node for a while, ms.
    Pause(Address, u64),
}

/// Parameters of a randomized run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Cluster size.
    pub nodes: u32,
    /// Number of faults.
    pub faults: usize,
    /// Virtual time between faults, ms (min, max).
    pub gap_ms: (u64, u64),
    /// Quiet time after the last heal, ms.
    pub quiet_ms: u64,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            nodes: 5,
            faults: 6,
            gap_ms: (500, 6000),
            quiet_ms: 40_000,
        }
    }
}

/// Settings used by randomized runs: fast timings, keep-majority with stable-after 2 s.
pub fn sim_settings() -> ClusterSettings {
    let mut s = ClusterSettings::fast();
    s.downing = Some(SbrSettings {
        strategy: DowningStrategy::KeepMajority { role: None },
        stable_after_ms: 2000,
        down_all_when_unstable_ms: Some(4000),
    });
    s
}

/// The outcome of one seed.
#[derive(Debug)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Faults applied, with their virtual times.
    pub faults: Vec<(u64, Fault)>,
    /// Nodes running at the end.
    pub running_at_end: usize,
}

/// The command that replays `seed`.
pub fn replay_command(seed: u64, cfg: &RunConfig) -> String {
    format!(
        "cargo run --release -p concord-sim -- --seed {seed} --nodes {} --faults {}",
        cfg.nodes, cfg.faults
    )
}

/// Runs one randomized schedule; `Err` names the violated invariant and how to replay.
pub fn run_seed(seed: u64, cfg: &RunConfig) -> Result<RunReport, String> {
    run_seed_with(seed, cfg, false).0
}

/// Like [`run_seed`], optionally recording every node's events; returns the simulation too.
pub fn run_seed_with(
    seed: u64,
    cfg: &RunConfig,
    record: bool,
) -> (Result<RunReport, String>, Simulation) {
    let net = NetworkConfig {
        min_delay_ms: 1,
        max_delay_ms: 20,
        loss: 0.01,
        duplication: 0.01,
        ordered: false,
    };
    let mut sim = Simulation::new(seed, sim_settings(), net);
    sim.record_events = record;
    let r = run_in(&mut sim, seed, cfg);
    (r, sim)
}

fn run_in(sim: &mut Simulation, seed: u64, cfg: &RunConfig) -> Result<RunReport, String> {
    let fail = |e: String| format!("seed {seed}: {e}\nreplay: {}", replay_command(seed, cfg));
    let addrs = sim
        .form_cluster(cfg.nodes, 60_000)
        .ok_or_else(|| fail("the initial cluster did not form".into()))?;
    let mut checker = Checker::default();
    let mut faults = Vec::new();
    let trace = std::env::var_os("CONCORD_SIM_TRACE").is_some();
    let trace_step = |sim: &Simulation| {
        if trace && sim.now.is_multiple_of(500) {
            for (a, n) in sim.nodes.iter() {
                eprintln!("{:>8} {} {}", sim.now, a.host, n.membership_line());
            }
        }
    };
    for _ in 0..cfg.faults {
        let gap = sim.rng.random_range(cfg.gap_ms.0..=cfg.gap_ms.1);
        let end = sim.now + gap;
        while sim.now < end {
            sim.run_for(100);
            trace_step(sim);
            checker
                .check_step(sim)
                .map_err(|e| fail(format!("{e}\nfaults so far: {faults:?}")))?;
        }
        let fault = pick_fault(sim, &addrs);
        if trace {
            eprintln!("{:>8} FAULT {fault:?}", sim.now);
        }
        apply(sim, &fault, &addrs);
        faults.push((sim.now, fault));
    }
    sim.partitions = Partitions::default();
    faults.push((sim.now, Fault::Heal));
    let end = sim.now + cfg.quiet_ms;
    while sim.now < end {
        sim.run_for(100);
        trace_step(sim);
        checker
            .check_step(sim)
            .map_err(|e| fail(format!("{e}\nfaults: {faults:?}")))?;
    }
    checker
        .check_end(sim)
        .map_err(|e| fail(format!("{e}\nfaults: {faults:?}")))?;
    Ok(RunReport {
        seed,
        faults,
        running_at_end: sim.running().count(),
    })
}

/// Picks a random fault for the nodes `addrs` (from the simulation's RNG).
pub fn pick_fault(sim: &mut Simulation, addrs: &[Address]) -> Fault {
    let running: Vec<Address> = sim.running().map(|(a, _)| a.clone()).collect();
    let stopped: Vec<Address> = addrs
        .iter()
        .filter(|a| !sim.nodes[*a].is_running())
        .cloned()
        .collect();
    let r = sim.rng.random_range(0..100);
    match r {
        0..=24 if running.len() >= 2 => {
            let mut shuffled = addrs.to_vec();
            shuffled.shuffle(&mut sim.rng);
            let k = sim.rng.random_range(1..addrs.len());
            Fault::Partition(shuffled.into_iter().take(k).collect())
        }
        25..=44 => Fault::Heal,
        45..=59 if running.len() >= 2 => {
            Fault::Crash(running[sim.rng.random_range(0..running.len())].clone())
        }
        60..=79 if !stopped.is_empty() => {
            Fault::Restart(stopped[sim.rng.random_range(0..stopped.len())].clone())
        }
        80..=99 if !running.is_empty() => {
            let ms = sim.rng.random_range(500..15_000);
            Fault::Pause(running[sim.rng.random_range(0..running.len())].clone(), ms)
        }
        _ => Fault::Heal,
    }
}

/// Applies `fault` (a restarted node joins through running members).
pub fn apply(sim: &mut Simulation, fault: &Fault, addrs: &[Address]) {
    match fault {
        Fault::Partition(side) => {
            let other: BTreeSet<Address> = addrs
                .iter()
                .filter(|a| !side.contains(*a))
                .cloned()
                .collect();
            sim.partitions = Partitions::split(&[side.clone(), other]);
        }
        Fault::Heal => sim.partitions = Partitions::default(),
        Fault::Crash(a) => sim.crash(a),
        Fault::Pause(a, ms) => sim.pause(a, *ms),
        Fault::Restart(a) => {
            // Join through the members the restarted node can find (as bootstrap would);
            // never start a second cluster while another one is running.
            let seeds: Vec<Address> = sim
                .running()
                .filter(|(x, n)| *x != a && n.core.is_initialized())
                .map(|(x, _)| x.clone())
                .take(3)
                .collect();
            if seeds.is_empty() {
                return;
            }
            sim.start_node(a.clone());
            sim.with_node(a, |c, now| c.join_seed_nodes(now, &seeds).ok());
        }
    }
}
