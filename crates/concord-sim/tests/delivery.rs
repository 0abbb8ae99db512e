//! Reliable delivery in the simulator: every node hosts the real sharding layer with two
//! consumer types — the runtime's at-least-once [`ReliableConsumer`] and a journaled
//! (event-sourced model) consumer — and runs a durable producer to each type
//! ([`producers`]). Random faults (partitions, one-way links, crashes, restarts, pauses,
//! joins, graceful leaves, so shards rebalance and hand off) hit the cluster while the
//! producers send, with message loss on the links and, in the producers' driver, lost and
//! doubled transmits and lost answers. In some steps a producer sends what goes to one
//! entity in one ask (a batch, as the runtime does), in others each message alone.
//!
//! At every step each consumer applies a producer's messages in order: the journaled one
//! never applies a message twice nor skips one; the plain one never handles a message that
//! no incarnation handled the one before (it may repeat after a crash lost what it had
//! handled), and within what its incarnations handed over to each other it never repeats
//! one nor goes back. After the faults heal and every node is back,
//! every producer's queue empties, and every accepted message was applied: exactly once by
//! the journaled consumers, at least once by the plain ones.
//!
//! [`ReliableConsumer`]: concord::delivery::ReliableConsumer

use concord_core::delivery::DeliverySettings;
use concord_core::sharding::ShardingSettings;
use concord_core::Address;
use concord_sim::network::NetworkConfig;
use concord_sim::schedule::{apply, pick_any_fault, recover_everyone, sim_settings, Fault};
use concord_sim::Simulation;
use rand::Rng;
use std::collections::BTreeMap;

#[path = "delivery/consumers.rs"]
mod consumers;
#[path = "delivery/producers.rs"]
mod producers;

use consumers::{parse, Book, SharedBook};
use producers::Producers;

fn sharding_settings() -> ShardingSettings {
    ShardingSettings {
        number_of_shards: consumers::SHARDS,
        retry_interval_ms: 500,
        rebalance_interval_ms: 2_000,
        handoff_timeout_ms: 10_000,
        shard_start_timeout_ms: 2_000,
        waiting_for_state_timeout_ms: 1_000,
        updating_state_timeout_ms: 1_000,
        // Above the longest pause (15 s), as the sharding docs require.
        removal_margin_ms: 20_000,
        passivation_idle_timeout_ms: None,
        ..ShardingSettings::default()
    }
}

fn delivery_settings() -> DeliverySettings {
    DeliverySettings {
        flow_control_window: 8,
        resend_interval_min_ms: 500,
        resend_interval_max_ms: 5_000,
        buffer_size: 300,
        // Short, so that idle entities' controllers are forgotten and come back as new
        // generations during a run.
        cleanup_unused_after_ms: 8_000,
        ..DeliverySettings::default()
    }
}

fn sim(seed: u64, book: &SharedBook) -> Simulation {
    let net = NetworkConfig {
        min_delay_ms: 1,
        max_delay_ms: 40,
        loss: 0.01,
        duplication: 0.0,
        // Ordered per link, as the runtime's lanes are.
        ordered: true,
    };
    let mut sim = Simulation::new(seed, sim_settings(), net);
    let (clock, book) = (sim.clock.clone(), book.clone());
    sim.add_protocol(move |me, seed| {
        Box::new(consumers::node_host(
            me,
            seed,
            &clock,
            &sharding_settings(),
            &delivery_settings(),
            &book,
        ))
    });
    sim
}

