//! Distributed Data in the simulator: replicators on every node of a simulated cluster,
//! concurrent updates under message loss, duplication and reordering, partitions, pauses,
//! crashes and restarts with a new uid. After the faults heal every running replica must
//! hold the same value, and no count may be lost that should not be, or counted twice.

use std::collections::BTreeMap;

use concord_core::ddata::replicator::{Digest, Key};
use concord_core::ddata::{
    DataTypeRegistry, GCounter, ORSet, ReadConsistency, Replicator, ReplicatorEvent,
    ReplicatorSettings, RequestId, UpdateResult, WriteConsistency,
};
use concord_core::Address;
use concord_sim::invariants::Checker;
use concord_sim::network::{NetworkConfig, Partitions};
use concord_sim::schedule::{apply, pick_fault, sim_settings, Fault};
use concord_sim::{Hosted, Simulation};
use rand::Rng;

type HostedReplicator = Hosted<Replicator>;

fn settings() -> ReplicatorSettings {
    ReplicatorSettings {
        gossip_interval_ms: 1_000,
        delta_propagation_interval_ms: 200,
        notify_subscribers_interval_ms: 200,
        pruning_interval_ms: 2_000,
        max_pruning_dissemination_ms: 8_000,
        ..Default::default()
    }
}

fn sim(seed: u64, loss: f64) -> Simulation {
    let net = NetworkConfig {
        min_delay_ms: 1,
        max_delay_ms: 20,
        loss,
        duplication: loss,
        ordered: false,
    };
    let mut sim = Simulation::new(seed, sim_settings(), net);
    sim.add_protocol(|me, seed| {
        Box::new(Hosted::new(Replicator::new(
            settings(),
            me.clone(),
            DataTypeRegistry::default(),
            seed,
            0,
        )))
    });
    sim
}

fn counter() -> Key<GCounter> {
    Key::new("counter").expect("valid key")
}

fn set() -> Key<ORSet<String>> {
    Key::new("set").expect("valid key")
}

/// Increments the counter on `a` by `n` and adds `element` to the set.
fn update(
    sim: &mut Simulation,
    a: &Address,
    n: u64,
    element: String,
    c: WriteConsistency,
) -> Option<u64> {
    let request = sim.rng.random::<u64>();
    sim.with_machine::<HostedReplicator, _>(a, |h, now| {
        let me = h.machine.replica();
        h.machine
            .update(now, RequestId(request), &counter(), c, GCounter::new, |v| {
                v.increment(me, n)
            });
        h.machine
            .update(now, RequestId(request ^ 1), &set(), c, ORSet::new, |s| {
                s.add(me, element)
            });
    })
    .map(|_| request)
}

/// Digests of every key on every running node.
/// Running nodes that are members of a cluster.
fn members(sim: &Simulation) -> Vec<Address> {
    sim.running()
        .filter(|(_, n)| n.core().is_initialized())
        .map(|(a, _)| a.clone())
        .collect()
}

fn digests(sim: &Simulation) -> BTreeMap<Address, BTreeMap<String, Digest>> {
    members(sim)
        .iter()
        .map(|a| {
            let d = sim
                .machine::<HostedReplicator>(a)
                .map(|h| {
                    ["counter", "set"]
                        .iter()
                        .filter_map(|k| h.machine.digest(k).map(|d| (k.to_string(), d)))
                        .collect::<BTreeMap<_, _>>()
                })
                .unwrap_or_default();
            (a.clone(), d)
        })
        .collect()
}

/// Every member holds both keys, with the same digests.
fn converged(sim: &Simulation) -> bool {
    same_digests(sim, true)
}

/// Every member holds the same digests (`with_keys`: and both keys).
fn same_digests(sim: &Simulation, with_keys: bool) -> bool {
    let d = digests(sim);
    let mut it = d.values();
    let first = it.next();
    first.is_some_and(|f| (!with_keys || f.len() == 2) && it.all(|x| x == f))
}

