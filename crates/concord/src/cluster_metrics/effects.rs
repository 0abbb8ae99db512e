//! [`ClusterMetricsEffects`]: what the cluster-metrics machine's events do on a node — take
//! a sample on a blocking thread when asked ([`Sampler`]), publish the cluster's metrics to
//! the node's [`ClusterLoad`] when they change, and keep the Prometheus series up to date.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use concord_core::cluster_metrics::{
    names, ClusterMetricsCollector, ClusterMetricsEvent, CollectorStats,
};

use super::sampler::Sampler;
use crate::host::{Effects, LayerEffects};
use crate::load::ClusterLoad;

/// Work that finished away from the host.
#[derive(Debug)]
pub enum ClusterMetricsCompletion {
    /// A sample: metric name → value.
    Sample(BTreeMap<String, f64>),
}

/// The cluster-metrics layer's effects; see the module docs.
pub(crate) struct ClusterMetricsEffects {
    sampler: Arc<Mutex<Sampler>>,
    sampling: bool,
    cluster_load: ClusterLoad,
    node_label: String,
    reported: CollectorStats,
    /// `(member, metric)` series set on the last change, to zero those that went.
    series: BTreeSet<(String, String)>,
}

impl ClusterMetricsEffects {
    pub(crate) fn new(sampler: Sampler, cluster_load: ClusterLoad, node_label: String) -> Self {
        ClusterMetricsEffects {
            sampler: Arc::new(Mutex::new(sampler)),
            sampling: false,
            cluster_load,
            node_label,
            reported: CollectorStats::default(),
            series: BTreeSet::new(),
        }
    }

    /// Publishes the machine's entries and sets one gauge per member and metric:
    /// `concord_cluster_metrics_value{node, member, metric}` (the smoothed value), for the
    /// metrics this version knows only ([`names::ALL`]): a name a peer sends cannot add
    /// series.
    fn publish(&mut self, machine: &ClusterMetricsCollector) {
        let gossip = machine.gossip().clone();
        let mut series = BTreeSet::new();
        for e in gossip.entries() {
            let member = e.node.address.to_string();
            for (name, m) in e
                .metrics
                .iter()
                .filter(|(n, _)| names::ALL.contains(&n.as_str()))
            {
                metrics::gauge!(
                    "concord_cluster_metrics_value",
                    "node" => self.node_label.clone(),
                    "member" => member.clone(),
                    "metric" => name.clone(),
                )
                .set(m.smoothed);
                series.insert((member.clone(), name.clone()));
            }
        }
        for (member, name) in self.series.difference(&series) {
            metrics::gauge!(
                "concord_cluster_metrics_value",
                "node" => self.node_label.clone(),
                "member" => member.clone(),
                "metric" => name.clone(),
            )
            .set(0.0);
        }
        self.series = series;
        metrics::gauge!("concord_cluster_metrics_nodes", "node" => self.node_label.clone())
            .set(gossip.len() as f64);
        self.cluster_load.publish(gossip);
    }
}

impl LayerEffects for ClusterMetricsEffects {
    type Machine = ClusterMetricsCollector;
    type Command = Infallible;
    type Completion = ClusterMetricsCompletion;

    fn name(&self) -> &'static str {
        "cluster-metrics"
    }

    fn command(&mut self, _fx: &mut Effects<'_, Self>, command: Infallible) {
        match command {}
    }

    fn completion(&mut self, fx: &mut Effects<'_, Self>, completion: ClusterMetricsCompletion) {
        match completion {
            ClusterMetricsCompletion::Sample(values) => {
                self.sampling = false;
                fx.machine.record_sample(fx.now_ms, values);
            }
        }
    }

    fn event(&mut self, fx: &mut Effects<'_, Self>, event: ClusterMetricsEvent) {
        match event {
            ClusterMetricsEvent::SampleWanted => {
                // One sample at a time: a slow read of /proc skips a round, never piles up.
                if self.sampling {
                    return;
                }
                self.sampling = true;
                let sampler = self.sampler.clone();
                let completions = fx.completions().clone();
                fx.spawn_blocking(Box::new(move || {
                    // A sampler that panics gives an empty sample, so sampling goes on.
                    let values = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        sampler.lock().unwrap_or_else(|p| p.into_inner()).sample()
                    }))
                    .unwrap_or_default();
                    completions.send(ClusterMetricsCompletion::Sample(values));
                }));
            }
            ClusterMetricsEvent::Changed => self.publish(fx.machine),
        }
    }

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        let now = fx.machine.stats();
        let node = self.node_label.clone();
        let add = |name: &'static str, now: u64, before: u64| {
            metrics::counter!(name, "node" => node.clone()).increment(now.saturating_sub(before));
        };
        let was = self.reported;
        add(
            "concord_cluster_metrics_samples_total",
            now.samples,
            was.samples,
        );
        add(
            "concord_cluster_metrics_versions_published_total",
            now.published,
            was.published,
        );
        add(
            "concord_cluster_metrics_entries_sent_total",
            now.entries_sent,
            was.entries_sent,
        );
        add(
            "concord_cluster_metrics_gossip_sent_total",
            now.gossip_sent,
            was.gossip_sent,
        );
        add(
            "concord_cluster_metrics_gossip_received_total",
            now.gossip_received,
            was.gossip_received,
        );
        add(
            "concord_cluster_metrics_entries_refused_total",
            now.entries_refused,
            was.entries_refused,
        );
        add(
            "concord_cluster_metrics_sample_values_dropped_total",
            now.sample_values_dropped,
            was.sample_values_dropped,
        );
        self.reported = now;
    }
}
