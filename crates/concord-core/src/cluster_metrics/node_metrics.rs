//! [`NodeMetrics`]: one node's latest sample of its metrics — each a value and its moving
//! average — as the cluster-metrics gossip carries it (Akka's `NodeMetrics` and `Metric`,
//! `akka-cluster-metrics/.../Metric.scala`).
//!
//! This is the consumers' form (routing, placement, `GET /cluster/metrics`): metric names and
//! `f64` values. The gossip carries the compact form instead,
//! [`crate::cluster_metrics::MetricsEntry`]: each metric as its number in [`names::ALL`] and
//! its smoothed value quantised ([`crate::cluster_metrics::quantise`]). A later version may
//! add names at the end of [`names::ALL`]; an earlier one keeps and forwards their codes
//! without showing them. [`NodeMetrics::validate`] checks the entries of the first version's
//! message ([`crate::cluster_metrics::MetricsGossipEnvelope`]), still understood.

use std::collections::BTreeMap;

use crate::address::UniqueAddress;

/// The names of the metrics a node samples (Akka's names where Akka has the metric).
pub mod names {
    /// CPU in use on the machine, as a fraction of all cores' time, 0.0–1.0 (Akka's
    /// `cpu-combined`; as `sysinfo` measures it on Linux: user + system + nice + irq +
    /// softirq + steal, iowait counted as idle).
    pub const CPU_COMBINED: &str = "cpu-combined";
    /// CPU this process used since the last sample, as a fraction of all cores' time,
    /// 0.0–1.0.
    pub const CPU_PROCESS: &str = "cpu-process";
    /// The machine's one-minute load average (Akka's `system-load-average`).
    pub const SYSTEM_LOAD_AVERAGE: &str = "system-load-average";
    /// Cores this process may use (Akka's `processors`).
    pub const PROCESSORS: &str = "processors";
    /// Resident memory of this process, bytes.
    pub const MEMORY_RSS: &str = "memory-rss";
    /// Memory the machine still has available, bytes.
    pub const MEMORY_AVAILABLE: &str = "memory-available";
    /// The machine's memory, bytes.
    pub const MEMORY_TOTAL: &str = "memory-total";
    /// Frames waiting in this node's outbound lane queues, all peers and lanes.
    pub const LANE_QUEUE: &str = "lane-queue";
    /// Messages buffered by this node's shard regions (shards being allocated or handed off).
    pub const REGION_BUFFERED: &str = "region-buffered";
    /// Messages waiting in this node's entities' mailboxes.
    pub const MAILBOX_DEPTH: &str = "mailbox-depth";
    /// Entities running on this node.
    pub const ENTITIES: &str = "entities";

    /// Every name above; a metric's position here is its number on the wire (never
    /// reordered: a later version only appends).
    pub const ALL: [&str; 11] = [
        CPU_COMBINED,
        CPU_PROCESS,
        SYSTEM_LOAD_AVERAGE,
        PROCESSORS,
        MEMORY_RSS,
        MEMORY_AVAILABLE,
        MEMORY_TOTAL,
        LANE_QUEUE,
        REGION_BUFFERED,
        MAILBOX_DEPTH,
        ENTITIES,
    ];

    /// The wire number of metric `name` (its position in [`ALL`]); `None` for a name this
    /// version does not know.
    pub fn id(name: &str) -> Option<u8> {
        ALL.iter().position(|n| *n == name).map(|i| i as u8)
    }

    /// The name of metric number `id`; `None` for a number this version does not know.
    pub fn name(id: u8) -> Option<&'static str> {
        ALL.get(usize::from(id)).copied()
    }
}

/// Most metrics one node's entry may carry; an entry with more is refused.
pub const MAX_METRICS_PER_NODE: usize = 32;
/// Highest metric number an entry may carry (numbers are bits of a 64-bit presence mask on
/// the wire).
pub const MAX_METRIC_ID: u8 = 63;
/// Longest metric name, bytes.
pub const MAX_METRIC_NAME_BYTES: usize = 64;

/// One metric: its latest sample and its moving average (see [`crate::cluster_metrics::Ewma`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Metric {
    /// The latest sample (the metric's unit: fraction, bytes, count). Only a node's own
    /// entry has it: the gossip carries moving averages only, so for another member it
    /// equals `smoothed`.
    pub value: f64,
    /// The exponentially weighted moving average of the samples, as the node last published
    /// it: quantised ([`crate::cluster_metrics::quantise`]), and within the metric's dead
    /// band of the exact average.
    pub smoothed: f64,
}

