//! Cluster Singleton in the simulator: every node hosts the singleton's manager and proxy;
//! the test plays the runtime (it "runs" the instance between `StartInstance` and the end
//! of its stop, answers asks, and hands over in the `cluster-exiting` phase). Every
//! activation interval is recorded against the simulation's one clock; any two that
//! overlap fail the test — across graceful leave of the oldest, crash of the oldest with
//! split brain resolution, and random partitions, pauses, crashes and restarts.

use std::collections::VecDeque;

use concord_core::singleton::{
    ClusterSingleton, SingletonEvent, SingletonMessage, SingletonSettings,
};
use concord_core::{
    Address, MembershipChange, MembershipView, ProtocolId, ProtocolMachine, Transmit, UniqueAddress,
};
use concord_sim::network::{NetworkConfig, Partitions};
use concord_sim::schedule::{apply, pick_fault, sim_settings, Fault};
use concord_sim::{Hosted, Simulation};
use rand::Rng;

/// The test's stand-in for the runtime around one node's singleton machine.
struct SingletonHost {
    inner: ClusterSingleton,
    /// How long the instance takes to stop, ms.
    stop_delay_ms: u64,
    stop_at: Option<u64>,
    /// (start, end, incarnation) of each activation on this node.
    intervals: Vec<(u64, Option<u64>, u64)>,
    /// Payloads the instance received, with the incarnation that got each.
    received: Vec<(u64, Vec<u8>)>,
    /// Replies to this node's asks.
    replies: Vec<(u64, Vec<u8>)>,
    exiting_started: bool,
    exiting_done: bool,
    out: VecDeque<SingletonEvent>,
}

impl SingletonHost {
    fn new(me: &UniqueAddress, seed: u64, settings: SingletonSettings) -> Self {
        SingletonHost {
            inner: ClusterSingleton::new(settings, me.clone(), seed),
            stop_delay_ms: 50 + seed % 200,
            stop_at: None,
            intervals: Vec::new(),
            received: Vec::new(),
            replies: Vec::new(),
            exiting_started: false,
            exiting_done: false,
            out: VecDeque::new(),
        }
    }

    fn running(&self) -> Option<u64> {
        self.intervals
            .last()
            .and_then(|(_, end, inc)| end.is_none().then_some(*inc))
    }

    fn react(&mut self, now: u64) {
        while let Some(e) = self.inner.poll_event() {
            match &e {
                SingletonEvent::StartInstance { incarnation } => {
                    assert!(self.running().is_none(), "started twice on one node");
                    self.intervals.push((now, None, *incarnation));
                }
                SingletonEvent::StopInstance => {
                    self.stop_at.get_or_insert(now + self.stop_delay_ms);
                }
                SingletonEvent::Deliver { from, payload, ask } => {
                    let inc = self
                        .running()
                        .expect("delivered only to a running instance");
                    self.received.push((inc, payload.clone()));
                    if let Some(ask) = ask {
                        let reply = inc.to_le_bytes().to_vec();
                        let from = from.clone();
                        self.inner.reply(now, &from, *ask, reply);
                    }
                }
                SingletonEvent::Reply { ask, payload } => {
                    self.replies.push((*ask, payload.clone()))
                }
                SingletonEvent::ExitingDone => self.exiting_done = true,
                _ => {}
            }
            self.out.push_back(e);
        }
    }

    fn exiting(&mut self, now: u64) -> bool {
        if !self.exiting_started {
            self.exiting_started = true;
            self.inner.self_exiting(now);
            self.react(now);
        }
        self.exiting_done
    }
}

