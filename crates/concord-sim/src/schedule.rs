//! Randomized fault schedules from a seed: partitions, one-way links, flapping, heals,
//! crashes, restarts with a new uid, joins of new nodes and graceful leaves (also during
//! partitions), pauses — for every downing strategy (chosen by the seed). Each run checks
//! the invariants after every step and at the end; a failure reports the seed and the
//! command that replays it.

use std::collections::BTreeSet;

use concord_core::settings::ClusterSettings;
use concord_core::split_brain_resolver::{DowningStrategy, SbrRules, SbrSettings};
use concord_core::Address;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::invariants::{Checker, DecisionCounts};
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
    /// Cut the link in one direction: the second node stops hearing the first.
    OneWay(Address, Address),
    /// Split off this group and heal, again and again (300–900 ms each), then heal.
    Flap(BTreeSet<Address>),
    /// A graceful leave.
    Leave(Address),
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
    /// Addresses beyond the first `nodes` that new nodes may join at.
    pub spares: u32,
    /// The downing strategy; `None`: chosen by the seed ([`strategy_for_seed`]).
    pub strategy: Option<DowningStrategy>,
    /// The resolver's rules: Concord's, or Akka's alone to compare.
    pub rules: SbrRules,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            nodes: 5,
            faults: 6,
            gap_ms: (500, 6000),
            quiet_ms: 40_000,
            spares: 2,
            strategy: None,
            rules: SbrRules::Concord,
        }
    }
}

/// Settings used by randomized runs: fast timings, keep-majority with stable-after 2 s.
pub fn sim_settings() -> ClusterSettings {
    sim_settings_with(DowningStrategy::KeepMajority { role: None })
}

/// Fast timings with `strategy`, stable-after 2 s, down-all-when-unstable 4 s more.
pub fn sim_settings_with(strategy: DowningStrategy) -> ClusterSettings {
    let mut s = ClusterSettings::fast();
    s.downing = Some(SbrSettings {
        strategy,
        stable_after_ms: 2000,
        down_all_when_unstable_ms: Some(4000),
        rules: concord_core::split_brain_resolver::SbrRules::Concord,
    });
    s
}