fn counter_value(sim: &Simulation, a: &Address) -> Option<u64> {
    sim.machine::<HostedReplicator>(a)?
        .machine
        .local_typed(&counter())
        .map(GCounter::value)
}

#[test]
fn concurrent_updates_on_five_nodes_converge_under_loss_duplication_and_reordering() {
    let mut sim = sim(3, 0.05);
    let addrs = sim.form_cluster(5, 60_000).expect("forms");
    let mut total = 0;
    for round in 0..20u64 {
        for (i, a) in addrs.iter().enumerate() {
            let n = round + i as u64 + 1;
            total += n;
            update(
                &mut sim,
                a,
                n,
                format!("{i}-{round}"),
                WriteConsistency::Local,
            );
        }
        sim.run_for(50);
    }
    let took = sim
        .run_until_cond(30_000, 100, converged)
        .expect("every replica converges");
    for a in &addrs {
        assert_eq!(counter_value(&sim, a), Some(total), "{a}");
        let s = sim
            .machine::<HostedReplicator>(a)
            .unwrap()
            .machine
            .local_typed(&set())
            .unwrap()
            .len();
        assert_eq!(s, 100, "{a}");
    }
    assert!(took < 30_000);
}

#[test]
fn a_partition_then_heal_converges_and_keeps_every_update() {
    for seed in 0..10 {
        let mut sim = sim(100 + seed, 0.01);
        let addrs = sim.form_cluster(5, 60_000).expect("forms");
        let mut total = 0;
        let (left, right) = addrs.split_at(2);
        sim.partitions = Partitions::split(&[
            left.iter().cloned().collect(),
            right.iter().cloned().collect(),
        ]);
        for round in 0..10u64 {
            for (i, a) in addrs.iter().enumerate() {
                total += 1;
                update(
                    &mut sim,
                    a,
                    1,
                    format!("{seed}-{i}-{round}"),
                    WriteConsistency::Local,
                );
            }
            sim.run_for(300);
        }
        sim.partitions = Partitions::default();
        sim.run_until_cond(60_000, 100, converged)
            .unwrap_or_else(|| panic!("seed {seed}: converges after heal"));
        for a in sim.running().map(|(a, _)| a.clone()).collect::<Vec<_>>() {
            assert_eq!(counter_value(&sim, &a), Some(total), "seed {seed}: {a}");
        }
    }
}