impl ProtocolMachine for SingletonHost {
    type Message = SingletonMessage;
    type Event = SingletonEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::SINGLETON
    }

    fn handle_message(&mut self, now: u64, from: &UniqueAddress, m: SingletonMessage) {
        self.inner.handle_message(now, from, m);
        self.react(now);
    }

    fn handle_membership(&mut self, now: u64, view: &MembershipView, change: MembershipChange) {
        self.inner.handle_membership(now, view, change);
        self.react(now);
    }

    fn handle_timeout(&mut self, now: u64) {
        if self.stop_at.is_some_and(|t| t <= now) {
            self.stop_at = None;
            if let Some(last) = self.intervals.last_mut() {
                last.1.get_or_insert(now);
            }
            self.inner.instance_terminated(now);
        }
        self.inner.handle_timeout(now);
        self.react(now);
    }

    fn poll_transmit(&mut self) -> Option<Transmit<SingletonMessage>> {
        self.inner.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<SingletonEvent> {
        self.out.pop_front()
    }

    fn poll_timeout(&self) -> Option<u64> {
        match (self.inner.poll_timeout(), self.stop_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

type Host = Hosted<SingletonHost>;

fn sim(seed: u64, loss: f64, removal_margin_ms: u64) -> Simulation {
    let net = NetworkConfig {
        min_delay_ms: 1,
        max_delay_ms: 20,
        loss,
        duplication: 0.0,
        // Ordered per link, as the runtime's lanes are: the proxy's order rests on it.
        ordered: true,
    };
    let mut sim = Simulation::new(seed, sim_settings(), net);
    sim.add_protocol(move |me, seed| {
        let settings = SingletonSettings {
            removal_margin_ms,
            ..Default::default()
        };
        Box::new(
            Hosted::new(SingletonHost::new(me, seed, settings))
                .with_exiting(|h, now| h.exiting(now)),
        )
    });
    sim
}

/// Every activation interval in the simulation (an instance on a node that stopped
/// running ends when the node did, at the latest at `now`).
#[derive(Default)]
struct Activations {
    /// (node, incarnation) → (start, end)
    closed: Vec<(Address, u64, u64, u64)>,
}

impl Activations {
    /// Closes instances of nodes that are no longer running (crashed or shut down).
    fn observe(&mut self, sim: &Simulation) {
        for (a, n) in sim.nodes.iter() {
            if n.is_running() {
                continue;
            }
            if let Some(h) = sim.machine::<Host>(a) {
                for (start, end, inc) in &h.machine.intervals {
                    if end.is_none() && !self.closed.iter().any(|c| c.0 == *a && c.1 == *inc) {
                        self.closed.push((a.clone(), *inc, *start, sim.now));
                    }
                }
            }
        }
    }

    /// Every interval, open ones ending at `now`.
    fn all(&self, sim: &Simulation) -> Vec<(Address, u64, u64, u64)> {
        let mut v = self.closed.clone();
        for (a, _) in sim.nodes.iter() {
            if let Some(h) = sim.machine::<Host>(a) {
                for (start, end, inc) in &h.machine.intervals {
                    if self.closed.iter().any(|c| c.0 == *a && c.1 == *inc) {
                        continue;
                    }
                    v.push((a.clone(), *inc, *start, end.unwrap_or(sim.now)));
                }
            }
        }
        v.sort_by_key(|x| x.2);
        v
    }

    /// Fails if two intervals overlap.
    fn check(&self, sim: &Simulation) -> Result<(), String> {
        let all = self.all(sim);
        for w in all.windows(2) {
            if w[1].2 < w[0].3 {
                return Err(format!("two singletons at once: {:?} and {:?}", w[0], w[1]));
            }
        }
        Ok(())
    }
}

/// Nodes running the instance now.
fn running_on(sim: &Simulation) -> Vec<Address> {
    sim.running()
        .filter(|(a, _)| {
            sim.machine::<Host>(a)
                .is_some_and(|h| h.machine.running().is_some())
        })
        .map(|(a, _)| a.clone())
        .collect()
}

/// Runs in 100 ms steps, checking for overlaps, until `cond` or `max_ms`.
fn run_checked(
    sim: &mut Simulation,
    acts: &mut Activations,
    max_ms: u64,
    cond: impl Fn(&Simulation) -> bool,
) -> Option<u64> {
    let start = sim.now;
    let trace = std::env::var("CONCORD_SIM_TRACE").is_ok();
    while sim.now - start <= max_ms {
        if trace {
            for (a, n) in sim.nodes.iter() {
                let h = sim
                    .machine::<Host>(a)
                    .map(|h| format!("{:?} {:?}", h.machine.inner.state(), h.machine.running()));
                eprintln!("    {} {} {:?} {}", sim.now, a.host, h, n.membership_line());
            }
        }
        acts.observe(sim);
        acts.check(sim).unwrap();
        if cond(sim) {
            return Some(sim.now - start);
        }
        sim.run_for(100);
    }
    None
}

#[test]
fn graceful_leave_of_the_oldest_hands_over_without_overlap() {
    let mut sim = sim(1, 0.0, 2_000);
    let addrs = sim.form_cluster(5, 60_000).expect("forms");
    let mut acts = Activations::default();
    run_checked(&mut sim, &mut acts, 10_000, |s| {
        running_on(s) == vec![node(0)]
    })
    .expect("the oldest runs it");
    let leave_at = sim.now;
    sim.with_node(&addrs[0], |c, now| c.leave(now, &node(0)).ok());
    let took = run_checked(&mut sim, &mut acts, 30_000, |s| {
        running_on(s) == vec![node(1)]
    })
    .expect("the next oldest runs it");
    let h0 = sim.machine::<Host>(&addrs[0]).unwrap();
    let h1 = sim.machine::<Host>(&addrs[1]).unwrap();
    let old_end = h0.machine.intervals[0].1.expect("the old instance stopped");
    let new_start = h1.machine.intervals[0].0;
    assert!(
        old_end <= new_start,
        "stopped at {old_end}, started at {new_start}"
    );
    assert_eq!(h0.machine.inner.manager_stats().hand_overs, 1);
    eprintln!(
        "hand-over took {took} ms (new instance {} ms after the leave)",
        new_start - leave_at
    );
    run_checked(&mut sim, &mut acts, 5_000, |_| false);
}

fn node(i: u32) -> Address {
    concord_sim::node_address(i)
}

#[test]
fn crash_of_the_oldest_moves_it_only_after_removal_and_the_margin() {
    let mut sim = sim(2, 0.0, 3_000);
    let addrs = sim.form_cluster(5, 60_000).expect("forms");
    let mut acts = Activations::default();
    run_checked(&mut sim, &mut acts, 10_000, |s| {
        running_on(s) == vec![node(0)]
    })
    .unwrap();
    sim.crash(&addrs[0]);
    let crashed_at = sim.now;
    run_checked(&mut sim, &mut acts, 60_000, |s| {
        running_on(s) == vec![node(1)]
    })
    .expect("the next oldest takes over");
    let removed_seen = sim
        .node(&addrs[1])
        .core()
        .latest_gossip()
        .members
        .keys()
        .all(|m| m.address != node(0));
    assert!(removed_seen, "the crashed node was removed first");
    let start = sim.machine::<Host>(&addrs[1]).unwrap().machine.intervals[0].0;
    assert!(start >= crashed_at + 3_000, "waited the removal margin");
}

#[test]
fn the_proxy_delivers_in_order_across_a_hand_over_and_asks_get_answers() {
    let mut sim = sim(3, 0.0, 2_000);
    let addrs = sim.form_cluster(4, 60_000).expect("forms");
    let mut acts = Activations::default();
    run_checked(&mut sim, &mut acts, 10_000, |s| {
        running_on(s) == vec![node(0)]
    })
    .unwrap();
    let mut sent = 0u32;
    let mut tell = |sim: &mut Simulation, n: u32| {
        for _ in 0..n {
            let payload = sent.to_le_bytes().to_vec();
            let ask = sent.is_multiple_of(10).then_some(u64::from(sent));
            sim.with_machine::<Host, _>(&addrs[3], |h, now| {
                h.machine.inner.tell(now, payload.clone(), ask);
                h.machine.react(now);
            });
            sent += 1;
        }
    };
    tell(&mut sim, 50);
    sim.run_for(500);
    sim.with_node(&addrs[0], |c, now| c.leave(now, &node(0)).ok());
    for _ in 0..40 {
        tell(&mut sim, 5);
        sim.run_for(100);
        acts.observe(&sim);
        acts.check(&sim).unwrap();
    }
    run_checked(&mut sim, &mut acts, 30_000, |s| {
        s.machine::<Host>(&node(1)).is_some_and(|h| {
            h.machine.received.len() as u32
                + s.machine::<Host>(&node(0))
                    .map_or(0, |h| h.machine.received.len() as u32)
                >= 250
        })
    })
    .expect("everything delivered");
    let mut got: Vec<u32> = Vec::new();
    for a in [&addrs[0], &addrs[1]] {
        let h = sim.machine::<Host>(a).unwrap();
        got.extend(
            h.machine
                .received
                .iter()
                .map(|(_, p)| u32::from_le_bytes(p[..4].try_into().unwrap())),
        );
    }
    assert_eq!(
        got,
        (0..250).collect::<Vec<_>>(),
        "each message once, in the order sent"
    );
    let h3 = sim.machine::<Host>(&addrs[3]).unwrap();
    assert_eq!(h3.machine.replies.len(), 25, "every ask answered");
    assert_eq!(h3.machine.inner.proxy_stats().dropped, 0);
}

#[test]
fn random_faults_never_run_two_singletons_at_once() {
    let mut checked = 0;
    let mut moves = 0;
    let seeds = seeds(40);
    let first: u64 = std::env::var("CONCORD_SIM_SEED_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    for seed in first..first + seeds {
        // Removal margin above the longest pause (15 s), as the docs require.
        let mut sim = sim(500 + seed, 0.01, 20_000);
        let addrs = sim.form_cluster(5, 60_000).expect("forms");
        let mut acts = Activations::default();
        let mut faults: Vec<Fault> = Vec::new();
        let mut last_pause: std::collections::BTreeMap<Address, u64> = Default::default();
        for _ in 0..8 {
            let gap = sim.rng.random_range(500..6_000);
            let end = sim.now + gap;
            while sim.now < end {
                sim.run_for(100);
                acts.observe(&sim);
                acts.check(&sim)
                    .unwrap_or_else(|e| panic!("seed {seed}: {e}; faults {faults:?}"));
            }
            // Half the faults hit the node running the singleton.
            let target = running_on(&sim).first().cloned();
            let f = match target {
                Some(t) if sim.rng.random_bool(0.5) => match sim.rng.random_range(0..4) {
                    0 => Fault::Crash(t),
                    1 => Fault::Pause(t, sim.rng.random_range(500..15_000)),
                    2 => Fault::Partition([t].into()),
                    _ => {
                        sim.with_node(&t, |c, now| c.leave(now, &t).ok());
                        faults.push(Fault::Heal);
                        continue;
                    }
                },
                _ => pick_fault(&mut sim, &addrs),
            };
            // The guarantee holds while a node is paused less than failure detection +
            // stable-after + the removal margin (SINGLETON.md): at most one pause per node
            // in any 20 s (the margin), none extending another.
            let f = match f {
                Fault::Pause(a, _) if last_pause.get(&a).is_some_and(|t| sim.now < t + 20_000) => {
                    Fault::Heal
                }
                f => f,
            };
            if let Fault::Pause(a, ms) = &f {
                last_pause.insert(a.clone(), sim.now + ms);
            }
            if std::env::var("CONCORD_SIM_TRACE").is_ok() {
                eprintln!("  {} {:?} running on {:?}", sim.now, f, running_on(&sim));
            }
            apply(&mut sim, &f, &addrs);
            faults.push(f);
        }
        sim.partitions = Partitions::default();
        if std::env::var("CONCORD_SIM_TRACE").is_ok() {
            eprintln!("seed {seed}: faults {faults:?}");
        }
        let settled = run_checked(&mut sim, &mut acts, 150_000, |s| {
            s.all_up_converged() && running_on(s).len() == 1
        });
        let cluster = sim.running().any(|(_, n)| n.core().is_initialized());
        moves += acts.all(&sim).len().saturating_sub(1);
        if cluster {
            checked += 1;
            assert!(
                settled.is_some(),
                "seed {seed}: exactly one singleton after heal; faults {faults:?}; running on {:?}",
                running_on(&sim)
            );
        }
    }
    assert!(
        checked >= seeds / 2,
        "most schedules leave a cluster ({checked} of {seeds})"
    );
    assert!(
        moves as u64 >= seeds / 2,
        "the singleton moved {moves} times"
    );
}

/// Seeds of the randomized test: `CONCORD_SIM_SEEDS` (a soak), else `default`.
fn seeds(default: u64) -> u64 {
    std::env::var("CONCORD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
