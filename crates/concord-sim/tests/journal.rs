//! The replicated journal in the simulator: a journal machine on every node of a simulated
//! cluster (real membership, failure detection and split brain resolver), each with a
//! simulated disk that survives its crashes and restarts; writers of a few logs on random
//! nodes — now and then two writers of one log at once, as after a rebalance or in a split
//! brain — recover and append under message loss, duplication and reordering, partitions,
//! one-way links, crashes, restarts, pauses and graceful leaves (so the ring changes and
//! segments are handed off). At every step no sequence number of a log is known with two
//! different events (known: acknowledged to a writer or returned by a recovery or a read),
//! a recovery or a read reaches every write acknowledged before it began, and a snapshot
//! load returns the newest snapshot saved before it began, or a newer one. After the faults
//! heal and every node is back, a recovery of each log holds every acknowledged write,
//! once, in order, without a gap. [`history`] keeps what the writers were told and checks
//! each answer against it.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use concord_core::kv::MemoryStorage;
use concord_core::persistence::journal::{
    Ballot, Entry, JournalMachine, JournalOutput, JournalSettings, StoredSnapshot,
};
use concord_core::Address;
use concord_sim::network::NetworkConfig;
use concord_sim::schedule::{apply, pick_any_fault_leaving, recover_everyone, sim_settings, Fault};
use concord_sim::{Hosted, Simulation};
use rand::Rng;

#[path = "journal/dump.rs"]
mod dump;
#[path = "journal/history.rs"]
mod history;

use history::{collect, snapshot_payload, History, Writer};

type Journal = Hosted<JournalMachine<MemoryStorage>>;
type Disks = Rc<RefCell<BTreeMap<Address, MemoryStorage>>>;

const LOGS: usize = 6;

fn sim(seed: u64, loss: f64, disks: &Disks) -> Simulation {
    let net = NetworkConfig {
        min_delay_ms: 1,
        max_delay_ms: 20,
        loss,
        duplication: loss,
        ordered: false,
    };
    let mut sim = Simulation::new(seed, sim_settings(), net);
    let disks = disks.clone();
    sim.add_protocol(move |me, _seed| {
        let disk = disks
            .borrow_mut()
            .entry(me.address.clone())
            .or_default()
            .clone();
        let settings = JournalSettings {
            auto_commit: true,
            request_timeout_ms: 2_000,
            virtual_nodes: 16,
            ..JournalSettings::default()
        };
        let machine = JournalMachine::new(settings, me.clone(), disk, 0);
        // Like a leaving node (the persistence layer's cluster-exiting task): hand every
        // copy over first (at most 10 s, the phase's timeout).
        let mut since: Option<u64> = None;
        Box::new(Hosted::new(machine).with_exiting(move |m, now| {
            let start = *since.get_or_insert(now);
            m.handed_over() || now >= start + 10_000
        }))
    });
    sim
}

fn log_name(l: usize) -> String {
    format!("ecounter|{l}")
}

fn uid_of(sim: &Simulation, a: &Address) -> Option<u64> {
    sim.nodes
        .get(a)
        .filter(|n| n.is_running() && n.core().is_initialized())
        .map(|n| n.core().self_unique_address().uid)
}

