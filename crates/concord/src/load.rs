//! A node's load as its layers see it: [`LocalLoad`], the gauges layers report (entities,
//! mailbox depth, region buffers), and [`ClusterLoad`], every member's smoothed metrics as
//! the cluster-metrics layer last learnt them (see [`crate::cluster_metrics`]).
//!
//! A leaf module: the node composition makes one of each per node and hands them to every
//! layer in its [`crate::layer::LayerContext`], so a layer reports its queues and reads the
//! cluster's load without importing the layer that samples or spreads it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[cfg(feature = "runtime")]
use concord_core::cluster_metrics::{CapacitySelector, MetricsGossip};
#[cfg(feature = "runtime")]
use concord_core::UniqueAddress;
#[cfg(feature = "runtime")]
use tokio::sync::watch;

/// Gauges this node's layers report, summed per metric name when the node samples its
/// metrics. Keys are a metric name of [`concord_core::cluster_metrics::names`] and a
/// source (a layer and, for sharding, the entity type): a fixed, small set.
#[derive(Clone, Debug, Default)]
pub struct LocalLoad {
    gauges: Arc<Mutex<BTreeMap<(String, String), f64>>>,
}

impl LocalLoad {
    /// An empty set of gauges.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `metric` as reported by `source` (a count: messages, entities). Values that are
    /// not finite numbers ≥ 0 count as 0.
    pub fn set(&self, metric: &str, source: &str, value: f64) {
        let value = if value.is_finite() && value >= 0.0 {
            value
        } else {
            0.0
        };
        let mut g = self.gauges.lock().unwrap_or_else(|p| p.into_inner());
        match g.get_mut(&(metric.to_string(), source.to_string())) {
            Some(v) => *v = value,
            None => {
                g.insert((metric.to_string(), source.to_string()), value);
            }
        }
    }

    /// Every metric reported, summed over its sources.
    pub fn totals(&self) -> BTreeMap<String, f64> {
        let g = self.gauges.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = BTreeMap::new();
        for ((metric, _), v) in g.iter() {
            *out.entry(metric.clone()).or_insert(0.0) += v;
        }
        out
    }
}

/// Every member's latest metrics as this node knows them; updated by the cluster-metrics
/// layer, empty when it is off (`[cluster-metrics] enabled = false`).
#[cfg(feature = "runtime")]
#[derive(Clone, Debug)]
pub struct ClusterLoad {
    tx: Arc<watch::Sender<Arc<MetricsGossip>>>,
}

#[cfg(feature = "runtime")]
impl Default for ClusterLoad {
    fn default() -> Self {
        ClusterLoad {
            tx: Arc::new(watch::channel(Arc::new(MetricsGossip::new())).0),
        }
    }
}

#[cfg(feature = "runtime")]
impl ClusterLoad {
    /// No metrics yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The latest metrics of every member.
    pub fn current(&self) -> Arc<MetricsGossip> {
        self.tx.borrow().clone()
    }

    /// A receiver that is notified on each change (for adaptive routers).
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetricsGossip>> {
        self.tx.subscribe()
    }

    /// Each member's capacity by `selector`, 0.0–1.0 (members without the metrics it needs
    /// are absent).
    pub fn capacity(&self, selector: CapacitySelector) -> BTreeMap<UniqueAddress, f64> {
        self.current()
            .entries()
            .filter_map(|e| selector.capacity(e).map(|c| (e.node.clone(), c)))
            .collect()
    }

    /// Replaces the metrics (the cluster-metrics layer, on each change).
    pub(crate) fn publish(&self, gossip: MetricsGossip) {
        self.tx.send_replace(Arc::new(gossip));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_gauges_sum_over_sources_and_refuse_nonsense() {
        let l = LocalLoad::new();
        l.set("entities", "sharding/a", 3.0);
        l.set("entities", "sharding/b", 4.0);
        l.set("entities", "sharding/a", 5.0);
        l.set("mailbox-depth", "sharding/a", f64::NAN);
        let t = l.totals();
        assert_eq!(t.get("entities"), Some(&9.0));
        assert_eq!(t.get("mailbox-depth"), Some(&0.0));
    }
}
