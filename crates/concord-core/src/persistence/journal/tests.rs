//! The journal between machines on a small deterministic network: message loss,
//! duplication and reordering, partitions, node restarts (a new incarnation on the same
//! disk, so the ring changes and handoff runs) and — the case the protocol exists for —
//! two writers of one log at once on different nodes. At every step no two different
//! events are known at one sequence number of a log (known: acknowledged to a writer or
//! returned by a recovery or read), and a recovery reaches every write acknowledged before
//! it began. After the faults heal, one more writer recovers each log: its history holds
//! every acknowledged write, once and in order, with no gap.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use stream_check::{check_stream, Reader};

#[path = "tests_commit.rs"]
mod commit;
#[path = "tests_fencing.rs"]
mod fencing;
#[path = "tests_held.rs"]
mod held;
#[path = "tests_misplaced.rs"]
mod misplaced;
#[path = "tests_restart.rs"]
mod restart;
#[path = "tests_shrink.rs"]
mod shrink;
#[path = "tests_snapshot.rs"]
mod snapshot;
#[path = "tests_stream.rs"]
mod stream_check;
use crate::address::Address;
use crate::gossip::Gossip;
use crate::kv::storage::MemoryStorage;
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;

const NODES: u16 = 5;
const LOGS: usize = 4;

struct Net {
    rng: StdRng,
    now: u64,
    disks: Vec<MemoryStorage>,
    uids: Vec<u64>,
    machines: Vec<JournalMachine<MemoryStorage>>,
    /// (deliver at, sequence, from, to, message)
    queue: BTreeMap<(u64, u64), (UniqueAddress, UniqueAddress, JournalMessage)>,
    seq: u64,
    loss: f64,
    cut: BTreeSet<(usize, usize)>,
    /// Nodes removed from the membership (destroyed).
    gone: BTreeSet<usize>,
    /// Nodes that left the membership gracefully: out of the ring, still running.
    left: BTreeSet<usize>,
    events: Vec<(usize, JournalEvent)>,
}

fn ua(i: usize, uid: u64) -> UniqueAddress {
    UniqueAddress::new(Address::new("s", "h", 2550 + i as u16), uid)
}

impl Net {
    fn new(seed: u64, loss: f64) -> Net {
        let settings = JournalSettings {
            auto_commit: true,
            request_timeout_ms: 1_000,
            virtual_nodes: 8,
            ..JournalSettings::default()
        };
        let disks: Vec<MemoryStorage> = (0..NODES).map(|_| MemoryStorage::new()).collect();
        let uids: Vec<u64> = (0..NODES as u64).map(|i| i + 1).collect();
        let machines = (0..NODES as usize)
            .map(|i| JournalMachine::new(settings.clone(), ua(i, uids[i]), disks[i].clone(), 0))
            .collect();
        let mut net = Net {
            rng: StdRng::seed_from_u64(seed),
            now: 0,
            disks,
            uids,
            machines,
            queue: BTreeMap::new(),
            seq: 0,
            loss,
            cut: BTreeSet::new(),
            gone: BTreeSet::new(),
            left: BTreeSet::new(),
            events: Vec::new(),
        };
        net.publish_view();
        net
    }

    fn publish_view(&mut self) {
        let mut g = Gossip::empty();
        let member = |i: &usize| !self.gone.contains(i) && !self.left.contains(i);
        for i in (0..NODES as usize).filter(member) {
            let m = Member::joining(ua(i, self.uids[i]), BTreeSet::new(), "1")
                .with_up(i as u32 + 1)
                .with_status(MemberStatus::Up);
            g.members.insert(ua(i, self.uids[i]), m);
        }
        let up: Vec<usize> = (0..NODES as usize)
            .filter(|i| !self.gone.contains(i))
            .collect();
        for i in up {
            let view = MembershipView::of(&MembershipState::new(g.clone(), ua(i, self.uids[i])), 1);
            self.machines[i].handle_membership(
                self.now,
                &view,
                MembershipChange::CurrentClusterState,
            );
            self.drain(i);
        }
    }

    /// Destroys node `g` (cut from every node, out of the membership; the view is not
    /// published).
    fn destroy(&mut self, g: usize) {
        self.gone.insert(g);
        for i in 0..NODES as usize {
            if i != g {
                self.cut.insert((i.min(g), i.max(g)));
            }
        }
    }

