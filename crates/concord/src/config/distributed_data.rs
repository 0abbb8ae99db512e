//! `[distributed-data]` (Akka's `akka.cluster.distributed-data`) and `[singleton]` /
//! `[singleton-proxy]` (Akka's `akka.cluster.singleton` / `singleton-proxy`), plus the
//! node's `data-dir`.

use std::time::Duration;

use concord_core::ddata::ReplicatorSettings;
use concord_core::singleton::SingletonSettings;
use serde::Deserialize;

use super::duration;

/// `[distributed-data]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DistributedDataConfig {
    /// Replicate only among members with this role ("" = all).
    pub role: String,
    /// Anti-entropy gossip interval ("2s").
    #[serde(deserialize_with = "duration::de")]
    pub gossip_interval: Duration,
    /// How often subscribers hear of changes ("500ms").
    #[serde(deserialize_with = "duration::de")]
    pub notify_subscribers_interval: Duration,
    /// Keys per gossip chunk and most entries per gossip reply (500).
    pub max_delta_elements: usize,
    /// How often the leader checks for removed nodes to prune ("120s").
    #[serde(deserialize_with = "duration::de")]
    pub pruning_interval: Duration,
    /// All-reachable time before a removed node's entries are pruned ("300s").
    #[serde(deserialize_with = "duration::de")]
    pub max_pruning_dissemination: Duration,
    /// How long "pruning performed" markers are kept ("6h").
    #[serde(deserialize_with = "duration::de")]
    pub pruning_marker_time_to_live: Duration,
    /// Ask the oldest nodes first in reads (false).
    pub prefer_oldest: bool,
    /// Most top-level keys (100000).
    pub max_keys: usize,
    /// `[distributed-data.delta-crdt]`.
    pub delta_crdt: DeltaCrdtConfig,
    /// `[distributed-data.durable]`.
    pub durable: DurableConfig,
}

/// `[distributed-data.delta-crdt]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DeltaCrdtConfig {
    /// Propagate deltas (true).
    pub enabled: bool,
    /// Pending deltas kept per key (50).
    pub max_delta_size: usize,
}

/// `[distributed-data.durable]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DurableConfig {
    /// Durable keys: exact ids or prefixes ending in `*` ([]).
    pub keys: Vec<String>,
    /// How long pruning markers of durable keys are kept ("10d").
    #[serde(deserialize_with = "duration::de")]
    pub pruning_marker_time_to_live: Duration,
}

impl Default for DistributedDataConfig {
    fn default() -> Self {
        let d = ReplicatorSettings::default();
        DistributedDataConfig {
            role: String::new(),
            gossip_interval: Duration::from_millis(d.gossip_interval_ms),
            notify_subscribers_interval: Duration::from_millis(d.notify_subscribers_interval_ms),
            max_delta_elements: d.max_delta_elements,
            pruning_interval: Duration::from_millis(d.pruning_interval_ms),
            max_pruning_dissemination: Duration::from_millis(d.max_pruning_dissemination_ms),
            pruning_marker_time_to_live: Duration::from_millis(d.pruning_marker_time_to_live_ms),
            prefer_oldest: d.prefer_oldest,
            max_keys: d.max_keys,
            delta_crdt: DeltaCrdtConfig::default(),
            durable: DurableConfig::default(),
        }
    }
}

impl Default for DeltaCrdtConfig {
    fn default() -> Self {
        let d = ReplicatorSettings::default();
        DeltaCrdtConfig {
            enabled: d.delta_crdt_enabled,
            max_delta_size: d.max_delta_size,
        }
    }
}

impl Default for DurableConfig {
    fn default() -> Self {
        DurableConfig {
            keys: Vec::new(),
            pruning_marker_time_to_live: Duration::from_millis(
                ReplicatorSettings::default().durable_pruning_marker_time_to_live_ms,
            ),
        }
    }
}

/// `[singleton]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SingletonConfig {
    /// Run singletons only on members with this role ("" = any).
    pub role: String,
    /// How often the new oldest asks for the hand-over ("1s").
    #[serde(deserialize_with = "duration::de")]
    pub hand_over_retry_interval: Duration,
    /// Least number of hand-over retries (15).
    pub min_number_of_hand_over_retries: u32,
    /// Wait after a crashed oldest's removal before starting elsewhere; "off" or absent:
    /// the split brain resolver's `stable-after` when it is on, else 0.
    #[serde(deserialize_with = "duration::de_opt")]
    pub removal_margin: Option<Duration>,
    /// Start an instance only while holding a lease (false; a file lease in
    /// `split-brain-resolver.lease-majority.lease-directory`'s place).
    pub use_lease: bool,
    /// Retry interval for the lease ("5s").
    #[serde(deserialize_with = "duration::de")]
    pub lease_retry_interval: Duration,
}

impl Default for SingletonConfig {
    fn default() -> Self {
        let d = SingletonSettings::default();
        SingletonConfig {
            role: String::new(),
            hand_over_retry_interval: Duration::from_millis(d.hand_over_retry_interval_ms),
            min_number_of_hand_over_retries: d.min_number_of_hand_over_retries,
            removal_margin: None,
            use_lease: false,
            lease_retry_interval: Duration::from_millis(d.lease_retry_interval_ms),
        }
    }
}

/// `[singleton-proxy]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SingletonProxyConfig {
    /// How often the proxy looks for the instance ("1s").
    #[serde(deserialize_with = "duration::de")]
    pub singleton_identification_interval: Duration,
    /// Messages buffered while the instance moves (1000; 0 = none).
    pub buffer_size: usize,
}

impl Default for SingletonProxyConfig {
    fn default() -> Self {
        let d = SingletonSettings::default();
        SingletonProxyConfig {
            singleton_identification_interval: Duration::from_millis(
                d.singleton_identification_interval_ms,
            ),
            buffer_size: d.buffer_size,
        }
    }
}