fn seeds(default: u64) -> u64 {
    std::env::var("CONCORD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// The end: every accepted message applied, once by the journaled consumers, at least once
/// (and the last one) by the plain ones.
fn check_all_applied(book: &Book, producers: &Producers) -> Result<(), String> {
    for ((producer, entity), n) in &producers.accepted {
        if producer.starts_with(consumers::PLAIN) {
            let highest = book
                .plain_highest
                .get(&(producer.clone(), entity.clone()))
                .copied()
                .unwrap_or(0);
            if highest != *n {
                return Err(format!(
                    "{producer} → {entity}: accepted up to #{n}, handled up to #{highest}"
                ));
            }
        } else {
            let applied: Vec<u32> = book
                .journals
                .get(entity)
                .map(|j| {
                    j.applied
                        .iter()
                        .filter_map(|p| parse(p))
                        .filter(|(p, _)| p == producer)
                        .map(|(_, n)| n)
                        .collect()
                })
                .unwrap_or_default();
            if applied != (1..=*n).collect::<Vec<_>>() {
                return Err(format!(
                    "{producer} → {entity}: accepted #1..=#{n}, applied {} (first difference at {:?})",
                    applied.len(),
                    applied.iter().zip(1..).position(|(a, b)| *a != b)
                ));
            }
        }
    }
    Ok(())
}

/// What one seed did.
struct SeedReport {
    accepted: u64,
    plain_repeats: u64,
    producer_restarts: u64,
    /// Asks that carried a batch.
    batches: u64,
    /// Handoffs the running nodes' regions started (a lower bound: crashed incarnations'
    /// are not counted).
    handoffs: u64,
}

/// One seed: faults under a producer workload, then heal and wait for every queue to
/// empty; `None` if a node could not be brought back (nothing to check at the end).
fn run_seed(seed: u64) -> Option<SeedReport> {
    let book = SharedBook::default();
    let mut sim = sim(11_000 + seed, &book);
    let mut addrs = sim.form_cluster(5, 60_000).expect("forms");
    addrs.extend((5..7).map(concord_sim::node_address));
    let mut producers = Producers::new(delivery_settings());
    let mut faults: Vec<Fault> = Vec::new();
    let mut last_pause: BTreeMap<Address, u64> = BTreeMap::new();
    let fail = |e: String, faults: &[Fault]| -> ! {
        panic!(
            "seed {seed}: {e}\nfaults: {faults:?}\nreplay: CONCORD_SIM_SEED_START={seed} CONCORD_SIM_SEEDS=1 cargo test -p concord-sim --test delivery"
        )
    };
    let check = |book: &SharedBook, faults: &[Fault]| {
        let b = book.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = b.violations.first() {
            fail(v.clone(), faults);
        }
    };
    for _ in 0..6 {
        let steps = sim.rng.random_range(10..40);
        for _ in 0..steps {
            producers.step(&mut sim, 1);
            sim.run_for(100);
            check(&book, &faults);
        }
        let f = match pick_any_fault(&mut sim, &addrs) {
            // Pauses within the documented limit: at most one per node in any 20 s.
            Fault::Pause(a, _) if last_pause.get(&a).is_some_and(|t| sim.now < t + 20_000) => {
                Fault::Heal
            }
            f => f,
        };
        if let Fault::Pause(a, ms) = &f {
            last_pause.insert(a.clone(), sim.now + ms);
        }
        apply(&mut sim, &f, &addrs);
        faults.push(f);
    }
    recover_everyone(&mut sim, &addrs);
    let start = sim.now;
    loop {
        producers.step(&mut sim, 0);
        sim.run_for(200);
        check(&book, &faults);
        if producers.stopped().is_empty() && producers.unconfirmed() == 0 {
            break;
        }
        if sim.now - start > 240_000 {
            if addrs
                .iter()
                .any(|a| sim.nodes.get(a).is_some_and(|n| !n.is_running()))
            {
                // A node could not come back: its producers' messages wait for it.
                return None;
            }
            fail(
                format!(
                    "after heal: {} messages still unconfirmed, producers stopped: {:?}",
                    producers.unconfirmed(),
                    producers.stopped()
                ),
                &faults,
            );
        }
    }
    let b = book.lock().unwrap_or_else(|p| p.into_inner());
    check_all_applied(&b, &producers).unwrap_or_else(|e| fail(e, &faults));
    if std::env::var_os("CONCORD_SIM_TRACE").is_some() {
        eprintln!("seed {seed}: {:?}, applied {}", producers.counts, b.applied);
    }
    let handoffs = sim
        .nodes
        .keys()
        .filter_map(|a| sim.machine::<consumers::Host>(a))
        .flat_map(|h| {
            [consumers::PLAIN, consumers::DURABLE].map(|t| {
                h.host
                    .machine()
                    .get(t)
                    .map_or(0, |m| m.stats().handoffs_started)
            })
        })
        .sum();
    Some(SeedReport {
        accepted: producers.counts.accepted,
        plain_repeats: b.plain_repeats,
        producer_restarts: producers.counts.restarts,
        batches: producers.counts.batches,
        handoffs,
    })
}

#[test]
fn random_faults_lose_nothing_and_journaled_consumers_apply_each_message_once() {
    let n = seeds(100);
    let first: u64 = std::env::var("CONCORD_SIM_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (mut checked, mut accepted, mut repeats, mut restarts, mut handoffs) = (0, 0, 0, 0, 0);
    let mut batches = 0;
    for seed in first..first + n {
        if let Some(r) = run_seed(seed) {
            checked += 1;
            accepted += r.accepted;
            repeats += r.plain_repeats;
            restarts += r.producer_restarts;
            handoffs += r.handoffs;
            batches += r.batches;
        }
    }
    eprintln!(
        "{checked} of {n} seeds checked to the end: {accepted} messages accepted, {restarts} producer restarts, {batches} batches, {handoffs} handoffs, {repeats} repeats by plain consumers"
    );
    assert!(
        checked >= n.div_ceil(2),
        "most seeds end with every node back"
    );
    assert!(accepted > 0, "messages were sent");
    assert!(restarts > 0, "producers restarted from their queues");
    assert!(handoffs > 0, "shards moved");
    assert!(batches > 0, "messages went in batches");
}