    fn restart(&mut self, i: usize) {
        self.uids[i] += 100;
        let settings = self.machines[i].settings.clone();
        self.machines[i] = JournalMachine::new(
            settings,
            ua(i, self.uids[i]),
            self.disks[i].clone(),
            self.now,
        );
        self.publish_view();
    }

    fn drain(&mut self, i: usize) {
        let me = ua(i, self.uids[i]);
        while let Some(t) = self.machines[i].poll_transmit() {
            let to_i = (t.to.port - 2550) as usize;
            if self.cut.contains(&(i.min(to_i), i.max(to_i))) || self.rng.random_bool(self.loss) {
                continue;
            }
            let copies = if self.rng.random_bool(self.loss) {
                2
            } else {
                1
            };
            for _ in 0..copies {
                let at = self.now + self.rng.random_range(1..20);
                self.seq += 1;
                let to = UniqueAddress::new(t.to.clone(), t.to_uid.unwrap_or(0));
                self.queue
                    .insert((at, self.seq), (me.clone(), to, t.message.clone()));
            }
        }
        while let Some(e) = self.machines[i].poll_event() {
            self.events.push((i, e));
        }
    }

    /// Runs `ms` more after node `i` was asked request `r`, and takes its answer.
    fn answer(&mut self, i: usize, r: u64, ms: u64) -> JournalEvent {
        self.drain(i);
        self.run_until(self.now + ms);
        self.events
            .drain(..)
            .find(|(_, e)| e.request == r)
            .expect("an answer")
            .1
    }

    /// Runs until `until`, ms.
    fn run_until(&mut self, until: u64) {
        loop {
            let next_msg = self.queue.keys().next().map(|k| k.0);
            let next_timer = (0..NODES as usize)
                .filter_map(|i| self.machines[i].poll_timeout())
                .min();
            let next = [next_msg, next_timer].into_iter().flatten().min();
            match next {
                Some(t) if t <= until => {
                    self.now = self.now.max(t);
                    if next_msg == Some(t) {
                        let key = *self.queue.keys().next().expect("a message");
                        let (from, to, msg) = self.queue.remove(&key).expect("a message");
                        let i = (to.address.port - 2550) as usize;
                        if self.uids[i] == to.uid {
                            self.machines[i].handle_message(self.now, &from, msg);
                            self.drain(i);
                        }
                    } else {
                        for i in 0..NODES as usize {
                            if self.machines[i]
                                .poll_timeout()
                                .is_some_and(|d| d <= self.now)
                            {
                                self.machines[i].handle_timeout(self.now);
                                self.drain(i);
                            }
                        }
                    }
                }
                _ => {
                    self.now = until;
                    return;
                }
            }
        }
    }
}

/// A writer of one log on one node.
#[derive(Clone, Debug)]
enum Writer {
    Idle,
    Recovering { acked_before: u64 },
    Ready { next: u64 },
    Appending { write: Entry },
}

#[derive(Default)]
struct Known {
    /// log → seq → event: every event acknowledged or read.
    events: BTreeMap<usize, BTreeMap<u64, Vec<u8>>>,
    /// log → highest acknowledged seq.
    acked: BTreeMap<usize, u64>,
    /// log → acknowledged seqs.
    acked_seqs: BTreeMap<usize, BTreeSet<u64>>,
}

impl Known {
    fn learn(&mut self, log: usize, entries: &[Entry], what: &str) {
        let known = self.events.entry(log).or_default();
        for e in entries {
            for (k, ev) in e.events.iter().enumerate() {
                let seq = e.first_seq + k as u64;
                if let Some(old) = known.insert(seq, ev.clone()) {
                    assert_eq!(
                        &old, ev,
                        "log {log} seq {seq}: two different events ({what})"
                    );
                }
            }
        }
    }
}

fn log_name(l: usize) -> String {
    format!("ecounter|{l}")
}