#[test]
fn random_faults_then_heal_converge_without_double_counting() {
    let seeds = seeds(12);
    let first: u64 = std::env::var("CONCORD_SIM_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let checked = run_random_faults(first..first + seeds);
    // Not vacuous: many schedules leave a cluster whose replicas are checked. The split
    // brain resolver's stricter rules down all in some of the harshest schedules (seeds
    // 0–1999 with every rule: 993 left a cluster; 1,077 without rules 5 and 6).
    assert!(
        checked * 5 >= seeds * 2,
        "at least two schedules in five leave a cluster to check ({checked} of {seeds})"
    );
}

/// Seeds that once failed: 1801 (two resolver decisions, each downing its decider as
/// indirectly connected, kept two lone members; docs/SPLIT_BRAIN_RESOLVER.md, rule 6).
#[test]
fn regression_seeds() {
    run_random_faults([1801]);
}

/// Runs the random-fault schedule of each seed, checking the membership invariants
/// (no split brain among them) at every step and the replicas at the end, panicking with
/// the seed and its faults; the number of schedules that left a cluster to check.
fn run_random_faults(seeds: impl IntoIterator<Item = u64>) -> u64 {
    let trace = std::env::var("CONCORD_SIM_TRACE").is_ok();
    let mut checked = 0;
    for seed in seeds {
        let mut sim = sim(1_000 + seed, 0.01);
        let addrs = sim.form_cluster(5, 60_000).expect("forms");
        let mut total = 0u64;
        let mut faults: Vec<Fault> = Vec::new();
        let mut seen: BTreeMap<u64, u64> = BTreeMap::new();
        let mut checker = Checker::default();
        for _ in 0..8 {
            for _ in 0..10 {
                let running: Vec<Address> = sim.running().map(|(a, _)| a.clone()).collect();
                if running.is_empty() {
                    break;
                }
                let a = running[sim.rng.random_range(0..running.len())].clone();
                let n = sim.rng.random_range(1..5u64);
                let consistency = if sim.rng.random_bool(0.3) {
                    WriteConsistency::majority(1_000)
                } else {
                    WriteConsistency::Local
                };
                if update(&mut sim, &a, n, format!("e{total}"), consistency).is_some() {
                    total += n;
                }
                let pause = sim.rng.random_range(50..500);
                for _ in 0..pause / 50 {
                    sim.run_for(50);
                    if trace {
                        concord_sim::trace::print_views(&sim);
                    }
                    if let Err(e) = checker.check_step(&sim) {
                        panic!("seed {seed}: {e}\nfaults {faults:?}");
                    }
                    // At every step: a replica's counter never goes back, never exceeds
                    // what was added (no double counting, also through pruning).
                    for a in members(&sim) {
                        let uid = sim.node(&a).core().self_unique_address().uid;
                        let v = counter_value(&sim, &a).unwrap_or(0);
                        let last = seen.entry(uid).or_insert(0);
                        if v < *last || v > total {
                            for b in members(&sim) {
                                let h = sim.machine::<HostedReplicator>(&b).unwrap();
                                eprintln!(
                                    "{b} uid {} env {:?}",
                                    sim.node(&b).core().self_unique_address().uid,
                                    h.machine.local_value("counter")
                                );
                            }
                            eprintln!("faults {faults:?}");
                        }
                        assert!(
                            v >= *last && v <= total,
                            "seed {seed}: {a} went {last} -> {v} (total {total})"
                        );
                        *last = v;
                    }
                }
            }
            let f = pick_fault(&mut sim, &addrs);
            if trace {
                eprintln!("{} {:?}", sim.now, f);
                for (a, n) in sim.nodes.iter() {
                    eprintln!("   {} {}", a.host, n.membership_line());
                }
            }
            apply(&mut sim, &f, &addrs);
            faults.push(f);
        }
        sim.partitions = Partitions::default();
        let settled = sim.run_until_cond(120_000, 200, |s| {
            members(s).is_empty() || s.all_up_converged()
        });
        if members(&sim).is_empty() {
            // The faults took the whole cluster down (split brain resolution downed the
            // survivors' side): nothing to converge.
            continue;
        }
        checked += 1;
        if settled.is_none() {
            for (a, n) in sim.running() {
                eprintln!(
                    "{a}: init {} {:?} unreachable {:?}",
                    n.core().is_initialized(),
                    n.core()
                        .latest_gossip()
                        .members
                        .values()
                        .map(|m| (m.unique_address.address.host.clone(), m.status))
                        .collect::<Vec<_>>(),
                    n.core().membership_state().unreachable_members()
                );
            }
            panic!("seed {seed}: membership converges; faults {faults:?}");
        }
        // (All replicas that held the data may be gone: then the survivors agree on none.)
        if sim
            .run_until_cond(60_000, 200, |s| same_digests(s, false))
            .is_none()
        {
            for b in members(&sim) {
                let h = sim.machine::<HostedReplicator>(&b).unwrap();
                eprintln!(
                    "{b} uid {} nodes {:?} stats {:?}\n  counter {:?}\n  set {:?}",
                    sim.node(&b).core().self_unique_address().uid,
                    h.machine
                        .nodes()
                        .map(|n| n.address.host.clone())
                        .collect::<Vec<_>>(),
                    h.machine.stats(),
                    h.machine
                        .local_value("counter")
                        .map(|e| (e.digest(), e.pruning.clone())),
                    h.machine.local_value("set").map(|e| (
                        e.digest(),
                        e.pruning.clone(),
                        e.value().map(|v| v.replicas())
                    )),
                );
            }
            panic!("seed {seed}: replicas converge; faults {faults:?}");
        }
        for a in members(&sim) {
            let v = counter_value(&sim, &a).unwrap_or(0);
            assert!(
                v <= total,
                "seed {seed}: {a} counts {v} of {total}: counted twice; {faults:?}"
            );
        }
    }
    checked
}

#[test]
fn pruning_removes_a_crashed_node_from_the_data_and_keeps_its_count() {
    let mut sim = sim(77, 0.0);
    let addrs = sim.form_cluster(4, 60_000).expect("forms");
    for (i, a) in addrs.iter().enumerate() {
        update(
            &mut sim,
            a,
            10 + i as u64,
            format!("{i}"),
            WriteConsistency::Local,
        );
    }
    sim.run_until_cond(10_000, 100, converged)
        .expect("converges");
    let gone = sim.node(&addrs[3]).core().self_unique_address().uid;
    sim.crash(&addrs[3]);
    // SBR downs it; the replicators prune it once it is removed.
    let pruned = sim.run_until_cond(120_000, 500, |s| {
        addrs[..3].iter().all(|a| {
            s.machine::<HostedReplicator>(a).is_some_and(|h| {
                h.machine
                    .local_typed(&counter())
                    .is_some_and(|c| c.entries().all(|(r, _)| r.0 != gone))
            })
        })
    });
    if pruned.is_none() {
        for a in &addrs[..3] {
            let h = sim.machine::<HostedReplicator>(a).unwrap();
            eprintln!(
                "{a}: {:?} {:?} nodes {:?}",
                h.machine.local_value("counter"),
                h.machine.stats(),
                h.machine.nodes().collect::<Vec<_>>()
            );
        }
    }
    assert!(
        pruned.is_some(),
        "the crashed node's entries are pruned everywhere"
    );
    for a in &addrs[..3] {
        assert_eq!(counter_value(&sim, a), Some(10 + 11 + 12 + 13), "{a}");
    }
}

#[test]
fn write_majority_then_read_majority_with_a_minority_crashed() {
    let mut sim = sim(5, 0.0);
    let addrs = sim.form_cluster(5, 60_000).expect("forms");
    sim.crash(&addrs[3]);
    sim.crash(&addrs[4]);
    let req = update(
        &mut sim,
        &addrs[0],
        5,
        "x".into(),
        WriteConsistency::majority(3_000),
    )
    .unwrap();
    sim.run_for(3_000);
    let ok = sim.machine::<HostedReplicator>(&addrs[0]).unwrap().events.iter().any(|e| {
        matches!(e, ReplicatorEvent::UpdateResponse { request, result: UpdateResult::Success, .. } if request.0 == req)
    });
    assert!(ok, "the majority write succeeds with 3 of 5 up");
    sim.with_machine::<HostedReplicator, _>(&addrs[2], |h, now| {
        h.machine.get(
            now,
            RequestId(1),
            "counter",
            ReadConsistency::majority(3_000),
        )
    });
    sim.run_for(3_000);
    let got = sim
        .machine::<HostedReplicator>(&addrs[2])
        .unwrap()
        .events
        .iter()
        .find_map(|e| match e {
            ReplicatorEvent::GetResponse {
                request: RequestId(1),
                result: concord_core::ddata::GetResult::Success(v),
                ..
            } => v.as_any().downcast_ref::<GCounter>().map(GCounter::value),
            _ => None,
        });
    assert_eq!(got, Some(5));
}

/// Seeds of the randomized test: `CONCORD_SIM_SEEDS` (a soak), else `default`.
fn seeds(default: u64) -> u64 {
    std::env::var("CONCORD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
