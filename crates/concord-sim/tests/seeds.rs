//! Randomized fault schedules and scenarios in the deterministic simulator.

use std::collections::BTreeSet;

use concord_core::split_brain_resolver::SbrRules;
use concord_core::MemberStatus;
use concord_sim::invariants::DecisionCounts;
use concord_sim::network::{NetworkConfig, Partitions};
use concord_sim::schedule::{run_seed, run_seed_counted, run_seed_with, sim_settings, RunConfig};
use concord_sim::Simulation;

#[test]
fn a_set_of_random_fault_schedules_keeps_every_invariant() {
    let cfg = RunConfig::default();
    // Regressions: 8 and 21 once found a split brain (stale indirect-connection records);
    // 5750, 7874 and 7888 a joining node left in limbo when the member that welcomed it
    // crashed; 259 a checker that confused a restarted node with its predecessor. (The
    // simulator's event order has changed since, so they are kept as schedules, not as
    // exact reproductions.) 181, 220, 1712, 1855, 5049, 5870, 5924 and 6927 found split
    // brains that Akka's rules alone allow (docs/SPLIT_BRAIN_RESOLVER.md, "Where Concord is
    // stricter"); 1111 a checker that took a node that had just started for a healthy one;
    // 491 a status that went back (WeaklyUp to Joining) after a merge pruned the vector
    // clock entry of a removed node that had admitted the joiner.
    // 7143: a crashed member seen unreachable only by since-downed observers, monitored by no live one.
    let regressions = [
        8, 21, 181, 220, 259, 491, 1111, 1712, 1855, 5049, 5750, 5870, 5924, 6927, 7143, 7874, 7888,
    ];
    for seed in (0..100).chain(regressions) {
        if let Err(e) = run_seed(seed, &cfg) {
            panic!("{e}");
        }
    }
}

/// What one rule set did over a set of seeds.
#[derive(Debug, Default)]
struct Tally {
    decisions: u64,
    down_all: u64,
    /// Down-alls by cause: stable decision, down-all-when-unstable, double decision.
    down_all_by_cause: [u64; 3],
    down_own_side: u64,
    members_downed: u64,
    seeds_with_down_all: u64,
    split_brains: Vec<u64>,
    other_failures: Vec<u64>,
    /// Down-all decisions per seed.
    per_seed: Vec<(u64, u64)>,
    /// Members downed per seed.
    downed_per_seed: Vec<u64>,
}

fn tally(rules: SbrRules, seeds: std::ops::Range<u64>) -> Tally {
    let cfg = RunConfig {
        rules,
        ..RunConfig::default()
    };
    let mut t = Tally::default();
    for seed in seeds {
        let (
            r,
            DecisionCounts {
                decisions,
                down_all,
                down_all_by_cause,
                down_own_side,
                members_downed,
            },
        ) = run_seed_counted(seed, &cfg);
        t.decisions += decisions;
        t.down_all += down_all;
        for (sum, n) in t.down_all_by_cause.iter_mut().zip(down_all_by_cause) {
            *sum += n;
        }
        t.down_own_side += down_own_side;
        t.members_downed += members_downed;
        t.downed_per_seed.push(members_downed);
        t.seeds_with_down_all += u64::from(down_all > 0);
        t.per_seed.push((seed, down_all));
        match r {
            Ok(_) => {}
            Err(e) if e.contains("split brain") => t.split_brains.push(seed),
            Err(_) => t.other_failures.push(seed),
        }
    }
    t
}