/// Starts writers where a log has none (sometimes a second one) and steps them.
fn client_ops(sim: &mut Simulation, h: &mut History, faults: bool) {
    let running: Vec<Address> = sim
        .running()
        .filter(|(_, n)| n.core().is_initialized())
        .map(|(a, _)| a.clone())
        .collect();
    if running.is_empty() {
        return;
    }
    // Writers on nodes that are gone (or restarted) are gone.
    h.writers
        .retain(|(a, uid, _), _| uid_of(sim, a) == Some(*uid));
    for l in 0..LOGS {
        let active = h.writers.keys().filter(|(_, _, wl)| *wl == l).count();
        if active == 0 || (faults && active == 1 && sim.rng.random_bool(0.03)) {
            let a = running[sim.rng.random_range(0..running.len())].clone();
            if let Some(uid) = uid_of(sim, &a) {
                h.writers.entry((a, uid, l)).or_insert(Writer::Idle);
            }
        }
    }
    let keys: Vec<(Address, u64, usize)> = h.writers.keys().cloned().collect();
    for key in keys {
        let (a, _, l) = key.clone();
        let state = h.writers[&key].clone();
        match state {
            Writer::Idle => {
                h.next_request += 1;
                let r = h.next_request;
                h.requests.insert(r, key.clone());
                let acked_before = h.acked_max(l);
                let snapshot_before = h.snapshots.get(&l).copied().unwrap_or(0);
                h.writers.insert(
                    key,
                    Writer::Recovering {
                        acked_before,
                        snapshot_before,
                    },
                );
                sim.with_machine::<Journal, _>(&a, |j, now| {
                    j.machine
                        .recover_from_snapshot(now, r, log_name(l), 100_000)
                });
            }
            Writer::Ready { next } if next > 1 && sim.rng.random_bool(0.03) => {
                h.next_request += 1;
                let r = h.next_request;
                h.requests.insert(r, key.clone());
                if sim.rng.random_bool(0.5) {
                    let acked_before = h.acked_max(l);
                    h.writers
                        .insert(key, Writer::Reading { next, acked_before });
                    sim.with_machine::<Journal, _>(&a, |j, now| {
                        j.machine.read(now, r, log_name(l), 1, u64::MAX, 100_000)
                    });
                } else {
                    let snapshot_before = h.snapshots.get(&l).copied().unwrap_or(0);
                    h.writers.insert(
                        key,
                        Writer::Loading {
                            next,
                            snapshot_before,
                        },
                    );
                    sim.with_machine::<Journal, _>(&a, |j, now| {
                        j.machine.load_snapshot(now, r, log_name(l))
                    });
                }
            }
            Writer::Ready { next } if next > 1 && sim.rng.random_bool(0.05) => {
                h.next_request += 1;
                let r = h.next_request;
                h.requests.insert(r, key.clone());
                let seq = next - 1;
                h.writers.insert(key, Writer::Saving { next, seq });
                let snapshot = StoredSnapshot {
                    seq_nr: seq,
                    timestamp_ms: sim.now,
                    payload: snapshot_payload(l, seq),
                };
                sim.with_machine::<Journal, _>(&a, |j, now| {
                    j.machine.save_snapshot(now, r, log_name(l), snapshot)
                });
            }
            Writer::Ready { next } if sim.rng.random_bool(0.5) => {
                h.next_request += 1;
                let r = h.next_request;
                h.requests.insert(r, key.clone());
                let n = sim.rng.random_range(1..=3);
                let events: Vec<Vec<u8>> = (0..n)
                    .map(|_| {
                        h.tag += 1;
                        format!("{}/{}", a.port, h.tag).into_bytes()
                    })
                    .collect();
                let write = Entry {
                    first_seq: next,
                    ballot: Ballot::ZERO,
                    timestamp_ms: sim.now,
                    events,
                };
                h.writers.insert(
                    key,
                    Writer::Appending {
                        write: write.clone(),
                    },
                );
                sim.with_machine::<Journal, _>(&a, |j, now| {
                    j.machine.append(now, r, log_name(l), write, false)
                });
            }
            _ => {}
        }
    }
}

