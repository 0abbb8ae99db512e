//! `concord bench cluster-metrics`: the payload bytes per second the cluster-metrics gossip
//! costs each node, and how fast a new version of a node's entry reaches every node, at
//! several cluster sizes, with Akka's default timings (samples and gossip rounds every 3 s;
//! a refresh every 30 s) — the real collector machines
//! (`concord_core::cluster_metrics`) exchanging their real encoded messages
//! (`ClusterMetricsCodec`) in lock step, every node sampling all 11 metrics Concord samples,
//! under two workloads:
//!
//! - **steady**: every sample the same (an idle cluster): only digests and refreshes;
//! - **busy**: every sample moves — CPU ±5 % around the node's level, the load average and
//!   memory drifting, lane queues 0–6 and mailboxes 0–24 at random, entities drifting by up
//!   to ±5 a sample — so versions are published whenever an average moves past its dead band.
//!
//! The transport adds about 20 bytes of envelope and frame per message (not counted).

use std::collections::BTreeMap;

use concord::cluster_metrics::codec::ClusterMetricsCodec;
use concord::remote::Codec;
use concord_core::cluster_metrics::{
    names, ClusterMetricsCollector, ClusterMetricsEvent, ClusterMetricsSettings,
};
use concord_core::{MembershipView, ProtocolMachine, UniqueAddress};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

/// Gossip intervals simulated per cluster size.
const ROUNDS: u64 = 100;
/// Intervals before the cost is measured (cold start, the first refreshes).
const WARM_UP: u64 = 40;
/// Versions published in the last intervals are not timed (they may not have spread yet).
const TAIL: u64 = 20;

/// One workload's figures at one cluster size.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WorkloadCost {
    /// Payload bytes each node sends per second, mean over the measured intervals.
    pub bytes_per_s_per_node: f64,
    /// Messages each node sends per second.
    pub messages_per_s_per_node: f64,
    /// Largest message, bytes.
    pub max_message_bytes: usize,
    /// New versions each node publishes per second.
    pub versions_per_s_per_node: f64,
    /// Gossip rounds (3 s each) from a version's publication until every node held it (or a
    /// later one): mean, 99th percentile and most, over the versions published while
    /// measuring.
    pub rounds_to_everyone_mean: f64,
    /// See `rounds_to_everyone_mean`.
    pub rounds_to_everyone_p99: u64,
    /// See `rounds_to_everyone_mean`.
    pub rounds_to_everyone_max: u64,
    /// Versions timed.
    pub versions_timed: usize,
    /// Versions that had not reached every node by the end of the run.
    pub versions_unfinished: usize,
}

/// One cluster size's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GossipCost {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Gossip rounds until every node held every node's entry, all nodes started together.
    pub rounds_to_spread: Option<u64>,
    /// Unchanging samples.
    pub steady: WorkloadCost,
    /// Moving samples.
    pub busy: WorkloadCost,
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MetricsGossipBenchResult {
    /// Gossip interval, ms.
    pub gossip_interval_ms: u64,
    /// Gossip intervals simulated per size, and of those measured.
    pub rounds: u64,
    /// See `rounds`.
    pub measured_rounds: u64,
    /// Per cluster size.
    pub sizes: Vec<GossipCost>,
}

/// What one node samples.
struct Load {
    rng: SmallRng,
    busy: bool,
    cpu: f64,
    load: f64,
    rss: f64,
    available: f64,
    entities: f64,
}

impl Load {
    fn new(i: usize, busy: bool) -> Load {
        let f = i as f64;
        Load {
            rng: SmallRng::seed_from_u64(i as u64 + 1),
            busy,
            cpu: 0.2 + 0.5 * (f * 0.37).fract(),
            load: 1.37,
            rss: 2.1e8 + f,
            available: 1.6e10,
            entities: 10_000.0 + f,
        }
    }

