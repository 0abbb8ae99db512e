//! Cluster metrics: each node samples its load — CPU, load average, memory, and Concord's own
//! queues and entity counts — smooths it, and spreads it to every node by gossip, so that
//! routing ([`capacity::weights`], Akka's `AdaptiveLoadBalancingRoutingLogic`) and placement
//! (shard allocation, partitioned services) can prefer the nodes with capacity left.
//!
//! The model is Akka's cluster-metrics extension (`akka-cluster-metrics`): the same metric
//! names where Akka has the metric ([`names`]), the same moving average ([`Ewma`], half-life
//! 12 s), and the same capacity selectors and routing weights ([`CapacitySelector`]). The
//! gossip is Concord's own, to cost under 100 bytes per second per node at 25 nodes instead
//! of Akka's every-entry-every-round: averages quantised to ~25-byte entries
//! ([`quantise`], [`MetricsEntry`]), a new version only when a value moved past its dead
//! band (or every 30 s), and rounds that exchange a compact digest of the versions held
//! (~1 byte an entry) and then only the entries one side lacks. The machine is
//! [`ClusterMetricsCollector`]; the runtime samples the machine and carries the messages.

pub mod capacity;
mod collector;
mod entry;
mod ewma;
mod messages;
mod metrics_gossip;
mod node_metrics;
mod own;
pub mod quantise;
mod settings;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cluster;

pub use capacity::{pick, pick_index, weights, CapacitySelector};
pub use collector::ClusterMetricsCollector;
pub use entry::{EntryVersion, InvalidEntry, MetricsEntry, MetricsState};
pub use ewma::{alpha, Ewma};
pub use messages::{ClusterMetricsMessage, Digest, MetricsGossipEnvelope, MetricsGossipMessage};
pub use metrics_gossip::MetricsGossip;
pub use node_metrics::{
    names, InvalidNodeMetrics, Metric, NodeMetrics, MAX_METRICS_PER_NODE, MAX_METRIC_ID,
    MAX_METRIC_NAME_BYTES,
};
pub use settings::{ClusterMetricsEvent, ClusterMetricsSettings, CollectorStats};