/// One recovery of `l` through `at` after everything healed: every acknowledged event,
/// gap-free and consistent with everything known.
fn final_check(
    sim: &mut Simulation,
    h: &mut History,
    at: &Address,
    l: usize,
) -> Result<(), String> {
    let mut last = Err("no answer".to_string());
    for attempt in 0..10 {
        h.next_request += 1;
        let r = h.next_request;
        sim.with_machine::<Journal, _>(at, |j, now| {
            j.machine.recover(now, r, log_name(l), 1, 1_000_000)
        });
        sim.run_for(3_000);
        let j = sim.machine::<Journal>(at).ok_or("no machine")?;
        let Some(e) = j.events.iter().rev().find(|e| e.request == r).cloned() else {
            continue;
        };
        match e.result {
            Ok(JournalOutput::Recovered { page, highest, .. }) => {
                h.learn(l, &page, "final recovery")?;
                let seqs: Vec<u64> = page
                    .iter()
                    .flat_map(|e| e.first_seq..=e.last_seq())
                    .collect();
                if seqs != (1..=highest).collect::<Vec<_>>() {
                    let firsts: Vec<u64> = page.iter().map(|e| e.first_seq).collect();
                    let reps: Vec<String> = sim
                        .machine::<Journal>(at)
                        .unwrap()
                        .machine
                        .replicas(&log_name(l))
                        .iter()
                        .map(|r| r.address.host.clone())
                        .collect();
                    eprintln!("replicas {reps:?}");
                    return Err(format!(
                        "log {l}: not gap-free up to {highest}: slots {firsts:?}"
                    ));
                }
                if let Some(s) = h
                    .acked
                    .get(&l)
                    .and_then(|s| s.iter().find(|s| **s > highest))
                {
                    return Err(format!(
                        "log {l}: acknowledged {s} lost (highest {highest})"
                    ));
                }
                return Ok(());
            }
            other => last = Err(format!("log {l}: attempt {attempt}: {other:?}")),
        }
    }
    last
}

