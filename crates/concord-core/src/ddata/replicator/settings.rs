//! [`ReplicatorSettings`]: Akka's `akka.cluster.distributed-data` settings, same defaults.

/// Settings of the [`super::Replicator`]. Durations in ms, sizes in bytes or counts.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicatorSettings {
    /// Replicate only among members with this role (`None`: all members).
    pub role: Option<String>,
    /// Anti-entropy gossip of digests to one random node, ms (Akka 2 s).
    pub gossip_interval_ms: u64,
    /// How often subscribers are told about changes, ms (Akka 500 ms).
    pub notify_subscribers_interval_ms: u64,
    /// Keys per gossip `Status` chunk and most entries per gossip reply (Akka 500).
    pub max_delta_elements: usize,
    /// Send deltas instead of full states (Akka `delta-crdt.enabled`, on).
    pub delta_crdt_enabled: bool,
    /// Delta propagation interval, ms (Akka: gossip interval / 5, at least 200 ms: 400 ms).
    pub delta_propagation_interval_ms: u64,
    /// Pending deltas kept per key before older ones are dropped (receivers that miss
    /// them get the full state), count (Akka `delta-crdt.max-delta-size` 50).
    pub max_delta_size: usize,
    /// How often the leader checks for removed nodes to prune, ms (Akka 120 s).
    pub pruning_interval_ms: u64,
    /// Time a removed node's entries may still be disseminated before pruning starts, ms,
    /// counted only while every node is reachable (Akka 300 s).
    pub max_pruning_dissemination_ms: u64,
    /// How long a "pruning performed" marker is kept, ms (Akka 6 h).
    pub pruning_marker_time_to_live_ms: u64,
    /// The same for durable keys, ms (Akka 10 d): a durable replica must not be down longer.
    pub durable_pruning_marker_time_to_live_ms: u64,
    /// Keys stored durably: exact ids, or prefixes ending in `*` (`shard-*`); `*` alone
    /// makes every key durable.
    pub durable_keys: Vec<String>,
    /// Ask the oldest nodes first in reads (Akka `prefer-oldest`, off).
    pub prefer_oldest: bool,
    /// Most top-level keys this replicator holds, count (Akka documents 100 000 as the
    /// limit); data for more is refused.
    pub max_keys: usize,
    /// Largest message this replicator builds, bytes (gossip is split to fit): the
    /// ordinary frame limit less the envelope overhead.
    pub max_message_bytes: usize,
    /// Largest single value it replicates, bytes (the large-lane frame limit less the
    /// envelope overhead); larger values stay local and are counted.
    pub max_value_bytes: usize,
    /// Most local requests (reads and writes with a quorum) in flight; more fail at once.
    pub max_requests_in_flight: usize,
}

impl Default for ReplicatorSettings {
    fn default() -> Self {
        ReplicatorSettings {
            role: None,
            gossip_interval_ms: 2_000,
            notify_subscribers_interval_ms: 500,
            max_delta_elements: 500,
            delta_crdt_enabled: true,
            delta_propagation_interval_ms: 400,
            max_delta_size: 50,
            pruning_interval_ms: 120_000,
            max_pruning_dissemination_ms: 300_000,
            pruning_marker_time_to_live_ms: 6 * 3_600_000,
            durable_pruning_marker_time_to_live_ms: 10 * 24 * 3_600_000,
            durable_keys: Vec::new(),
            prefer_oldest: false,
            max_keys: 100_000,
            max_message_bytes: 256 * 1024 - 128,
            max_value_bytes: 8 * 1024 * 1024 - 128,
            max_requests_in_flight: 10_000,
        }
    }
}

impl ReplicatorSettings {
    /// True if `key` is durable by [`ReplicatorSettings::durable_keys`].
    pub fn is_durable(&self, key: &str) -> bool {
        self.durable_keys.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => key.starts_with(prefix),
            None => p == key,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durable_keys_match_exactly_or_by_prefix() {
        let s = ReplicatorSettings {
            durable_keys: vec!["a".into(), "shard-*".into()],
            ..Default::default()
        };
        assert!(s.is_durable("a"));
        assert!(!s.is_durable("ab"));
        assert!(s.is_durable("shard-7"));
        assert!(s.is_durable("shard-"));
        assert!(!s.is_durable("shar"));
        let all = ReplicatorSettings {
            durable_keys: vec!["*".into()],
            ..Default::default()
        };
        assert!(all.is_durable("anything"));
    }
}
