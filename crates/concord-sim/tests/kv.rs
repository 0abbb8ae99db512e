//! The key-value store in the simulator: a machine on every node of a simulated cluster,
//! each with a simulated disk that survives its crashes and restarts; clients on every node
//! reading, writing (with the context of their last read, or blind) and deleting keys,
//! under message loss, duplication and reordering, partitions, crashes, restarts and
//! pauses. At every step every stored version must be well-formed and hold only values
//! clients wrote. After the faults heal and every crashed node is back, once quiet:
//!
//! - every key has N replicas — its whole preference list holds the same version, and no
//!   other node holds it;
//! - no acknowledged write is lost: each acknowledged value is still a sibling, or a write
//!   whose context came from a read that returned it superseded it;
//! - siblings only where writes were truly concurrent: no sibling was written with the
//!   context of a read that returned another sibling.
//!
//! (That a read that returned a value is what a superseding write needs follows from how
//! dots enter clocks: the first write whose context covers a value's dot got that context
//! from a read in which the value was still a sibling.)

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use concord_core::ddata::VersionVector;
use concord_core::kv::ring::segment_of;
use concord_core::kv::store::decode_record;
use concord_core::kv::{
    key_hash, KvEvent, KvMachine, KvSettings, MemoryStorage, Quorum, ReadOptions, Table, Versioned,
    WriteOptions,
};
use concord_core::Address;
use concord_sim::network::{NetworkConfig, Partitions};
use concord_sim::schedule::{apply, pick_any_fault, recover_everyone, sim_settings, Fault};
use concord_sim::{Hosted, Simulation};
use rand::Rng;

type Kv = Hosted<KvMachine<MemoryStorage>>;
type Disks = Rc<RefCell<BTreeMap<Address, MemoryStorage>>>;

const KEYS: usize = 24;

fn kv_settings() -> KvSettings {
    KvSettings {
        auto_commit: true,
        request_timeout_ms: 2_000,
        anti_entropy_interval_ms: 500,
        tombstone_grace_ms: 1_000,
        ..KvSettings::default()
    }
}

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
    sim.add_protocol(move |me, seed| {
        let disk = disks
            .borrow_mut()
            .entry(me.address.clone())
            .or_default()
            .clone();
        let machine =
            KvMachine::new(kv_settings(), me.clone(), disk, seed, 0).expect("memory storage opens");
        // Like the runtime's `cluster-exiting` task: wait (at most 10 s) for the handoff.
        let mut since: Option<u64> = None;
        Box::new(Hosted::new(machine).with_exiting(move |m, now| {
            let start = *since.get_or_insert(now);
            m.misplaced_keys() == 0 || now >= start + 10_000
        }))
    });
    sim
}

/// What a client did, to check the outcome against.
#[derive(Default)]
struct History {
    next_request: u64,
    /// request → (key, value written or None for a delete, values of the read its context
    /// came from).
    writes: BTreeMap<u64, (String, Option<String>, Vec<String>)>,
    /// request → key of a read.
    reads: BTreeMap<u64, String>,
    /// Values whose write was acknowledged.
    acked: BTreeMap<String, String>,
    /// Every value written (acknowledged or not), → its key.
    issued: BTreeMap<String, String>,
    /// value → values of the read its write's context came from.
    saw: BTreeMap<String, Vec<String>>,
    /// Values some write's context came from a read that returned them.
    superseded: BTreeSet<String>,
    /// Each node's clients' last read of each key: (context, values).
    last_read: BTreeMap<(Address, String), (VersionVector, Vec<String>)>,
    /// Events of each node already looked at.
    consumed: BTreeMap<Address, (u64, usize)>,
}

fn values_of(o: &Versioned) -> Vec<String> {
    let mut v: Vec<String> = o
        .values()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    v.sort();
    v
}