/// One run: `restarts` is the chance of a node restart per 10 ms step while faults last.
fn run(seed: u64, restarts: f64) -> (usize, u64, usize) {
    let mut net = Net::new(seed, 0.05);
    let mut known = Known::default();
    // (node, log) → writer; at times two nodes write one log.
    let mut writers: BTreeMap<(usize, usize), Writer> = BTreeMap::new();
    let mut requests: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    let mut appends: BTreeMap<u64, Entry> = BTreeMap::new();
    let mut reader = Reader::default();
    let mut next_request = 0u64;
    let mut tag = 0u32;
    let end_faults = 20_000;
    while net.now < end_faults + 10_000 {
        let faults = net.now < end_faults;
        // Faults.
        if faults && net.rng.random_bool(restarts) {
            let i = net.rng.random_range(0..NODES as usize);
            net.restart(i);
            writers.retain(|(n, _), _| *n != i);
        }
        if faults && net.rng.random_bool(0.03) {
            let a = net.rng.random_range(0..NODES as usize);
            let b = net.rng.random_range(0..NODES as usize);
            if a != b {
                net.cut.insert((a.min(b), a.max(b)));
            }
        }
        if !faults || net.rng.random_bool(0.05) {
            net.cut.clear();
        }
        if !faults {
            net.loss = 0.0;
        }
        // New writers: normally one per log; during faults sometimes a second.
        for l in 0..LOGS {
            let active = writers.keys().filter(|(_, wl)| *wl == l).count();
            if active == 0 || (faults && active == 1 && net.rng.random_bool(0.02)) {
                let i = net.rng.random_range(0..NODES as usize);
                writers.entry((i, l)).or_insert(Writer::Idle);
            }
        }
        // Step writers.
        for ((i, l), w) in writers.iter_mut() {
            match w.clone() {
                Writer::Idle => {
                    next_request += 1;
                    requests.insert(next_request, (*i, *l));
                    let acked_before = known.acked.get(l).copied().unwrap_or(0);
                    *w = Writer::Recovering { acked_before };
                    net.machines[*i].recover(net.now, next_request, log_name(*l), 1, 10_000);
                    net.drain(*i);
                }
                Writer::Ready { next } if net.rng.random_bool(0.5) => {
                    next_request += 1;
                    requests.insert(next_request, (*i, *l));
                    let n = net.rng.random_range(1..=3);
                    let events = (0..n)
                        .map(|_| {
                            tag += 1;
                            format!("{i}/{tag}").into_bytes()
                        })
                        .collect();
                    let write = Entry {
                        first_seq: next,
                        ballot: Ballot::ZERO,
                        timestamp_ms: net.now,
                        events,
                    };
                    *w = Writer::Appending {
                        write: write.clone(),
                    };
                    appends.insert(next_request, write.clone());
                    net.machines[*i].append(net.now, next_request, log_name(*l), write, false);
                    net.drain(*i);
                }
                _ => {}
            }
        }
        // A reader follows the events-by-type stream all along, from one node or another.
        if reader.pending.is_none() {
            next_request += 1;
            reader.pending = Some(next_request);
            let i = net.rng.random_range(0..NODES as usize);
            net.machines[i].events_by_type(
                net.now,
                next_request,
                "counter".into(),
                0..=1023,
                reader.after,
                200,
            );
            net.drain(i);
        }
        net.run_until(net.now + 10);
        // Results.
        for (_, ev) in std::mem::take(&mut net.events) {
            if reader.pending == Some(ev.request) {
                reader.pending = None;
                // Unavailable (a replica did not answer): it reads again.
                if let Ok(JournalOutput::Events(page)) = ev.result {
                    reader.take(page, seed);
                }
                continue;
            }
            let Some((i, l)) = requests.remove(&ev.request) else {
                continue;
            };
            let Some(w) = writers.get_mut(&(i, l)) else {
                // The writer is gone (its node restarted): what it was told still counts.
                if let (Some(write), Ok(JournalOutput::Appended)) =
                    (appends.remove(&ev.request), &ev.result)
                {
                    known.learn(l, std::slice::from_ref(&write), "append");
                    known
                        .acked_seqs
                        .entry(l)
                        .or_default()
                        .extend(write.first_seq..=write.last_seq());
                }
                if let Ok(JournalOutput::Recovered { page, .. }) = &ev.result {
                    known.learn(l, page, "recovery of a gone writer");
                }
                continue;
            };
            appends.remove(&ev.request);
            match (w.clone(), ev.result) {
                (
                    Writer::Recovering { acked_before, .. },
                    Ok(JournalOutput::Recovered { page, highest, .. }),
                ) => {
                    assert!(highest >= acked_before, "seed {seed} log {l}: recovered to {highest}, {acked_before} was acknowledged before");
                    known.learn(l, &page, "recovery");
                    let read_to = page.last().map_or(0, Entry::last_seq);
                    assert!(
                        read_to == highest
                            || page.iter().map(|e| e.events.len()).sum::<usize>() >= 10_000,
                        "seed {seed}: a recovery page ends at {read_to} of {highest}"
                    );
                    *w = Writer::Ready { next: highest + 1 };
                }
                (Writer::Appending { write, .. }, Ok(JournalOutput::Appended)) => {
                    known.learn(l, std::slice::from_ref(&write), "append");
                    let a = known.acked.entry(l).or_default();
                    *a = (*a).max(write.last_seq());
                    known
                        .acked_seqs
                        .entry(l)
                        .or_default()
                        .extend(write.first_seq..=write.last_seq());
                    *w = Writer::Ready {
                        next: write.last_seq() + 1,
                    };
                }
                (_, Err(_)) => {
                    // Conflict or unavailable: the writer stops; the log may get another.
                    writers.remove(&(i, l));
                }
                (state, result) => panic!("seed {seed}: {state:?} got {result:?}"),
            }
        }
    }
    // Healed: one recovery of each log from node 0 must hold every acknowledged write.
    for l in 0..LOGS {
        next_request += 1;
        let r = next_request;
        net.machines[0].recover(net.now, r, log_name(l), 1, 100_000);
        let ev = net.answer(0, r, 3_000);
        let Ok(JournalOutput::Recovered { page, highest, .. }) = ev.result else {
            panic!(
                "seed {seed} log {l}: the healed recovery failed: {:?}",
                ev.result
            )
        };
        known.learn(l, &page, "final recovery");
        let seqs: Vec<u64> = page
            .iter()
            .flat_map(|e| e.first_seq..=e.last_seq())
            .collect();
        assert_eq!(
            seqs,
            (1..=highest).collect::<Vec<_>>(),
            "seed {seed} log {l}: a gap-free history"
        );
        for s in known.acked_seqs.get(&l).into_iter().flatten() {
            assert!(
                *s <= highest,
                "seed {seed} log {l}: acknowledged {s} lost (highest {highest})"
            );
        }
    }
    let live = check_stream(&mut net, &known, seed, reader);
    let acked = known.acked_seqs.values().map(BTreeSet::len).sum();
    let conflicts = net.machines.iter().map(|m| m.stats().conflicts).sum();
    (acked, conflicts, live)
}

