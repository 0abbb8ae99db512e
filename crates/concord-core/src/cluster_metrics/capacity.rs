//! Remaining capacity per node, from its smoothed metrics, and the routing weights derived
//! from it: Akka's `CapacityMetricsSelector`s and `WeightedRoutees`
//! (`akka-cluster-metrics/.../ClusterMetricsRouting.scala`), which adaptive routing and
//! load-aware placement use.
//!
//! Each capacity is in 0.0 (no capacity left) … 1.0 (idle):
//! - [`CapacitySelector::Cpu`]: `1 − cpu-combined`.
//! - [`CapacitySelector::Load`]: `1 − min(1, system-load-average / processors)`.
//! - [`CapacitySelector::Memory`]: `memory-available / memory-total` (Akka uses the JVM
//!   heap's `(max − used) / max`; a Rust process has no heap limit, so the machine's).
//! - [`CapacitySelector::Queues`]: `1 / (1 + waiting / 100)` where `waiting` is the node's
//!   lane queue, region buffers and mailboxes together: 100 waiting messages halve it.
//!   Akka has no such selector; its users found CPU and heap poor proxies for a slow node
//!   (akka/akka-core #13530), and a backlog is the direct one.
//! - [`CapacitySelector::Mix`] (the default, as in Akka): the mean of those a node has.

use std::collections::BTreeMap;

use super::node_metrics::{names, NodeMetrics};
use crate::address::UniqueAddress;

/// Waiting messages that halve [`CapacitySelector::Queues`].
pub const QUEUE_HALF_CAPACITY: f64 = 100.0;

/// Which capacity to weigh nodes by.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum CapacitySelector {
    /// CPU left.
    Cpu,
    /// Load average against processors.
    Load,
    /// Memory left on the machine.
    Memory,
    /// Messages waiting in the node's queues.
    Queues,
    /// The mean of the above that the node has sampled.
    #[default]
    Mix,
}

impl CapacitySelector {
    /// The capacity of the node whose metrics are `m`, 0.0–1.0; `None` when it has not
    /// sampled what this selector needs.
    pub fn capacity(self, m: &NodeMetrics) -> Option<f64> {
        let s = |n: &str| m.smoothed(n);
        let c = match self {
            CapacitySelector::Cpu => 1.0 - s(names::CPU_COMBINED)?,
            CapacitySelector::Load => {
                let processors = s(names::PROCESSORS).filter(|p| *p > 0.0)?;
                1.0 - (s(names::SYSTEM_LOAD_AVERAGE)? / processors).min(1.0)
            }
            CapacitySelector::Memory => {
                let total = s(names::MEMORY_TOTAL).filter(|t| *t > 0.0)?;
                s(names::MEMORY_AVAILABLE)? / total
            }
            CapacitySelector::Queues => {
                let parts = [
                    names::LANE_QUEUE,
                    names::REGION_BUFFERED,
                    names::MAILBOX_DEPTH,
                ];
                let known: Vec<f64> = parts.iter().filter_map(|n| s(n)).collect();
                if known.is_empty() {
                    return None;
                }
                1.0 / (1.0 + known.iter().sum::<f64>() / QUEUE_HALF_CAPACITY)
            }
            CapacitySelector::Mix => {
                let all: Vec<f64> = [
                    CapacitySelector::Cpu,
                    CapacitySelector::Load,
                    CapacitySelector::Memory,
                    CapacitySelector::Queues,
                ]
                .iter()
                .filter_map(|sel| sel.capacity(m))
                .collect();
                if all.is_empty() {
                    return None;
                }
                all.iter().sum::<f64>() / all.len() as f64
            }
        };
        c.is_finite().then_some(c.clamp(0.0, 1.0))
    }

    /// The load of a node, `1 − capacity` (0.0 idle … 1.0 saturated); `None` when unknown.
    pub fn load(self, m: &NodeMetrics) -> Option<f64> {
        self.capacity(m).map(|c| 1.0 - c)
    }
}

/// Routing weights for `routees` (Akka's `CapacityMetricsSelector.weights` and
/// `WeightedRoutees`): a node's weight is `round(capacity / max(0.01, least capacity))`, so
/// the least free node weighs 1 and a node with twice its capacity 2; a routee without
/// metrics gets the mean weight of the others (1 when none has metrics). Every weight is at
/// least 1 and at most 100, so no routee is starved and no sum overflows.
pub fn weights(
    routees: &[UniqueAddress],
    capacity: &BTreeMap<UniqueAddress, f64>,
) -> Vec<(UniqueAddress, u32)> {
    let known: Vec<f64> = routees
        .iter()
        .filter_map(|r| capacity.get(r).copied())
        .filter(|c| c.is_finite())
        .collect();
    let least = known
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .max(0.01);
    let weight = |c: f64| (c / least).round().clamp(1.0, 100.0) as u32;
    let known_weights: Vec<u32> = known.iter().map(|c| weight(*c)).collect();
    let mean = if known_weights.is_empty() {
        1
    } else {
        let sum: u64 = known_weights.iter().map(|w| u64::from(*w)).sum();
        (sum / known_weights.len() as u64).max(1) as u32
    };
    routees
        .iter()
        .map(|r| {
            let w = capacity
                .get(r)
                .filter(|c| c.is_finite())
                .map_or(mean, |c| weight(*c));
            (r.clone(), w)
        })
        .collect()
}