    fn sample(&mut self) -> BTreeMap<String, f64> {
        let (cpu, lanes, mailboxes) = if self.busy {
            let r = &mut self.rng;
            self.load = (self.load + r.random_range(-0.05..0.05)).clamp(0.0, 8.0);
            self.rss = (self.rss + r.random_range(-1.0..1.0) * 1_048_576.0).max(1e7);
            self.available += r.random_range(-20.0..20.0) * 1_048_576.0;
            self.entities = (self.entities + r.random_range(-5.0f64..5.0).round()).max(0.0);
            let cpu = (self.cpu + r.random_range(-0.05..0.05)).clamp(0.0, 1.0);
            (cpu, r.random_range(0..=6), r.random_range(0..=24))
        } else {
            (self.cpu, 3, 12)
        };
        [
            (names::CPU_COMBINED, cpu),
            (names::CPU_PROCESS, cpu * 0.6),
            (names::SYSTEM_LOAD_AVERAGE, self.load),
            (names::PROCESSORS, 8.0),
            (names::MEMORY_RSS, self.rss),
            (names::MEMORY_AVAILABLE, self.available),
            (names::MEMORY_TOTAL, 3.2e10),
            (names::LANE_QUEUE, f64::from(lanes)),
            (names::REGION_BUFFERED, 0.0),
            (names::MAILBOX_DEPTH, f64::from(mailboxes)),
            (names::ENTITIES, self.entities),
        ]
        .into_iter()
        .map(|(n, v)| (n.to_string(), v))
        .collect()
    }
}

fn view_of(members: &[UniqueAddress], me: usize) -> MembershipView {
    let mut g = concord_core::gossip::Gossip::empty();
    for (i, m) in members.iter().enumerate() {
        let member = concord_core::member::Member::joining(m.clone(), Default::default(), "1")
            .with_up(i as u32 + 1)
            .with_status(concord_core::MemberStatus::Up);
        g.members.insert(m.clone(), member);
    }
    MembershipView::of(
        &concord_core::membership_state::MembershipState::new(g, members[me].clone()),
        1,
    )
}

