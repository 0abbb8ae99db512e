//! The cluster-metrics collector's settings, events and counters (see
//! [`super::ClusterMetricsCollector`]).

/// The collector's settings (`[cluster-metrics]`, Akka's `akka.cluster.metrics.collector`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMetricsSettings {
    /// How often a node samples its metrics, ms (Akka's `sample-interval`, 3 s).
    pub sample_interval_ms: u64,
    /// How often a node starts a gossip round with one random member, ms
    /// (`gossip-interval`, 3 s).
    pub gossip_interval_ms: u64,
    /// The moving averages' half-life, ms (`moving-average-half-life`, 12 s).
    pub moving_average_half_life_ms: u64,
    /// Delay before the first sample and gossip, ms (`periodic-tasks-initial-delay`, 1 s).
    pub periodic_tasks_initial_delay_ms: u64,
    /// A node publishes a new version of its entry at least this often even when no value
    /// moved past its dead band, ms (30 s): every node's entry is then at most this old
    /// (plus its spreading), and a value that crept within its dead band is re-quantised.
    pub refresh_interval_ms: u64,
}

impl Default for ClusterMetricsSettings {
    fn default() -> Self {
        ClusterMetricsSettings {
            sample_interval_ms: 3_000,
            gossip_interval_ms: 3_000,
            moving_average_half_life_ms: 12_000,
            periodic_tasks_initial_delay_ms: 1_000,
            refresh_interval_ms: 30_000,
        }
    }
}

/// What the collector tells its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterMetricsEvent {
    /// Sample the node's metrics now and hand them to
    /// [`ClusterMetricsCollector::record_sample`].
    SampleWanted,
    /// The metrics changed (a sample of this node, a newer entry from gossip, or a member
    /// left): read them with [`ClusterMetricsCollector::gossip`] (Akka's
    /// `ClusterMetricsChanged`).
    Changed,
}

/// Counters of the collector (for metrics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectorStats {
    /// Samples of this node recorded.
    pub samples: u64,
    /// Versions of this node's entry published.
    pub published: u64,
    /// Gossip messages sent (rounds, answers, wanted entries).
    pub gossip_sent: u64,
    /// Entries sent, all messages together.
    pub entries_sent: u64,
    /// Gossip messages received from members.
    pub gossip_received: u64,
    /// Entries received that were newer than the ones held.
    pub entries_merged: u64,
    /// Entries refused: malformed, of a uid that is no member's (or two members'), or
    /// claiming a newer version of this node than it published; and messages from
    /// non-members (counted once).
    pub entries_refused: u64,
    /// Sampled values dropped: not finite, negative, or of a metric this version does not
    /// know ([`super::names::ALL`]).
    pub sample_values_dropped: u64,
}
