//! `concord bench cluster-metrics`: the bytes per second the cluster-metrics gossip costs
//! each node, at several cluster sizes, with Akka's default timings (samples and gossip
//! every 3 s) — the real collector machines (`concord_core::cluster_metrics`) exchanging
//! their real encoded messages (`ClusterMetricsCodec`) in lock step, every node sampling
//! all 11 metrics Concord samples. Also the gossip rounds until every node knows every
//! node's metrics. The transport adds about 20 bytes of envelope and frame per message.

use std::collections::BTreeMap;

use concord::cluster_metrics::codec::ClusterMetricsCodec;
use concord::remote::Codec;
use concord_core::cluster_metrics::{
    names, ClusterMetricsCollector, ClusterMetricsEvent, ClusterMetricsSettings,
};
use concord_core::{MembershipView, ProtocolMachine, UniqueAddress};
use serde::Serialize;

/// One cluster size's figures.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct GossipCost {
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Payload bytes each node sends per second, mean over the steady rounds.
    pub bytes_per_s_per_node: f64,
    /// Messages each node sends per second.
    pub messages_per_s_per_node: f64,
    /// Largest message, bytes.
    pub max_message_bytes: usize,
    /// Gossip rounds until every node held every node's entry.
    pub rounds_to_spread: Option<u64>,
}

/// The figures (`--json` prints this object).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MetricsGossipBenchResult {
    /// Gossip interval, ms.
    pub gossip_interval_ms: u64,
    /// Per cluster size.
    pub sizes: Vec<GossipCost>,
}

fn sample(i: usize) -> BTreeMap<String, f64> {
    let f = i as f64;
    [
        (names::CPU_COMBINED, 0.3 + f * 1e-4),
        (names::CPU_PROCESS, 0.2),
        (names::SYSTEM_LOAD_AVERAGE, 1.37),
        (names::PROCESSORS, 8.0),
        (names::MEMORY_RSS, 2.1e8 + f),
        (names::MEMORY_AVAILABLE, 1.6e10),
        (names::MEMORY_TOTAL, 3.2e10),
        (names::LANE_QUEUE, 3.0),
        (names::REGION_BUFFERED, 0.0),
        (names::MAILBOX_DEPTH, 12.0),
        (names::ENTITIES, 10_000.0 + f),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect()
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

/// Runs `rounds` gossip intervals on a cluster of `n` nodes.
fn cost(n: usize, rounds: u64) -> GossipCost {
    let settings = ClusterMetricsSettings::default();
    let members: Vec<UniqueAddress> = (0..n)
        .map(|i| {
            let a =
                concord_core::Address::new("bench", format!("10.0.{}.{}", i / 250, i % 250), 25520);
            UniqueAddress::new(a, i as u64 + 1)
        })
        .collect();
    let index: BTreeMap<UniqueAddress, usize> = members
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, m)| (m, i))
        .collect();
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
    let codec = ClusterMetricsCodec;
    let (mut bytes, mut messages, mut max_message) = (0usize, 0usize, 0usize);
    let mut spread = None;
    // The first rounds fill every node's view; the cost is measured after them.
    let warm_up = rounds / 2;
    let mut now = 0;
    for round in 0..rounds {
        now += settings.gossip_interval_ms;
        let mut queue = Vec::new();
        for (i, c) in nodes.iter_mut().enumerate() {
            c.handle_timeout(now);
            while let Some(e) = c.poll_event() {
                if e == ClusterMetricsEvent::SampleWanted {
                    c.record_sample(now, sample(i));
                }
            }
            while let Some(t) = c.poll_transmit() {
                queue.push((i, t));
            }
        }
        while let Some((from, t)) = queue.pop() {
            let (manifest, payload) = codec.encode(&t.message);
            if round >= warm_up {
                bytes += payload.len();
                messages += 1;
            }
            max_message = max_message.max(payload.len());
            let Ok(message) = codec.decode(manifest, &payload) else {
                continue;
            };
            let to = index[&UniqueAddress::new(t.to.clone(), t.to_uid.unwrap_or(0))];
            nodes[to].handle_message(now, &members[from], message);
            while let Some(answer) = nodes[to].poll_transmit() {
                queue.push((to, answer));
            }
        }
        if spread.is_none() && nodes.iter().all(|c| c.gossip().len() == n) {
            spread = Some(round + 1);
        }
    }
    let seconds = (rounds - warm_up) as f64 * settings.gossip_interval_ms as f64 / 1000.0;
    GossipCost {
        nodes: n,
        bytes_per_s_per_node: bytes as f64 / seconds / n as f64,
        messages_per_s_per_node: messages as f64 / seconds / n as f64,
        max_message_bytes: max_message,
        rounds_to_spread: spread,
    }
}

/// Runs the model at each of `sizes` for 40 gossip intervals.
pub fn run(sizes: &[usize]) -> MetricsGossipBenchResult {
    MetricsGossipBenchResult {
        gossip_interval_ms: ClusterMetricsSettings::default().gossip_interval_ms,
        sizes: sizes
            .iter()
            .filter(|n| **n >= 2)
            .map(|n| cost(*n, 40))
            .collect(),
    }
}

/// The table.
pub fn report(r: &MetricsGossipBenchResult) -> String {
    let mut out = format!(
        "cluster-metrics gossip (every {} ms, real machines and codec, lock step)\n",
        r.gossip_interval_ms
    );
    out.push_str("NODES  BYTES/S/NODE  MSGS/S/NODE  MAX MESSAGE  ROUNDS TO SPREAD\n");
    for s in &r.sizes {
        out.push_str(&format!(
            "{:>5}  {:>12.0}  {:>11.2}  {:>11}  {:>16}\n",
            s.nodes,
            s.bytes_per_s_per_node,
            s.messages_per_s_per_node,
            s.max_message_bytes,
            s.rounds_to_spread
                .map_or("-".to_string(), |r| r.to_string())
        ));
    }
    out
}
