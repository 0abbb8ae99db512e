//! The membership settings the node runs with, built from the configuration (Akka's
//! `ClusterSettings` and the split brain resolver's): [`Config`]'s methods that hand the
//! configuration to `concord-core`. The layers' sections build their own settings (e.g.
//! `ShardingConfig::settings` in the sharding folder).

use std::time::Duration;

use concord_core::settings::{ClusterSettings, FailureDetectorSettings};
use concord_core::split_brain_resolver::{DowningStrategy, SbrSettings};

use super::duration::ms;
use super::error::ConfigError;
use super::node_config::Config;

/// Largest envelope overhead Concord adds around a protocol's payload, bytes.
pub(crate) const ENVELOPE_OVERHEAD: usize = 128;

impl Config {
    /// The membership settings for `concord-core`.
    pub fn cluster_settings(&self) -> ClusterSettings {
        let c = &self.cluster;
        let fd = &c.failure_detector;
        ClusterSettings {
            seed_node_timeout_ms: ms(c.seed_node_timeout),
            retry_unsuccessful_join_after_ms: c.retry_unsuccessful_join_after.map(ms),
            shutdown_after_unsuccessful_join_seed_nodes_ms: c
                .shutdown_after_unsuccessful_join_seed_nodes
                .map(ms),
            periodic_tasks_initial_delay_ms: ms(c.periodic_tasks_initial_delay),
            gossip_interval_ms: ms(c.gossip_interval),
            leader_actions_interval_ms: ms(c.leader_actions_interval),
            unreachable_nodes_reaper_interval_ms: ms(c.unreachable_nodes_reaper_interval),
            min_nr_of_members: c.min_nr_of_members,
            min_nr_of_members_of_role: c
                .role
                .iter()
                .map(|(k, v)| (k.clone(), v.min_nr_of_members))
                .collect(),
            weakly_up_after_ms: c.allow_weakly_up_members.map(ms),
            gossip_different_view_probability: c.gossip_different_view_probability,
            reduce_gossip_different_view_probability: c.reduce_gossip_different_view_probability,
            prune_gossip_tombstones_after_ms: ms(c.prune_gossip_tombstones_after),
            run_coordinated_shutdown_when_down: c.run_coordinated_shutdown_when_down,
            exiting_shutdown_timeout_ms: ms(c.exiting_shutdown_timeout),
            quarantine_removed_node_after_ms: ms(c.quarantine_removed_node_after),
            failure_detector: FailureDetectorSettings {
                heartbeat_interval_ms: ms(fd.heartbeat_interval),
                threshold: fd.threshold,
                max_sample_size: fd.max_sample_size,
                min_std_deviation_ms: ms(fd.min_std_deviation),
                acceptable_heartbeat_pause_ms: ms(fd.acceptable_heartbeat_pause),
                monitored_by_nr_of_members: fd.monitored_by_nr_of_members,
                expected_response_after_ms: ms(fd.expected_response_after),
            },
            // Validated in `validate`; an invalid provider never reaches here.
            downing: self.downing().unwrap_or(None),
            island_resolution: c.island_resolution,
        }
    }

    /// A removal margin: `set`, or else the split brain resolver's `stable-after` (0
    /// without a downing provider).
    pub fn removal_margin_ms(&self, set: Option<Duration>) -> u64 {
        match set {
            Some(d) => ms(d),
            None => self
                .cluster_settings()
                .downing
                .map_or(0, |d| d.stable_after_ms),
        }
    }

    /// The downing provider: `None` for `downing-provider = "none"`.
    pub fn downing(&self) -> Result<Option<SbrSettings>, ConfigError> {
        match self.cluster.downing_provider.as_str() {
            "none" | "" => return Ok(None),
            "split-brain-resolver" => {}
            other => {
                return Err(ConfigError::new(
                    "cluster.downing-provider",
                    format!("`{other}` is not one of \"split-brain-resolver\", \"none\""),
                ))
            }
        }
        let c = &self.cluster.split_brain_resolver;
        let role = |r: &str| {
            if r.is_empty() {
                None
            } else {
                Some(r.to_string())
            }
        };
        let strategy = match c.active_strategy.as_str() {
            "keep-majority" => DowningStrategy::KeepMajority { role: role(&c.keep_majority.role) },
            "static-quorum" => {
                let q = c.static_quorum.quorum_size.filter(|q| *q > 0).ok_or_else(|| {
                    ConfigError::new("cluster.split-brain-resolver.static-quorum.quorum-size", "must be set to at least 1 for static-quorum")
                })?;
                DowningStrategy::StaticQuorum { quorum_size: q, role: role(&c.static_quorum.role) }
            }
            "keep-oldest" => DowningStrategy::KeepOldest { down_if_alone: c.keep_oldest.down_if_alone, role: role(&c.keep_oldest.role) },
            "down-all" => DowningStrategy::DownAll,
            "lease-majority" => {
                if c.lease_majority.lease_implementation != "file" {
                    return Err(ConfigError::new(
                        "cluster.split-brain-resolver.lease-majority.lease-implementation",
                        format!("`{}` is not a known lease implementation (\"file\")", c.lease_majority.lease_implementation),
                    ));
                }
                DowningStrategy::LeaseMajority {
                    role: role(&c.lease_majority.role),
                    acquire_lease_delay_for_minority_ms: ms(c.lease_majority.acquire_lease_delay_for_minority),
                    release_after_ms: ms(c.lease_majority.release_after),
                }
            }
            other => {
                return Err(ConfigError::new(
                    "cluster.split-brain-resolver.active-strategy",
                    format!("`{other}` is not one of keep-majority, static-quorum, keep-oldest, down-all, lease-majority"),
                ))
            }
        };
        if c.stable_after.is_zero() {
            return Err(ConfigError::new(
                "cluster.split-brain-resolver.stable-after",
                "must be greater than zero",
            ));
        }
        let stable_after_ms = ms(c.stable_after);
        let down_all_when_unstable_ms = match c.down_all_when_unstable.trim() {
            "on" | "true" => Some(SbrSettings::derived_down_all_when_unstable_ms(
                stable_after_ms,
            )),
            "off" | "false" => None,
            d => Some(ms(humantime::parse_duration(d).map_err(|e| {
                ConfigError::new(
                    "cluster.split-brain-resolver.down-all-when-unstable",
                    format!("`{d}` is not \"on\", \"off\" or a duration: {e}"),
                )
            })?)),
        };
        Ok(Some(SbrSettings {
            strategy,
            stable_after_ms,
            down_all_when_unstable_ms,
            rules: concord_core::split_brain_resolver::SbrRules::Concord,
        }))
    }

    /// The lease name for lease-majority: `lease-name` without surrounding whitespace, or
    /// `<system>-concord-sbr` when that leaves nothing (an empty name or one of only
    /// spaces; Akka's `lease-name` is trimmed the same way).
    pub fn lease_name(&self) -> String {
        let n = self
            .cluster
            .split_brain_resolver
            .lease_majority
            .lease_name
            .trim();
        if n.is_empty() {
            format!("{}-concord-sbr", self.system)
        } else {
            n.to_string()
        }
    }
}