/// The strategy a seed runs with: keep-majority, static-quorum (quorum = nodes / 2 + 1),
/// keep-oldest, keep-oldest with down-if-alone, down-all, lease-majority, in turn.
pub fn strategy_for_seed(seed: u64, nodes: u32) -> DowningStrategy {
    match seed % 6 {
        0 => DowningStrategy::KeepMajority { role: None },
        1 => DowningStrategy::StaticQuorum {
            quorum_size: nodes as usize / 2 + 1,
            role: None,
        },
        2 => DowningStrategy::KeepOldest {
            down_if_alone: false,
            role: None,
        },
        3 => DowningStrategy::KeepOldest {
            down_if_alone: true,
            role: None,
        },
        4 => DowningStrategy::DownAll,
        _ => DowningStrategy::LeaseMajority {
            role: None,
            acquire_lease_delay_for_minority_ms: 2000,
            release_after_ms: 10_000,
        },
    }
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

/// Like [`run_seed`], with the resolver decisions the run carried out (up to a failure).
pub fn run_seed_counted(seed: u64, cfg: &RunConfig) -> (Result<RunReport, String>, DecisionCounts) {
    let mut counts = DecisionCounts::default();
    let (r, _) = run_seed_into(seed, cfg, false, &mut counts);
    (r, counts)
}

/// Like [`run_seed`], optionally recording every node's events; returns the simulation too.
pub fn run_seed_with(
    seed: u64,
    cfg: &RunConfig,
    record: bool,
) -> (Result<RunReport, String>, Simulation) {
    run_seed_into(seed, cfg, record, &mut DecisionCounts::default())
}

fn run_seed_into(
    seed: u64,
    cfg: &RunConfig,
    record: bool,
    counts: &mut DecisionCounts,
) -> (Result<RunReport, String>, Simulation) {
    let net = NetworkConfig {
        min_delay_ms: 1,
        max_delay_ms: 20,
        loss: 0.01,
        duplication: 0.01,
        ordered: false,
    };
    let strategy = cfg
        .strategy
        .clone()
        .unwrap_or_else(|| strategy_for_seed(seed, cfg.nodes));
    let mut settings = sim_settings_with(strategy);
    if let Some(d) = settings.downing.as_mut() {
        d.rules = cfg.rules;
    }
    let mut sim = Simulation::new(seed, settings, net);
    sim.record_events = record;
    let mut checker = Checker::default();
    let r = run_in(&mut sim, seed, cfg, &mut checker);
    *counts = checker.counts;
    (r, sim)
}

fn run_in(
    sim: &mut Simulation,
    seed: u64,
    cfg: &RunConfig,
    checker: &mut Checker,
) -> Result<RunReport, String> {
    let fail = |e: String| format!("seed {seed}: {e}\nreplay: {}", replay_command(seed, cfg));
    let mut addrs = sim
        .form_cluster(cfg.nodes, 60_000)
        .ok_or_else(|| fail("the initial cluster did not form".into()))?;
    addrs.extend((cfg.nodes..cfg.nodes + cfg.spares).map(crate::sim::node_address));
    let mut faults: Vec<(u64, Fault)> = Vec::new();
    let trace = std::env::var_os("CONCORD_SIM_TRACE").is_some();
    let mut traced_decisions: std::collections::BTreeMap<concord_core::UniqueAddress, u64> =
        Default::default();
    // Runs `ms` of virtual time in 100 ms steps, checking the invariants at each.
    let mut run = |sim: &mut Simulation, ms: u64, faults: &[(u64, Fault)]| {
        let end = sim.now + ms;
        while sim.now < end {
            sim.run_for(100);
            if trace {
                for (a, n) in sim.nodes.iter() {
                    if sim.now.is_multiple_of(500) {
                        let g = n.core().latest_gossip();
                        let recs: Vec<String> = g
                            .overview
                            .reachability
                            .records()
                            .filter(|r| r.2 != concord_core::ReachabilityStatus::Reachable)
                            .map(|(o, s, _)| format!("{}>{}", o.address.host, s.address.host))
                            .collect();
                        eprintln!("{:>8} {} {} {recs:?}", sim.now, a.host, n.membership_line());
                    }
                    let count = n.core().stats().sbr_decisions;
                    let id = n.core().self_unique_address().clone();
                    if traced_decisions.insert(id, count).unwrap_or(0) < count {
                        if let Some(d) = n.core().recent_sbr_decisions().last() {
                            let nodes: Vec<&str> =
                                d.nodes.iter().map(|x| x.address.host.as_str()).collect();
                            eprintln!(
                                "{:>8} {} DECIDED {:?} {nodes:?}",
                                d.at_ms, a.host, d.decision
                            );
                        }
                    }
                }
            }
            checker
                .check_step(sim)
                .map_err(|e| fail(format!("{e}\nfaults so far: {faults:?}")))?;
        }
        Ok::<(), String>(())
    };
    for _ in 0..cfg.faults {
        let gap = sim.rng.random_range(cfg.gap_ms.0..=cfg.gap_ms.1);
        run(sim, gap, &faults)?;
        let fault = pick_any_fault(sim, &addrs);
        if trace {
            eprintln!("{:>8} FAULT {fault:?}", sim.now);
        }
        apply(sim, &fault, &addrs);
        faults.push((sim.now, fault.clone()));
        if let Fault::Flap(side) = fault {
            for _ in 0..sim.rng.random_range(2..=4) {
                let ms = sim.rng.random_range(300..=900);
                run(sim, ms, &faults)?;
                sim.partitions = Partitions::default();
                let ms = sim.rng.random_range(300..=900);
                run(sim, ms, &faults)?;
                apply(sim, &Fault::Partition(side.clone()), &addrs);
            }
            let ms = sim.rng.random_range(300..=900);
            run(sim, ms, &faults)?;
            sim.partitions = Partitions::default();
        }
    }
    sim.partitions = Partitions::default();
    faults.push((sim.now, Fault::Heal));
    run(sim, cfg.quiet_ms, &faults)?;
    checker
        .check_end(sim)
        .map_err(|e| fail(format!("{e}\nfaults: {faults:?}")))?;
    Ok(RunReport {
        seed,
        faults,
        running_at_end: sim.running().count(),
    })
}

/// Picks any fault, membership changes included, for the addresses `addrs` (members and
/// spare addresses): partitions 18 %, one-way links 8 %, flapping 6 %, heals 14 %, crashes
/// 12 %, starts of a node at a free address (a restart or a new member) 16 %, graceful
/// leaves 8 %, pauses 18 %. At least two nodes are left running by crashes and leaves.
pub fn pick_any_fault(sim: &mut Simulation, addrs: &[Address]) -> Fault {
    pick_any_fault_leaving(sim, addrs, 2)
}

/// [`pick_any_fault`], crashes and leaves leaving at least `running_at_least` nodes running
/// (1: a cluster may shrink to its last node).
pub fn pick_any_fault_leaving(
    sim: &mut Simulation,
    addrs: &[Address],
    running_at_least: usize,
) -> Fault {
    let running: Vec<Address> = sim.running().map(|(a, _)| a.clone()).collect();
    let free: Vec<Address> = addrs
        .iter()
        .filter(|a| sim.nodes.get(*a).is_none_or(|n| !n.is_running()))
        .cloned()
        .collect();
    let pick =
        |sim: &mut Simulation, from: &[Address]| from[sim.rng.random_range(0..from.len())].clone();
    let group = |sim: &mut Simulation| {
        let mut shuffled = addrs.to_vec();
        shuffled.shuffle(&mut sim.rng);
        let k = sim.rng.random_range(1..addrs.len());
        shuffled.into_iter().take(k).collect::<BTreeSet<Address>>()
    };
    match sim.rng.random_range(0..100) {
        0..=17 if running.len() >= 2 => Fault::Partition(group(sim)),
        18..=25 if running.len() >= 2 => {
            let from = pick(sim, &running);
            let others: Vec<Address> = running.iter().filter(|a| **a != from).cloned().collect();
            Fault::OneWay(from, pick(sim, &others))
        }
        26..=31 if running.len() >= 2 => Fault::Flap(group(sim)),
        32..=45 => Fault::Heal,
        46..=57 if running.len() > running_at_least => Fault::Crash(pick(sim, &running)),
        58..=73 if !free.is_empty() => Fault::Restart(pick(sim, &free)),
        74..=81 if running.len() > running_at_least => Fault::Leave(pick(sim, &running)),
        82..=99 if !running.is_empty() => {
            let ms = sim.rng.random_range(500..15_000);
            Fault::Pause(pick(sim, &running), ms)
        }
        _ => Fault::Heal,
    }
}

/// Picks a random fault for the nodes `addrs` (from the simulation's RNG).
pub fn pick_fault(sim: &mut Simulation, addrs: &[Address]) -> Fault {
    let running: Vec<Address> = sim.running().map(|(a, _)| a.clone()).collect();
    let stopped: Vec<Address> = addrs
        .iter()
        .filter(|a| sim.nodes.get(*a).is_none_or(|n| !n.is_running()))
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
        Fault::OneWay(from, to) => sim.partitions.cut_one_way(from.clone(), to.clone()),
        Fault::Flap(side) => apply(sim, &Fault::Partition(side.clone()), addrs),
        Fault::Leave(a) => {
            let target = a.clone();
            sim.with_node(a, |c, now| c.leave(now, &target).ok());
        }
        Fault::Crash(a) => sim.crash(a),
        Fault::Pause(a, ms) => sim.pause(a, *ms),
        Fault::Restart(a) => {
            // Join through the members the restarted node can find (as bootstrap would);
            // never start a second cluster while another one is running.
            let seeds: Vec<Address> = sim
                .running()
                .filter(|(x, n)| *x != a && n.core().is_initialized())
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

/// Heals every partition, lets pauses end, and brings every crashed or shut-down node of
/// `addrs` back (again, for nodes that shut down meanwhile — a paused node that was downed
/// stops only once it resumes): each joins up to three running members, or itself if none
/// runs. For the layer tests' end phase.
pub fn recover_everyone(sim: &mut Simulation, addrs: &[Address]) {
    sim.partitions = Partitions::default();
    // Pauses end within 15 s; a paused node that was downed stops when it resumes.
    sim.run_for(16_000);
    for _ in 0..6 {
        let stopped: Vec<Address> = addrs
            .iter()
            .filter(|a| sim.nodes.get(*a).is_none_or(|n| !n.is_running()))
            .cloned()
            .collect();
        if stopped.is_empty() {
            return;
        }
        for a in &stopped {
            let seeds: Vec<Address> = sim
                .running()
                .filter(|(x, n)| *x != a && n.core().is_initialized())
                .map(|(x, _)| x.clone())
                .take(3)
                .collect();
            sim.start_node(a.clone());
            let me = a.clone();
            if seeds.is_empty() {
                sim.with_node(a, |c, now| c.join(now, &me).ok());
            } else {
                sim.with_node(a, |c, now| c.join_seed_nodes(now, &seeds).ok());
            }
            sim.run_for(2_000);
        }
        sim.run_for(20_000);
    }
}