/// One random client operation on a random running member.
fn client_op(sim: &mut Simulation, h: &mut History) {
    let running: Vec<Address> = sim
        .running()
        .filter(|(_, n)| n.core().is_initialized())
        .map(|(a, _)| a.clone())
        .collect();
    if running.is_empty() {
        return;
    }
    let at = running[sim.rng.random_range(0..running.len())].clone();
    let key = format!("k{}", sim.rng.random_range(0..KEYS));
    h.next_request += 1;
    let request = h.next_request;
    let op = sim.rng.random_range(0..10);
    let last = h.last_read.get(&(at.clone(), key.clone())).cloned();
    if op < 4 {
        h.reads.insert(request, key.clone());
        sim.with_machine::<Kv, _>(&at, |k, now| {
            k.machine.get(now, request, key, ReadOptions::default())
        });
        return;
    }
    // Writes use the context of the last read about half of the time.
    let with_context = last.is_some() && sim.rng.random_bool(0.6);
    let (context, saw) = match (&last, with_context) {
        (Some((c, v)), true) => (Some(c.clone()), v.clone()),
        _ => (None, Vec::new()),
    };
    if op == 9 && context.is_some() {
        h.writes.insert(request, (key.clone(), None, saw.clone()));
        h.superseded.extend(saw);
        sim.with_machine::<Kv, _>(&at, |k, now| {
            k.machine
                .delete(now, request, key, context, WriteOptions::default())
        });
        return;
    }
    let value = format!("v{request}");
    h.issued.insert(value.clone(), key.clone());
    h.saw.insert(value.clone(), saw.clone());
    h.superseded.extend(saw.iter().cloned());
    h.writes
        .insert(request, (key.clone(), Some(value.clone()), saw));
    let w = if sim.rng.random_bool(0.2) {
        Quorum::One
    } else {
        Quorum::Quorum
    };
    sim.with_machine::<Kv, _>(&at, |k, now| {
        k.machine.put(
            now,
            request,
            key,
            value.into_bytes(),
            context,
            WriteOptions {
                n: None,
                w: Some(w),
            },
        )
    });
}

/// Reads the answers the machines gave since the last call.
fn collect(sim: &Simulation, h: &mut History) {
    for (a, node) in sim.running() {
        let uid = node.core().self_unique_address().uid;
        let Some(k) = sim.machine::<Kv>(a) else {
            continue;
        };
        let (seen_uid, seen) = h.consumed.get(a).copied().unwrap_or((uid, 0));
        let from = if seen_uid == uid { seen } else { 0 };
        for e in &k.events[from.min(k.events.len())..] {
            match e {
                KvEvent::WriteDone {
                    request,
                    result: Ok(()),
                } => {
                    if let Some((key, Some(v), _)) = h.writes.get(request) {
                        h.acked.insert(v.clone(), key.clone());
                    }
                }
                KvEvent::ReadDone {
                    request,
                    result: Ok(r),
                } => {
                    if let Some(key) = h.reads.get(request) {
                        let (ctx, vals) = match &r.object {
                            Some(o) => (o.clock().clone(), values_of(o)),
                            None => (VersionVector::new(), Vec::new()),
                        };
                        h.last_read.insert((a.clone(), key.clone()), (ctx, vals));
                    }
                }
                _ => {}
            }
        }
        h.consumed.insert(a.clone(), (uid, k.events.len()));
    }
}

/// Every version on every running node's disk: (node, key, version).
fn stored(sim: &Simulation, disks: &Disks) -> Vec<(Address, String, Versioned)> {
    let mut out = Vec::new();
    for (a, _) in sim.running() {
        let Some(disk) = disks.borrow().get(a).cloned() else {
            continue;
        };
        for (k, v) in disk.records(Table::Objects) {
            let key = String::from_utf8_lossy(&k[3..]).into_owned();
            let o = decode_record(&v)
                .unwrap_or_else(|e| panic!("{a}: stored version of {key} is invalid: {e}"));
            out.push((a.clone(), key, o));
        }
    }
    out
}

