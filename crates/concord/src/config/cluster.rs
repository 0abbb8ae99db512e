//! `[cluster]`: membership (Akka `akka.cluster`), the failure detector and the Split Brain
//! Resolver's keys (its settings are built in [`super::split_brain_resolver`]).

use std::collections::BTreeMap;
use std::time::Duration;

use concord_core::settings::{ClusterSettings, FailureDetectorSettings};
use serde::Deserialize;

use super::duration;
use super::split_brain_resolver::SplitBrainResolverConfig;

/// `[cluster.role.<name>]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RoleConfig {
    /// Members with this role needed before the leader moves anyone to Up.
    pub min_nr_of_members: usize,
}

/// `[cluster.failure-detector]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct FailureDetectorConfig {
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub heartbeat_interval: Duration,
    /// 8.0.
    pub threshold: f64,
    /// 1000.
    pub max_sample_size: usize,
    /// "100ms".
    #[serde(deserialize_with = "duration::de")]
    pub min_std_deviation: Duration,
    /// "3s".
    #[serde(deserialize_with = "duration::de")]
    pub acceptable_heartbeat_pause: Duration,
    /// 5.
    pub monitored_by_nr_of_members: usize,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub expected_response_after: Duration,
}

impl Default for FailureDetectorConfig {
    fn default() -> Self {
        let d = FailureDetectorSettings::default();
        FailureDetectorConfig {
            heartbeat_interval: Duration::from_millis(d.heartbeat_interval_ms),
            threshold: d.threshold,
            max_sample_size: d.max_sample_size,
            min_std_deviation: Duration::from_millis(d.min_std_deviation_ms),
            acceptable_heartbeat_pause: Duration::from_millis(d.acceptable_heartbeat_pause_ms),
            monitored_by_nr_of_members: d.monitored_by_nr_of_members,
            expected_response_after: Duration::from_millis(d.expected_response_after_ms),
        }
    }
}

/// `[cluster]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Seed nodes: `concord://system@host:port` or `host:port`.
    pub seed_nodes: Vec<String>,
    /// Roles of this node.
    pub roles: Vec<String>,
    /// Application version ("0.0.0").
    pub app_version: String,
    /// "5s".
    #[serde(deserialize_with = "duration::de")]
    pub seed_node_timeout: Duration,
    /// "10s" or "off".
    #[serde(deserialize_with = "duration::de_opt")]
    pub retry_unsuccessful_join_after: Option<Duration>,
    /// "off" or a duration.
    #[serde(deserialize_with = "duration::de_opt")]
    pub shutdown_after_unsuccessful_join_seed_nodes: Option<Duration>,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub periodic_tasks_initial_delay: Duration,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub gossip_interval: Duration,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub leader_actions_interval: Duration,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub unreachable_nodes_reaper_interval: Duration,
    /// 1.
    pub min_nr_of_members: usize,
    /// Per-role settings.
    pub role: BTreeMap<String, RoleConfig>,
    /// "7s" or "off".
    #[serde(deserialize_with = "duration::de_opt")]
    pub allow_weakly_up_members: Option<Duration>,
    /// 0.8.
    pub gossip_different_view_probability: f64,
    /// 400.
    pub reduce_gossip_different_view_probability: usize,
    /// "24h".
    #[serde(deserialize_with = "duration::de")]
    pub prune_gossip_tombstones_after: Duration,
    /// true.
    pub run_coordinated_shutdown_when_down: bool,
    /// "10s".
    #[serde(deserialize_with = "duration::de")]
    pub exiting_shutdown_timeout: Duration,
    /// A removed incarnation is refused this long after its removal ("5s").
    #[serde(deserialize_with = "duration::de")]
    pub quarantine_removed_node_after: Duration,
    /// Membership event batches kept for subscribers that read slowly (1024); one that
    /// falls further behind receives a fresh `CurrentClusterState` instead of a gap.
    pub event_buffer_size: usize,
    /// `[cluster.failure-detector]`.
    pub failure_detector: FailureDetectorConfig,
    /// `"split-brain-resolver"` (default) or `"none"` (manual downing only).
    pub downing_provider: String,
    /// `[cluster.split-brain-resolver]`.
    pub split_brain_resolver: SplitBrainResolverConfig,
    /// Keep the membership record `<data-dir>/membership.json` (true): a node that was a
    /// member never forms a new cluster because its seed nodes did not answer in time.
    pub membership_record: bool,
    /// `"rejoin"` (default) or `"report"`: what a member does when its cluster proves to be
    /// an island (re-formed from a cluster that is still running).
    pub island_resolution: concord_core::IslandResolution,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        let d = ClusterSettings::default();
        let ms = Duration::from_millis;
        ClusterConfig {
            seed_nodes: Vec::new(),
            roles: Vec::new(),
            app_version: "0.0.0".into(),
            seed_node_timeout: ms(d.seed_node_timeout_ms),
            retry_unsuccessful_join_after: d.retry_unsuccessful_join_after_ms.map(ms),
            shutdown_after_unsuccessful_join_seed_nodes: None,
            periodic_tasks_initial_delay: ms(d.periodic_tasks_initial_delay_ms),
            gossip_interval: ms(d.gossip_interval_ms),
            leader_actions_interval: ms(d.leader_actions_interval_ms),
            unreachable_nodes_reaper_interval: ms(d.unreachable_nodes_reaper_interval_ms),
            min_nr_of_members: d.min_nr_of_members,
            role: BTreeMap::new(),
            allow_weakly_up_members: d.weakly_up_after_ms.map(ms),
            gossip_different_view_probability: d.gossip_different_view_probability,
            reduce_gossip_different_view_probability: d.reduce_gossip_different_view_probability,
            prune_gossip_tombstones_after: ms(d.prune_gossip_tombstones_after_ms),
            run_coordinated_shutdown_when_down: d.run_coordinated_shutdown_when_down,
            exiting_shutdown_timeout: ms(d.exiting_shutdown_timeout_ms),
            quarantine_removed_node_after: ms(d.quarantine_removed_node_after_ms),
            event_buffer_size: 1024,
            failure_detector: FailureDetectorConfig::default(),
            downing_provider: "split-brain-resolver".into(),
            split_brain_resolver: SplitBrainResolverConfig::default(),
            membership_record: true,
            island_resolution: concord_core::IslandResolution::Rejoin,
        }
    }
}
