//! The settings each layer runs with, built from the configuration (Akka's
//! `ClusterSettings`, `ReplicatorSettings`, `ClusterSingletonManagerSettings`,
//! `ClusterShardingSettings`, and the split brain resolver's): [`Config`]'s methods that
//! hand the configuration to `concord-core`.

use std::time::Duration;

use concord_core::ddata::ReplicatorSettings;
use concord_core::kv::{KvSettings, Quorum};
use concord_core::settings::{ClusterSettings, FailureDetectorSettings};
use concord_core::sharding::{
    EntityRecoveryStrategy, LeastShardAllocationSettings, RememberEntitiesStore, ShardingSettings,
};
use concord_core::singleton::SingletonSettings;
use concord_core::split_brain_resolver::{DowningStrategy, SbrSettings};

use super::duration::ms;
use super::error::ConfigError;
use super::node_config::Config;

fn role(r: &str) -> Option<String> {
    (!r.is_empty()).then(|| r.to_string())
}

/// Largest envelope overhead Concord adds around a protocol's payload, bytes.
const ENVELOPE_OVERHEAD: usize = 128;

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

    /// The replicator's settings from `[distributed-data]` and the frame limits.
    pub fn replicator_settings(&self) -> ReplicatorSettings {
        let c = &self.distributed_data;
        ReplicatorSettings {
            role: role(&c.role),
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
            max_message_bytes: self
                .remote
                .maximum_frame_size
                .saturating_sub(ENVELOPE_OVERHEAD),
            max_value_bytes: self
                .remote
                .maximum_large_frame_size
                .saturating_sub(ENVELOPE_OVERHEAD),
            ..ReplicatorSettings::default()
        }
    }

    /// A removal margin: `set`, or else the split brain resolver's `stable-after` (0
    /// without a downing provider).
    fn removal_margin_ms(&self, set: Option<Duration>) -> u64 {
        match set {
            Some(d) => ms(d),
            None => self
                .cluster_settings()
                .downing
                .map_or(0, |d| d.stable_after_ms),
        }
    }

    /// The settings of singleton `name` from `[singleton]` and `[singleton-proxy]`.
    pub fn singleton_settings(&self, name: &str) -> SingletonSettings {
        let s = &self.singleton;
        let p = &self.singleton_proxy;
        let removal_margin_ms = self.removal_margin_ms(s.removal_margin);
        SingletonSettings {
            name: name.to_string(),
            role: role(&s.role),
            hand_over_retry_interval_ms: ms(s.hand_over_retry_interval),
            min_number_of_hand_over_retries: s.min_number_of_hand_over_retries,
            removal_margin_ms,
            use_lease: s.use_lease,
            lease_retry_interval_ms: ms(s.lease_retry_interval),
            singleton_identification_interval_ms: ms(p.singleton_identification_interval),
            buffer_size: p.buffer_size,
        }
    }

    /// The store's settings from `[kv]` (validated, so the quorums parse).
    pub fn kv_settings(&self) -> KvSettings {
        let c = &self.kv;
        let d = KvSettings::default();
        KvSettings {
            n: c.n,
            r: Quorum::parse(&c.r).unwrap_or(d.r),
            w: Quorum::parse(&c.w).unwrap_or(d.w),
            sloppy_quorum: c.sloppy_quorum,
            request_timeout_ms: ms(c.request_timeout).max(1),
            max_value_bytes: c.max_value_size,
            max_object_bytes: c.max_object_size,
            max_key_bytes: d.max_key_bytes,
            tombstone_grace_ms: ms(c.tombstone_grace),
            anti_entropy_interval_ms: ms(c.anti_entropy_interval).max(1),
            handoff_concurrency: c.handoff_concurrency.max(1),
            transfer_batch_bytes: c.transfer_batch_size,
            virtual_nodes: c.virtual_nodes,
            role: (!c.role.is_empty()).then(|| c.role.clone()),
            max_pending_requests: c.max_pending_requests,
            auto_commit: false,
        }
    }

    /// The settings of entity type `type_name` from `[sharding]` (the removal margin from
    /// the split brain resolver's `stable-after` unless set).
    pub fn sharding_settings(&self, type_name: &str) -> ShardingSettings {
        let c = &self.sharding;
        let removal_margin_ms = self.removal_margin_ms(c.removal_margin);
        let a = &c.least_shard_allocation_strategy;
        ShardingSettings {
            type_name: type_name.to_string(),
            role: (!c.role.is_empty()).then(|| c.role.clone()),
            proxy_only: false,
            number_of_shards: c.number_of_shards.max(1),
            buffer_size: c.buffer_size,
            entity_mailbox_size: c.entity_mailbox_size,
            retry_interval_ms: ms(c.retry_interval).max(1),
            rebalance_interval_ms: ms(c.rebalance_interval).max(1),
            handoff_timeout_ms: ms(c.handoff_timeout),
            shard_start_timeout_ms: ms(c.shard_start_timeout).max(1),
            passivation_idle_timeout_ms: c.passivation.idle_timeout.map(ms),
            active_entity_limit: (c.passivation.active_entity_limit > 0)
                .then_some(c.passivation.active_entity_limit),
            remember_entities: c.remember_entities,
            remember_entities_store: if c.remember_entities_store == "redb" {
                RememberEntitiesStore::External
            } else {
                RememberEntitiesStore::DistributedData
            },
            entity_recovery_strategy: if c.entity_recovery_strategy == "all" {
                EntityRecoveryStrategy::All
            } else {
                EntityRecoveryStrategy::Constant {
                    frequency_ms: ms(c.entity_recovery_constant_rate_strategy.frequency).max(1),
                    number_of_entities: c
                        .entity_recovery_constant_rate_strategy
                        .number_of_entities
                        .max(1),
                }
            },
            least_shard_allocation: LeastShardAllocationSettings {
                rebalance_absolute_limit: a.rebalance_absolute_limit,
                rebalance_relative_limit: a.rebalance_relative_limit,
                rebalance_threshold: a.rebalance_threshold,
                max_simultaneous_rebalance: a.max_simultaneous_rebalance,
            },
            coordinator_write_majority_plus: c.coordinator_state.write_majority_plus,
            coordinator_read_majority_plus: c.coordinator_state.read_majority_plus,
            majority_min_cap: c.majority_min_cap,
            waiting_for_state_timeout_ms: ms(c.waiting_for_state_timeout).max(1),
            updating_state_timeout_ms: ms(c.updating_state_timeout).max(1),
            removal_margin_ms,
            shard_region_query_timeout_ms: ms(c.shard_region_query_timeout).max(1),
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
