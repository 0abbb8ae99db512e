//! Cluster metrics (Akka's cluster-metrics extension): each node samples its CPU, load
//! average, memory, and Concord's own queues and entity counts every `sample-interval`,
//! smooths and quantises them, and gossips the versions that changed so that every node
//! knows every member's load (docs/CLUSTER_METRICS.md).
//!
//! The protocol lives in `concord-core` ([`concord_core::cluster_metrics`]); this module
//! runs it: [`ClusterMetrics`] is the layer (added by the node composition unless
//! `[cluster-metrics] enabled = false`), the sampler reads the operating system through
//! `sysinfo`, and the results reach other layers through the node's
//! [`crate::load::ClusterLoad`], the management API (`GET /cluster/metrics`), the dashboard
//! and Prometheus:
//!
//! - `concord_cluster_metrics_value{node,member,metric}` — each member's smoothed metric
//!   (gauge)
//! - `concord_cluster_metrics_nodes{node}` — members with metrics (gauge)
//! - `concord_cluster_metrics_samples_total{node}`, `..._versions_published_total` (new
//!   versions of this node's entry), `..._gossip_sent_total` (messages),
//!   `..._entries_sent_total`, `..._gossip_received_total`, `..._entries_refused_total`
//!   (malformed entries, entries of non-members, false claims about this node, gossip from
//!   non-members), `..._sample_values_dropped_total`
//!
//! Bytes on the wire are counted per protocol by the transport
//! (`concord_remote_payload_bytes_sent_total{protocol="cluster-metrics"}`).

pub mod codec;
mod config;
mod effects;
mod layer;
pub mod routes;
mod sampler;

pub use config::ClusterMetricsConfig;
pub use effects::ClusterMetricsCompletion;
pub use layer::ClusterMetrics;
pub use routes::{ClusterMetricsJson, MetricJson, NodeMetricsJson};
