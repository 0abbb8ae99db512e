//! Clusters of collectors exchanging their messages in lock step (every message of a gossip
//! interval delivered in that interval, or lost): every node learns every node's metrics, a
//! changed value reaches everyone within a few rounds, a quiet cluster sends little, and
//! with messages lost at random the nodes still converge to each other's latest versions.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::tests::{collector_with, events, up};
use super::*;
use crate::protocol::{MembershipChange, ProtocolMachine};
use crate::test_views::{ua, view};

struct Sim {
    nodes: Vec<ClusterMetricsCollector>,
    settings: ClusterMetricsSettings,
    now: u64,
    rng: SmallRng,
    /// Chance that a message is lost.
    loss: f64,
    /// Entries each delivered or lost message carried.
    carried: Vec<usize>,
}

impl Sim {
    fn new(n: u16, seed: u64, loss: f64) -> Sim {
        Sim::with(ClusterMetricsSettings::default(), n, seed, loss)
    }

    fn with(settings: ClusterMetricsSettings, n: u16, seed: u64, loss: f64) -> Sim {
        let members = up(n);
        Sim {
            nodes: (0..n)
                .map(|i| collector_with(settings.clone(), i, &members))
                .collect(),
            settings,
            now: 0,
            rng: SmallRng::seed_from_u64(seed),
            loss,
            carried: Vec::new(),
        }
    }

    /// One gossip interval: timers fire, nodes sample (`sample(node)`), every message is
    /// delivered (answers too) unless lost.
    fn step(&mut self, sample: &mut dyn FnMut(usize) -> BTreeMap<String, f64>) {
        self.now += self.settings.gossip_interval_ms;
        for (i, c) in self.nodes.iter_mut().enumerate() {
            c.handle_timeout(self.now);
            for e in events(c) {
                if e == ClusterMetricsEvent::SampleWanted {
                    c.record_sample(self.now, sample(i));
                }
            }
        }
        let mut queue = Vec::new();
        for (i, c) in self.nodes.iter_mut().enumerate() {
            while let Some(t) = c.poll_transmit() {
                queue.push((i, t));
            }
        }
        while let Some((from, t)) = queue.pop() {
            if let ClusterMetricsMessage::Gossip(m) = &t.message {
                self.carried.push(m.entries.len());
            }
            if self.rng.random_bool(self.loss) {
                continue;
            }
            let to = usize::from(t.to.port - 2550);
            let c = &mut self.nodes[to];
            c.handle_message(self.now, &ua(from as u16), t.message);
            while let Some(answer) = c.poll_transmit() {
                queue.push((to, answer));
            }
        }
    }

    /// True if every node holds every node's latest version (as that node published it).
    fn converged(&self) -> bool {
        self.nodes.iter().enumerate().all(|(j, owner)| {
            let latest = owner.state().get(ua(j as u16).uid);
            latest.is_some()
                && self
                    .nodes
                    .iter()
                    .all(|c| c.state().get(ua(j as u16).uid) == latest)
        })
    }

    /// Rounds until every node holds node `j`'s version `sequence` or later (at most `max`).
    fn rounds_until_known(
        &mut self,
        j: usize,
        sequence: u64,
        max: u64,
        sample: &mut dyn FnMut(usize) -> BTreeMap<String, f64>,
    ) -> Option<u64> {
        let uid = ua(j as u16).uid;
        (1..=max).find(|_| {
            self.step(sample);
            self.nodes
                .iter()
                .all(|c| c.state().sequence_of(uid) >= Some(sequence))
        })
    }
}

/// No refreshes (so that a cluster whose values stopped moving converges for good) and no
/// smoothing (a sample is its average).
fn settling() -> ClusterMetricsSettings {
    ClusterMetricsSettings {
        refresh_interval_ms: u64::MAX,
        moving_average_half_life_ms: 0,
        ..Default::default()
    }
}

fn cpu_of(i: usize, n: usize) -> BTreeMap<String, f64> {
    [(names::CPU_COMBINED.to_string(), i as f64 / n as f64)].into()
}

#[test]
fn every_node_learns_every_nodes_metrics_and_messages_stay_within_one_entry_per_member() {
    let n = 12;
    let mut sim = Sim::new(n, 1, 0.0);
    for _ in 0..12 {
        sim.step(&mut |i| cpu_of(i, usize::from(n)));
    }
    let scale = quantise::scale(0).unwrap();
    for c in &sim.nodes {
        assert_eq!(c.gossip().len(), usize::from(n), "{:?}", c.stats());
        for i in 0..n {
            let cpu = c
                .gossip()
                .get(&ua(i))
                .and_then(|e| e.smoothed(names::CPU_COMBINED));
            let exact = f64::from(i) / f64::from(n);
            assert_eq!(cpu, Some(scale.value(scale.code(exact))));
        }
    }
    assert!(sim.carried.iter().all(|c| *c <= usize::from(n)));
    // A round, an answer and the wanted entries at most per node per interval.
    let sent: u64 = sim.nodes.iter().map(|c| c.stats().gossip_sent).sum();
    assert!(sent <= 3 * 12 * u64::from(n), "{sent}");
}