/// Picks from `weighted` (as [`weights`] returns) with `random`, any `u64`: each routee is
/// chosen with probability weight / total (a binary search over the cumulative weights, as
/// Akka's `WeightedRoutees`). `None` when `weighted` is empty.
pub fn pick(weighted: &[(UniqueAddress, u32)], random: u64) -> Option<&UniqueAddress> {
    let i = pick_index(weighted.iter().map(|(_, w)| *w), random)?;
    weighted.get(i).map(|(r, _)| r)
}

/// The index [`pick`] chooses among `weights` with `random`; `None` when they sum to 0.
pub fn pick_index(weights: impl IntoIterator<Item = u32>, random: u64) -> Option<usize> {
    let mut cumulative = Vec::new();
    let mut total = 0u64;
    for w in weights {
        total += u64::from(w);
        cumulative.push(total);
    }
    if total == 0 {
        return None;
    }
    let at = random % total;
    Some(cumulative.partition_point(|c| *c <= at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "h", i), 1)
    }

    fn metrics(values: &[(&str, f64)]) -> NodeMetrics {
        crate::cluster_metrics::node_metrics::entry_of(node(1), values)
    }

    #[test]
    fn capacities_follow_akkas_formulas() {
        let m = metrics(&[
            (names::CPU_COMBINED, 0.25),
            (names::SYSTEM_LOAD_AVERAGE, 3.0),
            (names::PROCESSORS, 2.0),
            (names::MEMORY_AVAILABLE, 6.0),
            (names::MEMORY_TOTAL, 8.0),
            (names::LANE_QUEUE, 50.0),
            (names::MAILBOX_DEPTH, 50.0),
        ]);
        assert_eq!(CapacitySelector::Cpu.capacity(&m), Some(0.75));
        assert_eq!(CapacitySelector::Load.capacity(&m), Some(0.0));
        assert_eq!(CapacitySelector::Memory.capacity(&m), Some(0.75));
        assert_eq!(CapacitySelector::Queues.capacity(&m), Some(0.5));
        assert_eq!(CapacitySelector::Mix.capacity(&m), Some(0.5));
        assert_eq!(CapacitySelector::Mix.load(&m), Some(0.5));
        // What a node did not sample is unknown, never a guess.
        let cpu_only = metrics(&[(names::CPU_COMBINED, 1.5)]);
        assert_eq!(CapacitySelector::Cpu.capacity(&cpu_only), Some(0.0));
        assert_eq!(CapacitySelector::Load.capacity(&cpu_only), None);
        assert_eq!(CapacitySelector::Mix.capacity(&cpu_only), Some(0.0));
        assert_eq!(CapacitySelector::Mix.capacity(&metrics(&[])), None);
        let no_cores = metrics(&[(names::SYSTEM_LOAD_AVERAGE, 1.0), (names::PROCESSORS, 0.0)]);
        assert_eq!(CapacitySelector::Load.capacity(&no_cores), None);
    }

    #[test]
    fn weights_are_relative_to_the_least_free_node_and_unknown_nodes_get_the_mean() {
        let capacity: BTreeMap<_, _> = [(node(1), 0.2), (node(2), 0.4), (node(3), 0.8)].into();
        let w = weights(&[node(1), node(2), node(3), node(4)], &capacity);
        let w: Vec<u32> = w.iter().map(|(_, w)| *w).collect();
        assert_eq!(w, vec![1, 2, 4, 2]);
        // A saturated node still gets weight 1; an idle one is capped.
        let capacity: BTreeMap<_, _> = [(node(1), 0.0), (node(2), 1.0)].into();
        let w = weights(&[node(1), node(2)], &capacity);
        assert_eq!(w[0].1, 1);
        assert_eq!(w[1].1, 100);
        assert_eq!(weights(&[node(1)], &BTreeMap::new())[0].1, 1);
    }

    #[test]
    fn pick_follows_the_weights() {
        let weighted = vec![(node(1), 1), (node(2), 3)];
        let picks: Vec<u16> = (0..4)
            .map(|r| pick(&weighted, r).map(|n| n.address.port).unwrap_or(0))
            .collect();
        assert_eq!(picks, vec![1, 2, 2, 2]);
        assert_eq!(pick(&[], 7), None);
        assert!(pick(&weighted, u64::MAX).is_some());
    }
}
