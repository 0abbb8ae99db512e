//! `[distributed-data]` (Akka's `akka.cluster.distributed-data`): the replicator's
//! section.

use std::time::Duration;

use concord_core::ddata::ReplicatorSettings;
use serde::{Deserialize, Serialize};

use crate::config::duration::ms;
use crate::config::{Config, ConfigSection, ENVELOPE_OVERHEAD};

/// `[distributed-data]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DistributedDataConfig {
    /// Replicate only among members with this role ("" = all).
    pub role: String,
    /// Anti-entropy gossip interval ("2s").
    #[serde(with = "crate::config::duration::required")]
    pub gossip_interval: Duration,
    /// How often subscribers hear of changes ("500ms").
    #[serde(with = "crate::config::duration::required")]
    pub notify_subscribers_interval: Duration,
    /// Keys per gossip chunk and most entries per gossip reply (500).
    pub max_delta_elements: usize,
    /// How often the leader checks for removed nodes to prune ("120s").
    #[serde(with = "crate::config::duration::required")]
    pub pruning_interval: Duration,
    /// All-reachable time before a removed node's entries are pruned ("300s").
    #[serde(with = "crate::config::duration::required")]
    pub max_pruning_dissemination: Duration,
    /// How long "pruning performed" markers are kept ("6h").
    #[serde(with = "crate::config::duration::required")]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DeltaCrdtConfig {
    /// Propagate deltas (true).
    pub enabled: bool,
    /// Pending deltas kept per key (50).
    pub max_delta_size: usize,
}

/// `[distributed-data.durable]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DurableConfig {
    /// Durable keys: exact ids or prefixes ending in `*` ([]).
    pub keys: Vec<String>,
    /// How long pruning markers of durable keys are kept ("10d").
    #[serde(with = "crate::config::duration::required")]
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

impl ConfigSection for DistributedDataConfig {
    const KEY: &'static str = "distributed-data";
}

impl DistributedDataConfig {
    /// The replicator's settings, with message and value limits from `config`'s frame
    /// sizes.
    pub fn settings(&self, config: &Config) -> ReplicatorSettings {
        let c = self;
        ReplicatorSettings {
            role: (!c.role.is_empty()).then(|| c.role.clone()),
            gossip_interval_ms: ms(c.gossip_interval),
            notify_subscribers_interval_ms: ms(c.notify_subscribers_interval),
            max_delta_elements: c.max_delta_elements,
            delta_crdt_enabled: c.delta_crdt.enabled,
            delta_propagation_interval_ms: (ms(c.gossip_interval) / 5).max(200),
            max_delta_size: c.delta_crdt.max_delta_size,
            pruning_interval_ms: ms(c.pruning_interval),
            max_pruning_dissemination_ms: ms(c.max_pruning_dissemination),
            pruning_marker_time_to_live_ms: ms(c.pruning_marker_time_to_live),
            durable_pruning_marker_time_to_live_ms: ms(c.durable.pruning_marker_time_to_live),
            durable_keys: c.durable.keys.clone(),
            prefer_oldest: c.prefer_oldest,
            max_keys: c.max_keys,
            max_message_bytes: config
                .remote
                .maximum_frame_size
                .saturating_sub(ENVELOPE_OVERHEAD),
            max_value_bytes: config
                .remote
                .maximum_large_frame_size
                .saturating_sub(ENVELOPE_OVERHEAD),
            ..ReplicatorSettings::default()
        }
    }
}
