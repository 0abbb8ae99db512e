//! `GET /cluster/metrics`: every member's latest metrics as this node knows them, with the
//! capacities derived from them (docs/CLUSTER_METRICS.md).
//!
//! ```json
//! {"nodes": [{"node": "concord://sys@10.0.0.1:25520", "uid": 42, "sequence": 17,
//!   "sampledAtMs": 1700000000000,
//!   "metrics": {"cpu-combined": {"value": 0.31, "smoothed": 0.27}, ...},
//!   "capacity": {"cpu": 0.73, "load": 0.4, "memory": 0.81, "queues": 1.0, "mix": 0.735}}]}
//! ```
//!
//! A capacity is absent when the node did not sample what it needs. `nodes` is empty before
//! the first sample; with `[cluster-metrics] enabled = false` the route does not exist.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use concord_core::cluster_metrics::{CapacitySelector, MetricsGossip};
use serde::{Deserialize, Serialize};

use crate::load::ClusterLoad;

/// One metric of a member: its latest sample and its moving average (the metric's unit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricJson {
    /// Latest sample, for the node answering; for another member, equal to `smoothed` (the
    /// gossip carries averages only).
    pub value: f64,
    /// Moving average as the member published it: quantised, within the metric's dead band
    /// of the exact average (docs/CLUSTER_METRICS.md).
    pub smoothed: f64,
}

/// One member's entry of `GET /cluster/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeMetricsJson {
    /// The member's address.
    pub node: String,
    /// Its incarnation's uid.
    pub uid: u64,
    /// The version of its entry (a new one when a value moved past its dead band, or on a
    /// refresh every 30 s).
    pub sequence: u64,
    /// For the node answering, when it took its latest sample; for another member, when
    /// the node answering learnt that version. Ms on the answering node's clock.
    pub sampled_at_ms: u64,
    /// Metric name → value.
    pub metrics: BTreeMap<String, MetricJson>,
    /// Selector (`cpu`, `load`, `memory`, `queues`, `mix`) → capacity 0.0–1.0; a selector
    /// whose metrics the member did not sample is absent.
    #[serde(default)]
    pub capacity: BTreeMap<String, f64>,
}

/// `GET /cluster/metrics`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterMetricsJson {
    /// Every member with metrics, in address order.
    pub nodes: Vec<NodeMetricsJson>,
}

/// The JSON of `gossip` (see the module docs).
pub fn metrics_json(gossip: &MetricsGossip) -> ClusterMetricsJson {
    let nodes = gossip
        .entries()
        .map(|e| {
            let metrics = e
                .metrics
                .iter()
                .map(|(name, m)| {
                    let json = MetricJson {
                        value: m.value,
                        smoothed: m.smoothed,
                    };
                    (name.clone(), json)
                })
                .collect();
            let capacity = [
                ("cpu", CapacitySelector::Cpu),
                ("load", CapacitySelector::Load),
                ("memory", CapacitySelector::Memory),
                ("queues", CapacitySelector::Queues),
                ("mix", CapacitySelector::Mix),
            ]
            .into_iter()
            .filter_map(|(key, selector)| selector.capacity(e).map(|c| (key.to_string(), c)))
            .collect();
            NodeMetricsJson {
                node: e.node.address.to_string(),
                uid: e.node.uid,
                sequence: e.sequence,
                sampled_at_ms: e.sampled_at_ms,
                metrics,
                capacity,
            }
        })
        .collect();
    ClusterMetricsJson { nodes }
}

async fn get_metrics(State(load): State<ClusterLoad>) -> Json<ClusterMetricsJson> {
    Json(metrics_json(&load.current()))
}

/// The route over `load`.
pub(crate) fn routes(load: ClusterLoad) -> Router {
    Router::new()
        .route("/cluster/metrics", get(get_metrics))
        .with_state(load)
}
