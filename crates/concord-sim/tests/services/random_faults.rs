//! Random faults: partitions, pauses, crashes, restarts and leaves over many seeds.

use super::checker::*;
use super::*;

/// Seeds of the randomized test: `CONCORD_SIM_SEEDS` (a soak), else `default`.
fn seeds(default: u64) -> u64 {
    std::env::var("CONCORD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Partitions, pauses, crashes, restarts and graceful leaves on a lossy network: instances
/// as stated (zombies allowed, counted), per-sender order, convergence after heal.
#[test]
fn random_faults_keep_instances_and_order_and_the_table_converges_after_heal() {
    random_faults(Harshness::PartitionsAndPauses, 400);
}

/// Crashes, restarts and graceful leaves only (no partition, no pause, no loss): never
/// more than N instances among running nodes, at any step — no zombie.
#[test]
fn crashes_restarts_and_leaves_never_run_two_instances() {
    random_faults(Harshness::CrashesOnly, 200);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Harshness {
    PartitionsAndPauses,
    CrashesOnly,
}

fn random_faults(harshness: Harshness, default_seeds: u64) {
    let n = seeds(default_seeds);
    let first: u64 = std::env::var("CONCORD_SIM_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut totals = Totals::default();
    let started = std::time::Instant::now();
    for seed in first..first + n {
        random_case(seed, harshness, &mut totals).unwrap_or_else(|e| {
            panic!(
                "seed {seed} ({harshness:?}): {e}\nreplay: CONCORD_SIM_SEED_START={seed} \
                 CONCORD_SIM_SEEDS=1 cargo test -p concord-sim --test services"
            )
        });
    }
    eprintln!(
        "{harshness:?}, {n} seeds in {:.1} s: {} left a cluster that converged; solo moved {} \
         times; {} zombie overlaps ({} steps with two solo instances), {} zombie deliveries \
         left out of the order check",
        started.elapsed().as_secs_f64(),
        totals.checked,
        totals.moves,
        totals.zombies,
        totals.zombie_steps,
        totals.zombie_deliveries
    );
    assert!(
        totals.checked >= n * 2 / 3,
        "most schedules leave a cluster"
    );
    assert!(totals.moves >= n / 2, "solo moved {} times", totals.moves);
}

#[derive(Default)]
struct Totals {
    checked: u64,
    moves: u64,
    zombies: u64,
    zombie_steps: u64,
    zombie_deliveries: u64,
}

/// The services' removal margin: `CONCORD_SIM_REMOVAL_MARGIN_MS`, else 20 s (above the
/// longest pause, 15 s, as the singleton's test uses).
fn margin() -> u64 {
    std::env::var("CONCORD_SIM_REMOVAL_MARGIN_MS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
}

fn random_case(seed: u64, harshness: Harshness, totals: &mut Totals) -> Result<(), String> {
    let trace_on = std::env::var("CONCORD_SIM_TRACE").is_ok();
    let harsh = harshness == Harshness::PartitionsAndPauses;
    let (mut sim, world) = if harsh {
        sim(7_000 + seed, 0.01, margin())
    } else {
        sim(900_000 + seed, 0.0, margin())
    };
    let addrs = sim.form_cluster(5, 60_000).ok_or("did not form")?;
    let mut checker = Checker::default();
    let mut faults: Vec<(u64, Fault)> = Vec::new();
    let mut last_pause: BTreeMap<Address, u64> = BTreeMap::new();
    // A node draining before it leaves, and until when it may.
    let mut leaving: Option<(Address, u64)> = None;
    let mut step = 0;
    for _ in 0..8 {
        let gap = sim.rng.random_range(500..6_000);
        let end = sim.now + gap;
        while sim.now < end {
            traffic(&mut sim, &[], step);
            step += 1;
            sim.run_for(100);
            if trace_on {
                trace(&sim);
            }
            checker
                .step(&sim, &world)
                .map_err(|e| format!("{e}; faults {faults:?}"))?;
            if let Some((a, deadline)) = leaving.clone() {
                let running = sim.nodes.get(&a).is_some_and(|n| n.is_running());
                let drained = host(&sim, &a).is_some_and(|h| h.inner.hosts_nothing());
                if !running {
                    leaving = None;
                } else if drained || sim.now >= deadline {
                    let target = a.clone();
                    sim.with_node(&a, |c, now| c.leave(now, &target).ok());
                    leaving = None;
                }
            }
        }
        // Half the faults hit the node hosting `solo`. Crashes and leaves keep at least three
        // nodes running (a restart instead), so that most runs end with a cluster.
        let target = running_on(&sim, SOLO).first().cloned();
        let running = sim.running().count();
        let f = match target {
            Some(t) if sim.rng.random_bool(0.5) => match sim.rng.random_range(0..4) {
                0 => Fault::Crash(t),
                1 => Fault::Pause(t, sim.rng.random_range(500..15_000)),
                2 => Fault::Partition([t].into()),
                _ if leaving.is_none() && running > 3 => {
                    sim.with_machine::<Host, _>(&t, |h, now| h.machine.drain(now));
                    leaving = Some((t.clone(), sim.now + DRAIN_TIMEOUT_MS));
                    Fault::Leave(t)
                }
                _ => Fault::Heal,
            },
            _ => pick_fault(&mut sim, &addrs),
        };
        let restart = addrs
            .iter()
            .find(|a| sim.nodes.get(*a).is_none_or(|n| !n.is_running()))
            .map_or(Fault::Heal, |a| Fault::Restart(a.clone()));
        let f = match f {
            Fault::Crash(_) if running <= 3 => restart,
            Fault::Partition(_) | Fault::Pause(..) if !harsh => restart,
            f => f,
        };
        // At most one pause per node in any 20 s, none extending another.
        let f = match f {
            Fault::Pause(a, _) if last_pause.get(&a).is_some_and(|t| sim.now < t + 20_000) => {
                Fault::Heal
            }
            f => f,
        };
        if let Fault::Pause(a, ms) = &f {
            last_pause.insert(a.clone(), sim.now + ms);
        }
        if trace_on {
            eprintln!(
                "  {} FAULT {f:?} solo on {:?}",
                sim.now,
                running_on(&sim, SOLO)
            );
        }
        // A leave is carried out once drained (above).
        if !matches!(f, Fault::Leave(_)) {
            apply(&mut sim, &f, &addrs);
        }
        faults.push((sim.now, f));
        checker
            .step(&sim, &world)
            .map_err(|e| format!("{e}; faults {faults:?}"))?;
    }
    // Heal: no partition, no loss.
    sim.partitions = Partitions::default();
    sim.network.loss = 0.0;
    if let Some((a, _)) = leaving.take() {
        if sim.nodes.get(&a).is_some_and(|n| n.is_running()) {
            let target = a.clone();
            sim.with_node(&a, |c, now| c.leave(now, &target).ok());
        }
    }
    // Pauses end within 15 s (a paused node looks converged to itself meanwhile).
    run_checked(&mut sim, &world, &mut checker, 16_000, &[], true)
        .map_err(|e| format!("{e}; faults {faults:?}"))?;
    let settled = run_until(&mut sim, &world, &mut checker, 150_000, |s| {
        s.all_up_converged() && services_converged(s).is_ok()
    })
    .map_err(|e| format!("{e}; faults {faults:?}"))?;
    let cluster = sim.running().any(|(_, n)| n.core().is_initialized());
    if cluster {
        if settled.is_none() {
            return Err(format!(
                "did not converge after heal: {:?}; faults {faults:?}",
                services_converged(&sim)
            ));
        }
        totals.checked += 1;
        // Messages flow again: every member's next messages all arrive.
        let before: Vec<(Address, UniqueAddress, u64)> = up_members(&sim)
            .into_iter()
            .filter_map(|a| {
                let h = host(&sim, &a)?;
                Some((a, h.me.clone(), h.sent.len() as u64))
            })
            .collect();
        run_checked(&mut sim, &world, &mut checker, 1_000, &[], true)
            .map_err(|e| format!("{e}; faults {faults:?}"))?;
        run_until(&mut sim, &world, &mut checker, 10_000, |_| false)
            .map_err(|e| format!("{e}; faults {faults:?}"))?;
        for (a, me, from) in before {
            let sent = host(&sim, &a).map_or(from, |h| h.sent.len() as u64);
            let got: BTreeSet<u64> = delivered_from(&world, &me).into_iter().collect();
            if let Some(lost) = (from..sent).find(|s| !got.contains(s)) {
                let stats: Vec<String> = sim
                    .running()
                    .filter_map(|(a, _)| host(&sim, a))
                    .map(|h| format!("{}: {:?}", short(&h.me), h.inner.stats()))
                    .collect();
                return Err(format!(
                    "after heal, {me}'s message {lost} (of {from}..{sent}) was not delivered; \
                     stats {stats:?}; faults {faults:?}"
                ));
            }
        }
    }
    let zombie_deliveries = check_order(&world).map_err(|e| format!("{e}; faults {faults:?}"))?;
    // With the removal margin above the longest pause (the default here) there is no
    // zombie even with partitions and pauses: never two `solo` instances at any step.
    if (!harsh || margin() >= 20_000) && (checker.zombies > 0 || checker.max_solo > 1) {
        return Err(format!(
            "{} zombie(s), up to {} solo instances at once (removal margin {} ms); \
             faults {faults:?}",
            checker.zombies,
            checker.max_solo,
            margin()
        ));
    }
    if !harsh {
        // Without partitions, pauses or loss, messages are lost only around a crash (sent
        // to the crashed host until it is removed and the path placed afresh), or when sent
        // by a node that just joined before every member knew it.
        let crashes: Vec<u64> = faults
            .iter()
            .filter(|(_, f)| matches!(f, Fault::Crash(_)))
            .map(|(t, _)| *t)
            .collect();
        for (a, _) in sim.running() {
            let Some(h) = host(&sim, a) else { continue };
            let got: BTreeSet<u64> = delivered_from(&world, &h.me).into_iter().collect();
            let first = h.sent.first().copied().unwrap_or(0);
            for (seq, at) in h.sent.iter().enumerate() {
                let near_crash = crashes
                    .iter()
                    .any(|c| *at + 100 >= *c && *at <= c + 20_000 + margin());
                if !got.contains(&(seq as u64)) && !near_crash && *at > first + 3_000 {
                    return Err(format!(
                        "{}'s message {seq} sent at {at} was lost, far from any crash; \
                         stats {:?}; faults {faults:?}",
                        h.me,
                        h.inner.stats()
                    ));
                }
            }
        }
    }
    let solo = path(SOLO);
    totals.moves += world
        .borrow()
        .intervals
        .iter()
        .filter(|i| i.path == solo)
        .count()
        .saturating_sub(1) as u64;
    totals.zombies += checker.zombies;
    totals.zombie_steps += checker.zombie_steps;
    totals.zombie_deliveries += zombie_deliveries as u64;
    if trace_on || (checker.zombies > 0 && std::env::var("CONCORD_SIM_ZOMBIES").is_ok()) {
        let zs: Vec<(String, u64, u64)> = world
            .borrow()
            .intervals
            .iter()
            .filter_map(|i| {
                let z = *world.borrow().zombie_since.get(&i.node)?;
                if i.path.as_str() != SOLO || i.start > z {
                    return None;
                }
                Some((
                    i.node.address.host.clone(),
                    z,
                    i.end.unwrap_or(sim.now).saturating_sub(z),
                ))
            })
            .collect();
        eprintln!(
            "seed {seed}: cluster {cluster} running {} zombies {zs:?} faults {:?}",
            sim.running().count(),
            faults
                .iter()
                .map(|(t, f)| format!("{t}:{f:?}"))
                .collect::<Vec<_>>()
                .join(" ")
                .replace("Address { system: \"sim\", host: \"", "")
                .replace("\", port: 25520 }", "")
        );
    }
    Ok(())
}