fn seeds(default: u64) -> u64 {
    std::env::var("CONCORD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// One seed: faults under load, then heal and check every log; (events acknowledged,
/// recoveries, writers stopped).
fn run_seed(seed: u64) -> (usize, u64, u64) {
    run_cluster(seed, 5, 2, 2)
}

/// One seed on a cluster formed of `nodes` nodes, with `spare` more that faults may
/// start during the run; crashes and leaves leave at least `running_at_least` running.
fn run_cluster(seed: u64, nodes: u32, spare: u32, running_at_least: usize) -> (usize, u64, u64) {
    let disks: Disks = Rc::default();
    let mut sim = sim(3_000 + seed, 0.01, &disks);
    let mut addrs = sim.form_cluster(nodes, 60_000).expect("forms");
    addrs.extend((nodes..nodes + spare).map(concord_sim::node_address));
    sim.run_for(2_000);
    let mut h = History::default();
    let mut faults: Vec<Fault> = Vec::new();
    let fail = |e: String, faults: &[Fault]| -> ! {
        panic!("seed {seed}: {e}\nfaults: {faults:?}\nreplay: CONCORD_SIM_SEED_START={seed} CONCORD_SIM_SEEDS=1 cargo test -p concord-sim --test journal")
    };
    for _ in 0..6 {
        let steps = sim.rng.random_range(10..40);
        for _ in 0..steps {
            client_ops(&mut sim, &mut h, true);
            sim.run_for(100);
            if let Err(e) = collect(&sim, &mut h) {
                if std::env::var_os("CONCORD_SIM_TRACE").is_some() {
                    dump::records(&sim, &disks);
                }
                fail(e, &faults);
            }
        }
        let f = pick_any_fault_leaving(&mut sim, &addrs, running_at_least);
        apply(&mut sim, &f, &addrs);
        faults.push(f);
    }
    sim.run_for(3_000);
    if let Err(e) = collect(&sim, &mut h) {
        fail(e, &faults);
    }
    recover_everyone(&mut sim, &addrs);
    let settled = sim.run_until_cond(120_000, 500, |s| {
        s.all_up_converged() && s.running().count() == addrs.len()
    });
    if settled.is_none() {
        fail("membership does not settle".into(), &faults);
    }
    // Handoffs finish.
    let quiet = sim.run_until_cond(60_000, 500, |s| {
        s.running().all(|(a, _)| {
            s.machine::<Journal>(a).is_some_and(|j| {
                j.machine.pending_segments() == 0 && j.machine.outgoing_handoffs() == 0
            })
        })
    });
    if quiet.is_none() {
        dump::waits(&sim);
        fail("handoffs do not finish".into(), &faults);
    }
    if let Err(e) = collect(&sim, &mut h) {
        fail(e, &faults);
    }
    let at = sim
        .running()
        .next()
        .map(|(a, _)| a.clone())
        .expect("a node");
    for l in 0..LOGS {
        if let Err(e) = final_check(&mut sim, &mut h, &at, l) {
            if std::env::var_os("CONCORD_SIM_TRACE").is_some() {
                dump::records(&sim, &disks);
            }
            fail(e, &faults);
        }
    }
    (
        h.acked.values().map(BTreeSet::len).sum::<usize>(),
        h.recoveries,
        h.conflicts,
    )
}

#[test]
fn random_faults_never_give_a_log_two_histories_nor_lose_an_acknowledged_write() {
    let first: u64 = std::env::var("CONCORD_SIM_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let count = seeds(100);
    let (mut acked, mut recoveries, mut conflicts) = (0usize, 0u64, 0u64);
    for seed in first..first + count {
        let (a, r, c) = run_seed(seed);
        acked += a;
        recoveries += r;
        conflicts += c;
    }
    assert!(
        acked > 100 * count as usize,
        "{acked} events acknowledged in {count} seeds"
    );
    eprintln!("{acked} events acknowledged, {recoveries} recoveries, {conflicts} writers stopped");
}

/// The same on three nodes and one spare, where N = 3: a crash, a leave or a downing
/// shrinks every replica list (three to two, two to one), so the replicas that stay must
/// catch up from one another before the next one leaves
/// (`concord_core::persistence::journal::handoff::catches_up`).
#[test]
fn random_faults_on_three_nodes_where_every_replica_list_shrinks() {
    let first: u64 = std::env::var("CONCORD_SIM_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let count = seeds(40);
    let mut acked = 0usize;
    for seed in first..first + count {
        acked += run_cluster(seed, 3, 1, 1).0;
    }
    assert!(
        acked > 50 * count as usize,
        "{acked} events acknowledged in {count} seeds"
    );
    eprintln!("{acked} events acknowledged on three nodes");
}

/// Seed 355 lost acknowledged writes before handoffs stated whether the sender's copy is
/// complete (`concord_core::persistence::journal::standing`): after a split brain in which
/// both sides downed the other, a new replica counted a brand-new node that was still
/// waiting for its own handoff as one of the segment's previous replicas. (The fix
/// changes the run's timing, so the seed no longer replays those exact steps; the unit
/// test `handoff::tests::incomplete_copies_count_only_when_every_previous_replica_delivered`
/// pins the rule.)
#[test]
fn seed_355_a_new_replica_still_waiting_is_not_counted_as_a_previous_one() {
    run_seed(355);
}

/// Seed 1108: a node started during the run was still joining (its view: five Up members,
/// itself not yet among them) when the split brain resolver downed every other node; its
/// view emptied, then it formed a ring alone and, counting its change from the empty ring,
/// found no previous replica to wait for and recovered a log without its snapshot and
/// writes. A ring change now counts from the last ring the node saw
/// (`handoff::tests::a_ring_that_emptied_in_between_counts_from_the_last_ring_seen` pins
/// the rule).
#[test]
fn seed_1108_a_node_that_joined_as_every_other_was_downed_waits_for_their_disks() {
    run_seed(1108);
}

/// Seeds 3647 and 3810: the replicas holding a log's last writes (3647) or its newest
/// snapshot (3810) were downed while a replica that waited for them left the segment's
/// list and handed its copy on; the next replica counted that copy as enough. An
/// incomplete copy now carries its holder's unmet needs
/// (`handoff::tests::a_copy_handed_on_while_it_waited_carries_its_need_to_the_next_replica`).
#[test]
fn seeds_3647_3810_a_copy_handed_on_while_it_waited_carries_its_need() {
    run_seed(3647);
    run_seed(3810);
}

/// Seed 2501 of the three-node runs: a writer removed from the ring while its own view had
/// not changed yet saved a snapshot, counting its own answer and that of a replica whose
/// view had; the replicas of the new list lacked it and a recovery returned an older one.
/// A save's answer now states its replica's list, as an accept's does
/// (`tests::snapshot::a_snapshot_save_answered_from_another_view_of_the_replicas_is_not_counted`).
#[test]
fn seed_2501_a_snapshot_saved_through_a_lagging_view_is_not_counted() {
    run_cluster(2501, 3, 1, 1);
}