#[test]
fn a_changed_value_reaches_every_node_within_a_few_rounds() {
    let n = 25;
    let mut sim = Sim::with(settling(), n, 7, 0.0);
    let mut cpu = vec![0.1; usize::from(n)];
    for _ in 0..15 {
        sim.step(&mut |i| [(names::CPU_COMBINED.to_string(), cpu[i])].into());
    }
    assert!(sim.converged());
    for (trial, j) in [3usize, 11, 24].into_iter().enumerate() {
        cpu[j] = 0.5 + 0.1 * trial as f64;
        assert!(sim.converged());
        let before = sim.nodes[j].state().sequence_of(ua(j as u16).uid).unwrap();
        let mut sample = |i: usize| -> BTreeMap<String, f64> {
            [(names::CPU_COMBINED.to_string(), cpu[i])].into()
        };
        // Published at the next sample, then pulled and pushed round by round.
        let rounds = sim.rounds_until_known(j, before + 1, 30, &mut sample);
        assert!(
            rounds.is_some_and(|r| r <= 6),
            "node {j}: {rounds:?} rounds"
        );
    }
}

#[test]
fn a_quiet_cluster_sends_a_few_entries_per_round_not_every_entry() {
    let n = 25u16;
    let mut sim = Sim::new(n, 3, 0.0);
    for _ in 0..20 {
        sim.step(&mut |i| cpu_of(i, usize::from(n)));
    }
    let before = sim.carried.iter().sum::<usize>();
    let rounds = 20;
    for _ in 0..rounds {
        sim.step(&mut |i| cpu_of(i, usize::from(n)));
    }
    let per_node_round =
        (sim.carried.iter().sum::<usize>() - before) as f64 / f64::from(n) / rounds as f64;
    // Only refreshes (one per node per 10 rounds) travel: ~24 × 1.1 / 10 entries per node
    // and round, against 2 × 25 for sending every entry each round.
    assert!(per_node_round < 4.0, "{per_node_round}");
    assert!(sim.nodes.iter().all(|c| c.gossip().len() == usize::from(n)));
}

#[test]
fn a_member_that_joins_learns_everyone_and_everyone_learns_it() {
    let n = 10u16;
    let mut sim = Sim::new(n, 5, 0.0);
    for _ in 0..15 {
        sim.step(&mut |i| cpu_of(i, 11));
    }
    let all = up(n + 1);
    for (i, c) in sim.nodes.iter_mut().enumerate() {
        c.handle_membership(
            sim.now,
            &view(i as u16, &all),
            MembershipChange::CurrentClusterState,
        );
    }
    sim.nodes
        .push(collector_with(sim.settings.clone(), n, &all));
    let joined = sim.rounds_until_known(usize::from(n), 1, 20, &mut |i| cpu_of(i, 11));
    assert!(joined.is_some_and(|r| r <= 4), "{joined:?}");
    for _ in 0..3 {
        sim.step(&mut |i| cpu_of(i, 11));
    }
    assert_eq!(sim.nodes[usize::from(n)].gossip().len(), usize::from(n) + 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// With messages lost at random and values that keep changing, once the values settle
    /// every node converges to every node's latest version within 30 rounds.
    #[test]
    fn nodes_converge_to_each_others_latest_versions_despite_loss(
        n in 2u16..12, seed in any::<u64>(), loss in 0.0f64..0.3, busy in 1u64..20,
    ) {
        let mut sim = Sim::with(settling(), n, seed, loss);
        let mut values = SmallRng::seed_from_u64(seed ^ 1);
        for _ in 0..busy {
            let load: Vec<f64> = (0..n).map(|_| values.random_range(0.0..1.0)).collect();
            sim.step(&mut |i| {
                [
                    (names::CPU_COMBINED.to_string(), load[i]),
                    (names::ENTITIES.to_string(), 100.0 * load[i]),
                ]
                .into()
            });
        }
        let settled = |i: usize| -> BTreeMap<String, f64> {
            [(names::CPU_COMBINED.to_string(), 0.5), (names::ENTITIES.to_string(), i as f64)].into()
        };
        let mut rounds = 0;
        while !sim.converged() && rounds < 30 {
            sim.step(&mut |i| settled(i));
            rounds += 1;
        }
        prop_assert!(sim.converged(), "not converged after {} rounds", rounds);
        for c in &sim.nodes {
            prop_assert_eq!(c.gossip().len(), usize::from(n));
        }
    }
}
