//! Cluster metrics: each node samples its load — CPU, load average, memory, and Concord's own
//! queues and entity counts — smooths it, and spreads it to every node by gossip, so that
//! routing ([`capacity::weights`], Akka's `AdaptiveLoadBalancingRoutingLogic`) and placement
//! (shard allocation, partitioned services) can prefer the nodes with capacity left.
//!
//! The model is Akka's cluster-metrics extension (`akka-cluster-metrics`): the same metric
//! names where Akka has the metric ([`names`]), the same moving average ([`Ewma`], half-life
//! 12 s), the same gossip (every 3 s to one random member, which answers once) and the same
//! capacity selectors and routing weights ([`CapacitySelector`]). The machine is
//! [`ClusterMetricsCollector`]; the runtime samples the machine and carries the messages.

pub mod capacity;
mod collector;
mod ewma;
mod metrics_gossip;
mod node_metrics;
#[cfg(test)]
mod tests;

pub use capacity::{pick, pick_index, weights, CapacitySelector};
pub use collector::{
    ClusterMetricsCollector, ClusterMetricsEvent, ClusterMetricsSettings, CollectorStats,
    MetricsGossipEnvelope,
};
pub use ewma::{alpha, Ewma};
pub use metrics_gossip::MetricsGossip;
pub use node_metrics::{
    names, InvalidNodeMetrics, Metric, NodeMetrics, MAX_METRICS_PER_NODE, MAX_METRIC_NAME_BYTES,
};