/// One node's latest metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeMetrics {
    /// The node (its incarnation: a restarted node starts a new entry).
    pub node: UniqueAddress,
    /// The version of the node's entry, counted by the node from 1: a new one only when a
    /// quantised value moved past its dead band, or on a refresh (every 30 s by default);
    /// gossip keeps the highest.
    pub sequence: u64,
    /// For this node, when it took its latest sample; for another member, when this node
    /// learnt that member's current version. Ms on this node's clock (shown, never compared
    /// across nodes).
    pub sampled_at_ms: u64,
    /// Metric name → value.
    pub metrics: BTreeMap<String, Metric>,
}

/// Why an entry read from the network was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidNodeMetrics {
    /// More metrics than [`MAX_METRICS_PER_NODE`].
    #[error("{0} metrics (at most {MAX_METRICS_PER_NODE})")]
    TooMany(usize),
    /// A name that is empty or longer than [`MAX_METRIC_NAME_BYTES`].
    #[error("a metric name of {0} bytes (1 to {MAX_METRIC_NAME_BYTES})")]
    BadName(usize),
    /// A value or average that is not a finite number of at least 0.
    #[error("metric {0}: not a finite number ≥ 0")]
    BadValue(String),
    /// Sequence number 0 (samples count from 1).
    #[error("sequence number 0")]
    NoSequence,
}

impl NodeMetrics {
    /// The metric `name`, if sampled.
    pub fn get(&self, name: &str) -> Option<Metric> {
        self.metrics.get(name).copied()
    }

    /// The smoothed value of `name`, if sampled.
    pub fn smoothed(&self, name: &str) -> Option<f64> {
        self.get(name).map(|m| m.smoothed)
    }

    /// Checks an entry read from the network.
    ///
    /// # Errors
    /// [`InvalidNodeMetrics`]: too many metrics, a bad name, a value that is negative, NaN
    /// or infinite, or sequence 0.
    pub fn validate(&self) -> Result<(), InvalidNodeMetrics> {
        if self.sequence == 0 {
            return Err(InvalidNodeMetrics::NoSequence);
        }
        if self.metrics.len() > MAX_METRICS_PER_NODE {
            return Err(InvalidNodeMetrics::TooMany(self.metrics.len()));
        }
        for (name, m) in &self.metrics {
            if name.is_empty() || name.len() > MAX_METRIC_NAME_BYTES {
                return Err(InvalidNodeMetrics::BadName(name.len()));
            }
            let ok = |v: f64| v.is_finite() && v >= 0.0;
            if !ok(m.value) || !ok(m.smoothed) {
                return Err(InvalidNodeMetrics::BadValue(name.clone()));
            }
        }
        Ok(())
    }
}

/// Test support: sample 1 of `node` with `values` (each its own average).
#[cfg(test)]
pub(crate) fn entry_of(node: UniqueAddress, values: &[(&str, f64)]) -> NodeMetrics {
    NodeMetrics {
        node,
        sequence: 1,
        sampled_at_ms: 0,
        metrics: values
            .iter()
            .map(|(n, v)| {
                let m = Metric {
                    value: *v,
                    smoothed: *v,
                };
                (n.to_string(), m)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;

    fn entry(metrics: &[(&str, f64)]) -> NodeMetrics {
        entry_of(UniqueAddress::new(Address::new("sys", "h", 1), 1), metrics)
    }

    #[test]
    fn good_entries_pass_and_bad_ones_are_named() {
        assert_eq!(entry(&[(names::CPU_COMBINED, 0.5)]).validate(), Ok(()));
        assert_eq!(
            entry(&[("x", f64::NAN)]).validate(),
            Err(InvalidNodeMetrics::BadValue("x".into()))
        );
        assert_eq!(
            entry(&[("x", -1.0)]).validate(),
            Err(InvalidNodeMetrics::BadValue("x".into()))
        );
        assert_eq!(
            entry(&[("x", f64::INFINITY)]).validate(),
            Err(InvalidNodeMetrics::BadValue("x".into()))
        );
        assert_eq!(
            entry(&[("", 1.0)]).validate(),
            Err(InvalidNodeMetrics::BadName(0))
        );
        let long = "n".repeat(MAX_METRIC_NAME_BYTES + 1);
        assert_eq!(
            entry(&[(long.as_str(), 1.0)]).validate(),
            Err(InvalidNodeMetrics::BadName(MAX_METRIC_NAME_BYTES + 1))
        );
        let many: Vec<(String, f64)> = (0..=MAX_METRICS_PER_NODE)
            .map(|i| (format!("m{i}"), 1.0))
            .collect();
        let many: Vec<(&str, f64)> = many.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        assert_eq!(
            entry(&many).validate(),
            Err(InvalidNodeMetrics::TooMany(MAX_METRICS_PER_NODE + 1))
        );
        let mut e = entry(&[]);
        e.sequence = 0;
        assert_eq!(e.validate(), Err(InvalidNodeMetrics::NoSequence));
    }
}