/// The per-step check: every stored version is well-formed and holds only written values
/// of its own key.
fn check_step(sim: &Simulation, disks: &Disks, h: &History) -> Result<(), String> {
    if let Ok(k) = std::env::var("CONCORD_SIM_TRACE_KEY") {
        let mut line = String::new();
        for (a, key, o) in stored(sim, disks) {
            if key == k {
                line.push_str(&format!(" {}={:?}/{:?}", a.host, values_of(&o), o.clock()));
            }
        }
        eprintln!("{} {}", sim.now, line);
    }
    for (a, key, o) in stored(sim, disks) {
        for v in values_of(&o) {
            if h.issued.get(&v) != Some(&key) {
                return Err(format!("{a}: {key} holds {v}, never written to it"));
            }
        }
    }
    Ok(())
}

/// The end check: N replicas, nothing lost, siblings only for concurrent writes.
fn check_end(sim: &Simulation, disks: &Disks, h: &History) -> Result<(), String> {
    let running: Vec<Address> = sim.running().map(|(a, _)| a.clone()).collect();
    let ring = sim
        .machine::<Kv>(&running[0])
        .ok_or("no machine")?
        .machine
        .ring()
        .clone();
    let n = kv_settings().n;
    let mut by_key: BTreeMap<String, BTreeMap<Address, Versioned>> = BTreeMap::new();
    for (a, key, o) in stored(sim, disks) {
        by_key.entry(key).or_default().insert(a, o);
    }
    for (key, holders) in &by_key {
        let owners: BTreeSet<Address> = ring
            .preference_list(segment_of(key_hash(key)), n)
            .into_iter()
            .map(|u| u.address.clone())
            .collect();
        let holding: BTreeSet<Address> = holders.keys().cloned().collect();
        if holding != owners {
            return Err(format!("{key}: held by {holding:?}, owners {owners:?}"));
        }
        let digests: BTreeSet<u64> = holders.values().map(Versioned::digest).collect();
        if digests.len() != 1 {
            return Err(format!("{key}: replicas differ: {holders:?}"));
        }
        let o = holders.values().next().ok_or("empty")?;
        let present = values_of(o);
        for a in &present {
            for b in &present {
                if a != b && h.saw.get(b).is_some_and(|s| s.contains(a)) {
                    return Err(format!("{key}: {b} saw {a}, yet both are siblings"));
                }
            }
        }
    }
    for (v, key) in &h.acked {
        let present = by_key
            .get(key)
            .and_then(|hs| hs.values().next())
            .is_some_and(|o| values_of(o).contains(v));
        if !present && !h.superseded.contains(v) {
            if std::env::var_os("CONCORD_SIM_TRACE").is_some() {
                for (r, w) in &h.writes {
                    if &w.0 == key {
                        eprintln!(
                            "write {r}: {w:?} acked={}",
                            w.1.as_ref().is_some_and(|x| h.acked.contains_key(x))
                        );
                    }
                }
                for (a, k, o) in stored(sim, disks) {
                    if &k == key {
                        eprintln!("{a}: {o:?}");
                    }
                }
            }
            return Err(format!("acknowledged {v} of {key} is lost"));
        }
    }
    Ok(())
}