/// The resolver soak with both rule sets over the same seeds (`CONCORD_SIM_SEEDS`, default
/// 200, from `CONCORD_SIM_SEED_START`, default 0; every strategy in turn): the resolver
/// decisions that ended in down-all with Concord's rules and with Akka's alone, the
/// decisions by which Concord's stricter rules down their own side instead, the members
/// downed, and the split brains each produced (a run stops at its first violated
/// invariant). Concord's rules must produce none. The down-all counts are a reported figure
/// (--nocapture; the 10,000-seed figures are in docs/SPLIT_BRAIN_RESOLVER.md, where
/// Concord's rules down all 13 % less often than Akka's): a comparison of two diverging
/// histories per seed, so it is printed, not asserted on a sample of seeds.
#[test]
fn concord_rules_never_split_brain_and_their_down_alls_against_akka_rules() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let start = env("CONCORD_SIM_SEED_START", 0);
    let seeds = start..start + env("CONCORD_SIM_SEEDS", 200);
    let (concord, akka) = std::thread::scope(|s| {
        let akka = s.spawn(|| tally(SbrRules::Akka, seeds.clone()));
        let concord = tally(SbrRules::Concord, seeds.clone());
        (concord, akka.join().expect("the Akka rules' runs"))
    });
    for (name, t) in [("concord", &concord), ("akka", &akka)] {
        println!(
            "{name:>8} rules, seeds {seeds:?}: {} decisions, {} down-all ({} seeds with a down-all; by cause: {} stable decision, {} down-all-when-unstable, {} double decision), {} down own side, {} members downed, {} split brains {:?}, {} other invariant failures {:?}",
            t.decisions,
            t.down_all,
            t.seeds_with_down_all,
            t.down_all_by_cause[0],
            t.down_all_by_cause[1],
            t.down_all_by_cause[2],
            t.down_own_side,
            t.members_downed,
            t.split_brains.len(),
            t.split_brains,
            t.other_failures.len(),
            t.other_failures,
        );
    }
    let more: Vec<(u64, u64, u64)> = concord
        .per_seed
        .iter()
        .zip(&akka.per_seed)
        .filter(|((_, c), (_, a))| c > a)
        .map(|((seed, c), (_, a))| (*seed, *c, *a))
        .collect();
    println!(
        "seeds where Concord's rules downed all more often (seed, concord, akka): {} {:?}",
        more.len(),
        &more[..more.len().min(30)]
    );
    let (more_downed, fewer_downed) = concord
        .downed_per_seed
        .iter()
        .zip(&akka.downed_per_seed)
        .fold((0, 0), |(m, f), (c, a)| {
            (m + u64::from(c > a), f + u64::from(c < a))
        });
    println!(
        "seeds where Concord's rules downed more members than Akka's: {more_downed}, fewer: {fewer_downed}"
    );
    assert!(
        concord.split_brains.is_empty() && concord.other_failures.is_empty(),
        "{:?} {:?}",
        concord.split_brains,
        concord.other_failures
    );
}

#[test]
fn the_same_seed_replays_the_same_run() {
    let cfg = RunConfig::default();
    let (a, sa) = run_seed_with(5, &cfg, true);
    let (b, sb) = run_seed_with(5, &cfg, true);
    assert_eq!(a.unwrap().faults, b.unwrap().faults);
    assert_eq!(sa.events, sb.events, "identical event histories");
    assert_eq!(sa.now, sb.now);
}

#[test]
fn scenario_3_2_partition_minority_downed_then_heal_converges() {
    let mut sim = Simulation::new(1, sim_settings(), NetworkConfig::default());
    let addrs = sim.form_cluster(5, 30_000).expect("forms");
    let majority: BTreeSet<_> = addrs[..3].iter().cloned().collect();
    let minority: BTreeSet<_> = addrs[3..].iter().cloned().collect();
    sim.partitions = Partitions::split(&[majority.clone(), minority.clone()]);
    let t = sim
        .run_until_cond(30_000, 100, |s| {
            minority.iter().all(|a| !s.node(a).is_running())
        })
        .expect("minority downs itself");
    assert!(
        t < 15_000,
        "detection + stable-after (2 s) + shutdown, took {t} ms"
    );
    assert!(majority.iter().all(|a| sim.node(a).is_running()));
    sim.partitions = Partitions::default();
    sim.run_until_cond(30_000, 100, |s| s.all_up_converged())
        .expect("majority converges");
    let g = sim.node(&addrs[0]).core().latest_gossip();
    assert_eq!(g.members.len(), 3);
    assert!(g.members.values().all(|m| m.status == MemberStatus::Up));
}

#[test]
fn network_faults_loss_duplication_reordering_still_converge() {
    let net = NetworkConfig {
        min_delay_ms: 1,
        max_delay_ms: 200,
        loss: 0.2,
        duplication: 0.2,
        ordered: false,
    };
    let mut sim = Simulation::new(3, sim_settings(), net);
    assert!(
        sim.form_cluster(8, 60_000).is_some(),
        "8 nodes form a cluster over a lossy, duplicating, reordering network"
    );
}

#[test]
fn hundreds_of_nodes_converge_in_one_process() {
    let mut settings = sim_settings();
    settings.gossip_interval_ms = 200;
    let mut sim = Simulation::new(7, settings, NetworkConfig::default());
    sim.record_events = false;
    assert!(sim.form_cluster(200, 120_000).is_some());
}