/// Uids as random as real ones (so they take their 8 bytes on the wire).
fn uid(i: usize) -> u64 {
    let mut z = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Runs [`ROUNDS`] gossip intervals on a cluster of `n` nodes; also returns the rounds
/// until every node held every node's entry.
fn run_workload(n: usize, busy: bool) -> (WorkloadCost, Option<u64>) {
    let settings = ClusterMetricsSettings::default();
    let members: Vec<UniqueAddress> = (0..n)
        .map(|i| {
            let a =
                concord_core::Address::new("bench", format!("10.0.{}.{}", i / 250, i % 250), 25520);
            UniqueAddress::new(a, uid(i))
        })
        .collect();
    let index: BTreeMap<u64, usize> = (0..n).map(|i| (uid(i), i)).collect();
    let mut nodes: Vec<ClusterMetricsCollector> = (0..n)
        .map(|i| {
            let mut c =
                ClusterMetricsCollector::new(settings.clone(), members[i].clone(), i as u64);
            c.handle_membership(
                0,
                &view_of(&members, i),
                concord_core::MembershipChange::CurrentClusterState,
            );
            c
        })
        .collect();
    let mut loads: Vec<Load> = (0..n).map(|i| Load::new(i, busy)).collect();
    let codec = ClusterMetricsCodec;
    let (mut bytes, mut messages, mut max_message, mut versions) = (0usize, 0usize, 0usize, 0u64);
    let mut spread = None;
    // (node, version, round published) of versions not yet held everywhere.
    let mut pending: Vec<(usize, u64, u64)> = Vec::new();
    let mut timed: Vec<u64> = Vec::new();
    let mut now = 0;
    for round in 0..ROUNDS {
        now += settings.gossip_interval_ms;
        let measuring = round >= WARM_UP;
        let mut queue = Vec::new();
        for (i, c) in nodes.iter_mut().enumerate() {
            c.handle_timeout(now);
            while let Some(e) = c.poll_event() {
                if e == ClusterMetricsEvent::SampleWanted {
                    let before = c.stats().published;
                    c.record_sample(now, loads[i].sample());
                    if c.stats().published > before && measuring {
                        versions += 1;
                        if round < ROUNDS - TAIL {
                            let seq = c.state().sequence_of(uid(i)).unwrap_or(0);
                            pending.push((i, seq, round));
                        }
                    }
                }
            }
            while let Some(t) = c.poll_transmit() {
                queue.push((i, t));
            }
        }
        while let Some((from, t)) = queue.pop() {
            let (manifest, payload) = codec.encode(&t.message);
            if measuring {
                bytes += payload.len();
                messages += 1;
                max_message = max_message.max(payload.len());
            }
            let Ok(message) = codec.decode(manifest, &payload) else {
                continue;
            };
            let Some(&to) = t.to_uid.and_then(|u| index.get(&u)) else {
                continue;
            };
            nodes[to].handle_message(now, &members[from], message);
            while let Some(answer) = nodes[to].poll_transmit() {
                queue.push((to, answer));
            }
        }
        if spread.is_none() && nodes.iter().all(|c| c.gossip().len() == n) {
            spread = Some(round + 1);
        }
        if !pending.is_empty() {
            // The version of each node that every node holds.
            let everywhere: Vec<u64> = (0..n)
                .map(|j| {
                    nodes
                        .iter()
                        .map(|c| c.state().sequence_of(uid(j)).unwrap_or(0))
                        .min()
                        .unwrap_or(0)
                })
                .collect();
            pending.retain(|(j, seq, published)| {
                let done = everywhere[*j] >= *seq;
                if done {
                    timed.push(round - published + 1);
                }
                !done
            });
        }
    }
    let seconds = (ROUNDS - WARM_UP) as f64 * settings.gossip_interval_ms as f64 / 1000.0;
    timed.sort_unstable();
    let p99 = timed
        .get((timed.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or(0);
    let cost = WorkloadCost {
        bytes_per_s_per_node: bytes as f64 / seconds / n as f64,
        messages_per_s_per_node: messages as f64 / seconds / n as f64,
        max_message_bytes: max_message,
        versions_per_s_per_node: versions as f64 / seconds / n as f64,
        rounds_to_everyone_mean: if timed.is_empty() {
            0.0
        } else {
            timed.iter().sum::<u64>() as f64 / timed.len() as f64
        },
        rounds_to_everyone_p99: p99,
        rounds_to_everyone_max: timed.last().copied().unwrap_or(0),
        versions_timed: timed.len(),
        versions_unfinished: pending.len(),
    };
    (cost, spread)
}

fn cost(n: usize) -> GossipCost {
    let (steady, rounds_to_spread) = run_workload(n, false);
    let (busy, _) = run_workload(n, true);
    GossipCost {
        nodes: n,
        rounds_to_spread,
        steady,
        busy,
    }
}

/// Runs the model at each of `sizes` for [`ROUNDS`] gossip intervals per workload.
pub fn run(sizes: &[usize]) -> MetricsGossipBenchResult {
    MetricsGossipBenchResult {
        gossip_interval_ms: ClusterMetricsSettings::default().gossip_interval_ms,
        rounds: ROUNDS,
        measured_rounds: ROUNDS - WARM_UP,
        sizes: sizes
            .iter()
            .filter(|n| **n >= 2)
            .map(|n| cost(*n))
            .collect(),
    }
}

/// The table.
pub fn report(r: &MetricsGossipBenchResult) -> String {
    let mut out = format!(
        "cluster-metrics gossip (rounds every {} ms; real machines and codec, lock step; \
         {} rounds, the last {} measured)\n",
        r.gossip_interval_ms, r.rounds, r.measured_rounds
    );
    out.push_str(
        "                 steady (idle)                      busy (samples move)\n\
         NODES  B/S/NODE  MSGS/S  MAX MSG  ROUNDS TO ALL   B/S/NODE  MSGS/S  MAX MSG  VERSIONS/S  \
         ROUNDS TO ALL (mean/p99/max)  COLD START\n",
    );
    for s in &r.sizes {
        let all = |w: &WorkloadCost| {
            format!(
                "{:.1}/{}/{}{}",
                w.rounds_to_everyone_mean,
                w.rounds_to_everyone_p99,
                w.rounds_to_everyone_max,
                if w.versions_unfinished > 0 {
                    format!(" ({} unfinished)", w.versions_unfinished)
                } else {
                    String::new()
                }
            )
        };
        out.push_str(&format!(
            "{:>5}  {:>8.0}  {:>6.2}  {:>7}  {:>13}   {:>8.0}  {:>6.2}  {:>7}  {:>10.3}  {:>28}  {:>10}\n",
            s.nodes,
            s.steady.bytes_per_s_per_node,
            s.steady.messages_per_s_per_node,
            s.steady.max_message_bytes,
            all(&s.steady),
            s.busy.bytes_per_s_per_node,
            s.busy.messages_per_s_per_node,
            s.busy.max_message_bytes,
            s.busy.versions_per_s_per_node,
            all(&s.busy),
            s.rounds_to_spread
                .map_or("-".to_string(), |r| r.to_string())
        ));
    }
    out
}