fn seeds(default: u64) -> u64 {
    std::env::var("CONCORD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn random_faults_lose_no_acknowledged_write_and_heal_to_n_replicas() {
    let first: u64 = std::env::var("CONCORD_SIM_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let count = seeds(6);
    for seed in first..first + count {
        let disks: Disks = Rc::default();
        let mut sim = sim(2_000 + seed, 0.01, &disks);
        let mut addrs = sim.form_cluster(5, 60_000).expect("forms");
        // Two spare addresses where new nodes may join.
        addrs.extend((5..7).map(concord_sim::node_address));
        sim.run_for(2_000);
        let mut h = History::default();
        let mut faults: Vec<Fault> = Vec::new();
        let mut membership = concord_sim::invariants::Checker::default();
        let fail = |e: String, faults: &[Fault]| -> ! {
            panic!("seed {seed}: {e}\nfaults: {faults:?}\nreplay: CONCORD_SIM_SEED_START={seed} CONCORD_SIM_SEEDS=1 cargo test -p concord-sim --test kv")
        };
        for _ in 0..6 {
            let steps = sim.rng.random_range(10..40);
            for _ in 0..steps {
                for _ in 0..sim.rng.random_range(0..4) {
                    client_op(&mut sim, &mut h);
                }
                sim.run_for(100);
                collect(&sim, &mut h);
                if let Err(e) = check_step(&sim, &disks, &h) {
                    fail(e, &faults);
                }
                if std::env::var_os("CONCORD_SIM_TRACE").is_some() {
                    concord_sim::trace::print_views(&sim);
                }
                if let Err(e) = membership.check_step(&sim) {
                    fail(format!("membership: {e}"), &faults);
                }
            }
            let f = pick_any_fault(&mut sim, &addrs);
            if std::env::var_os("CONCORD_SIM_TRACE").is_some() {
                eprintln!("{:>8} FAULT {f:?}", sim.now);
            }
            apply(&mut sim, &f, &addrs);
            faults.push(f);
        }
        // Heal, bring everyone back, and let it settle with no more load.
        sim.run_for(3_000);
        collect(&sim, &mut h);
        if std::env::var_os("CONCORD_SIM_TRACE").is_some() {
            for (a, n) in sim.nodes.iter() {
                eprintln!("before recovery {} {}", a.host, n.membership_line());
            }
        }
        recover_everyone(&mut sim, &addrs);
        let settled = sim.run_until_cond(120_000, 500, |s| {
            s.all_up_converged() && s.running().count() == addrs.len()
        });
        if settled.is_none() {
            for (a, n) in sim.nodes.iter() {
                eprintln!(
                    "{} {} alive={} reason={:?} init={}",
                    a.host,
                    n.membership_line(),
                    n.alive,
                    n.core().shutdown_reason(),
                    n.core().is_initialized()
                );
            }
            fail("membership does not settle".into(), &faults);
        }
        collect(&sim, &mut h);
        let quiet = sim.run_until_cond(120_000, 1_000, |s| check_end(s, &disks, &h).is_ok());
        if quiet.is_none() {
            if let Err(e) = check_end(&sim, &disks, &h) {
                fail(e, &faults);
            }
        }
        assert!(
            !h.acked.is_empty(),
            "seed {seed}: the workload wrote something"
        );
        if std::env::var_os("CONCORD_SIM_TRACE").is_some() {
            let siblings = stored(&sim, &disks)
                .iter()
                .map(|(_, _, o)| o.siblings().len())
                .max()
                .unwrap_or(0);
            eprintln!(
                "seed {seed}: {} writes ({} acknowledged), {} reads, most siblings {siblings}; faults {faults:?}",
                h.issued.len(),
                h.acked.len(),
                h.reads.len()
            );
        }
    }
}

#[test]
fn a_node_that_was_down_catches_up_by_anti_entropy_alone() {
    let disks: Disks = Rc::default();
    let mut sim = sim(11, 0.0, &disks);
    let addrs = sim.form_cluster(3, 60_000).expect("forms");
    sim.run_for(2_000);
    // Node 2 is cut off (but stays a member) while keys are written with W=2.
    sim.partitions = Partitions::split(&[
        addrs[..2].iter().cloned().collect(),
        [addrs[2].clone()].into_iter().collect(),
    ]);
    for i in 0..200u64 {
        sim.with_machine::<Kv, _>(&addrs[0], |k, now| {
            k.machine.put(
                now,
                i,
                format!("key-{i}"),
                b"v".to_vec(),
                None,
                WriteOptions::default(),
            )
        });
    }
    sim.run_for(300);
    let acked = sim
        .machine::<Kv>(&addrs[0])
        .unwrap()
        .events
        .iter()
        .filter(|e| matches!(e, KvEvent::WriteDone { result: Ok(()), .. }))
        .count();
    assert_eq!(acked, 200);
    sim.partitions = Partitions::default();
    let caught_up = sim.run_until_cond(30_000, 200, |_| {
        disks
            .borrow()
            .get(&addrs[2])
            .is_some_and(|d| d.len(Table::Objects) == 200)
    });
    assert!(caught_up.is_some(), "node 2 holds every key again");
}