/// Runs per test: `CONCORD_JOURNAL_SEEDS` (40).
fn seeds() -> u64 {
    std::env::var("CONCORD_JOURNAL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

#[test]
fn no_two_events_at_one_sequence_number_under_faults_and_competing_writers() {
    let seeds = seeds();
    let (mut acked, mut conflicts) = (0, 0);
    for seed in 0..seeds {
        let (a, c, _) = run(seed, 0.02);
        assert!(a > 100, "seed {seed}: only {a} events acknowledged");
        acked += a;
        conflicts += c;
    }
    // The run is not vacuous: writers raced and lost (47 in the 40 seeds before a restarted
    // replica's senders waited up to 500 ms for its holding, 26 with it, 55 since they
    // wait up to 5 s and it tells one sender at a time: every change of the handoffs
    // changes the runs' later draws).
    assert!(
        conflicts > seeds / 2,
        "{conflicts} conflicts in {seeds} seeds"
    );
    eprintln!("{acked} events acknowledged, {conflicts} conflicts in {seeds} seeds");
}

/// The events-by-type stream read while replicas fail now and then (a restart every
/// 5 s or so, loss, partitions, two writers): a reader that moves from node to node and
/// resumes after its last offset misses no acknowledged event and reads only chosen ones.
#[test]
fn the_stream_is_read_at_least_once_while_replicas_fail() {
    let seeds = seeds();
    let (mut acked, mut live) = (0, 0);
    for seed in 0..seeds / 2 {
        let (a, _, l) = run(1_000_000 + seed, 0.002);
        acked += a;
        live += l;
    }
    eprintln!("{live} events read while faults went on, {acked} acknowledged in all");
    assert!(
        live * 4 > acked,
        "the reader read too little while faults went on: {live} of {acked}"
    );
}
