//! `[sharding]` (Akka's `akka.cluster.sharding`): the defaults every entity type started
//! with [`super::Sharding::init`] uses unless it passes its own settings.

use std::time::Duration;

use concord_core::cluster_metrics::CapacitySelector;
use concord_core::sharding::{
    EntityRecoveryStrategy, LeastShardAllocationSettings, LoadAwareAllocationSettings,
    RememberEntitiesStore, ShardingSettings,
};
use serde::{Deserialize, Serialize};

use crate::config::duration::ms;
use crate::config::{Config, ConfigError, ConfigSection};

/// `[sharding]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ShardingConfig {
    /// Host shards only on members with this role ("" = every member); other members run
    /// proxies.
    pub role: String,
    /// Shards of the default message extractor (1000); changing it needs a full cluster
    /// restart.
    pub number_of_shards: u32,
    /// Messages a region buffers while homes are unknown or shards move (100000).
    pub buffer_size: usize,
    /// Messages waiting for one entity (10000).
    pub entity_mailbox_size: usize,
    /// Re-ask the coordinator for unknown homes; longest register back-off ("2s").
    #[serde(with = "crate::config::duration::required")]
    pub retry_interval: Duration,
    /// How often the coordinator looks for shards to rebalance ("10s").
    #[serde(with = "crate::config::duration::required")]
    pub rebalance_interval: Duration,
    /// The longest a handoff may take ("60s").
    #[serde(with = "crate::config::duration::required")]
    pub handoff_timeout: Duration,
    /// `HostShard` is re-sent until confirmed, every ("10s").
    #[serde(with = "crate::config::duration::required")]
    pub shard_start_timeout: Duration,
    /// Remember entities (false).
    pub remember_entities: bool,
    /// Where remembered entities are kept: "ddata" (default) or "redb" (a local file
    /// `sharding-remember.redb` in `data-dir`).
    pub remember_entities_store: String,
    /// "all" or "constant" (default "constant": `entity-recovery-constant-rate-strategy`).
    pub entity_recovery_strategy: String,
    /// `[sharding.entity-recovery-constant-rate-strategy]`.
    pub entity_recovery_constant_rate_strategy: RecoveryRateConfig,
    /// `[sharding.passivation]`.
    pub passivation: PassivationConfig,
    /// `[sharding.least-shard-allocation-strategy]` (also the rebalance limits of the
    /// load-aware strategy).
    pub least_shard_allocation_strategy: AllocationConfig,
    /// Where new shards go and which move: "least-shard" (the default, Akka's
    /// `LeastShardAllocationStrategy`) or "load-aware" (also weighs each node's load from
    /// `[cluster-metrics]`; docs/SHARDING.md, "Load-aware allocation").
    pub allocation_strategy: String,
    /// Load-aware: a node is *above* when its load (`1 − capacity`, 0.0 idle … 1.0
    /// saturated) exceeds the mean of the nodes' loads by more than this, 0.0–1.0 (0.2).
    /// An above node gets no new shards; one above for `load-sustained-rounds` rounds
    /// gives shards up.
    pub load_threshold: f64,
    /// Load-aware: consecutive rebalance rounds (`rebalance-interval` apart) a node must be
    /// above before shards move away from it, at least 1 (3).
    pub load_sustained_rounds: u32,
    /// Load-aware: which capacity the load is measured by: "cpu", "load" (load average
    /// per processor), "memory", "queues" (Concord's lanes, buffers and mailboxes) or
    /// "mix" (the mean of those the node samples; the default).
    pub load_selector: String,
    /// `[sharding.coordinator-state]`.
    pub coordinator_state: CoordinatorStateConfig,
    /// The least number of replicas of a majority for coordinator state (5).
    pub majority_min_cap: usize,
    /// Timeout of a coordinator-state read ("2s").
    #[serde(with = "crate::config::duration::required")]
    pub waiting_for_state_timeout: Duration,
    /// Timeout of a coordinator-state or remember-entities write ("5s").
    #[serde(with = "crate::config::duration::required")]
    pub updating_state_timeout: Duration,
    /// Timeout of `GET /cluster/shards/{name}` ("3s").
    #[serde(with = "crate::config::duration::required")]
    pub shard_region_query_timeout: Duration,
    /// Wait after a region's node is removed before its shards go elsewhere; "off" or
    /// absent: the split brain resolver's `stable-after` when it is on, else 0.
    #[serde(with = "crate::config::duration::optional")]
    pub removal_margin: Option<Duration>,
}

/// `[sharding.entity-recovery-constant-rate-strategy]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct RecoveryRateConfig {
    /// Period ("100ms").
    #[serde(with = "crate::config::duration::required")]
    pub frequency: Duration,
    /// Entities started per period (100).
    pub number_of_entities: usize,
}

/// `[sharding.passivation]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct PassivationConfig {
    /// Passivate entities idle this long ("120s"; "off": never).
    #[serde(with = "crate::config::duration::optional")]
    pub idle_timeout: Option<Duration>,
    /// Most active entities per region, least recently used passivated first (0 = no
    /// limit).
    pub active_entity_limit: usize,
}

/// `[sharding.least-shard-allocation-strategy]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct AllocationConfig {
    /// Most shards per rebalance round (20; 0 selects Akka's old algorithm).
    pub rebalance_absolute_limit: usize,
    /// Most shards per round as a fraction of all shards (0.1).
    pub rebalance_relative_limit: f64,
    /// Old algorithm: the difference that starts a rebalance (1).
    pub rebalance_threshold: usize,
    /// Old algorithm: most shards moving at once (3).
    pub max_simultaneous_rebalance: usize,
}

/// `[sharding.coordinator-state]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct CoordinatorStateConfig {
    /// Replicas beyond a majority for writes (3).
    pub write_majority_plus: usize,
    /// Replicas beyond a majority for reads (5).
    pub read_majority_plus: usize,
}

impl Default for ShardingConfig {
    fn default() -> Self {
        let d = ShardingSettings::default();
        let (frequency, number) = match d.entity_recovery_strategy {
            EntityRecoveryStrategy::Constant {
                frequency_ms,
                number_of_entities,
            } => (frequency_ms, number_of_entities),
            EntityRecoveryStrategy::All => (100, 100),
        };
        ShardingConfig {
            role: String::new(),
            number_of_shards: d.number_of_shards,
            buffer_size: d.buffer_size,
            entity_mailbox_size: d.entity_mailbox_size,
            retry_interval: Duration::from_millis(d.retry_interval_ms),
            rebalance_interval: Duration::from_millis(d.rebalance_interval_ms),
            handoff_timeout: Duration::from_millis(d.handoff_timeout_ms),
            shard_start_timeout: Duration::from_millis(d.shard_start_timeout_ms),
            remember_entities: d.remember_entities,
            remember_entities_store: "ddata".into(),
            entity_recovery_strategy: match d.entity_recovery_strategy {
                EntityRecoveryStrategy::All => "all".into(),
                EntityRecoveryStrategy::Constant { .. } => "constant".into(),
            },
            entity_recovery_constant_rate_strategy: RecoveryRateConfig {
                frequency: Duration::from_millis(frequency),
                number_of_entities: number,
            },
            passivation: PassivationConfig {
                idle_timeout: d.passivation_idle_timeout_ms.map(Duration::from_millis),
                active_entity_limit: d.active_entity_limit.unwrap_or(0),
            },
            least_shard_allocation_strategy: AllocationConfig {
                rebalance_absolute_limit: d.least_shard_allocation.rebalance_absolute_limit,
                rebalance_relative_limit: d.least_shard_allocation.rebalance_relative_limit,
                rebalance_threshold: d.least_shard_allocation.rebalance_threshold,
                max_simultaneous_rebalance: d.least_shard_allocation.max_simultaneous_rebalance,
            },
            allocation_strategy: "least-shard".into(),
            load_threshold: LoadAwareAllocationSettings::default().load_threshold,
            load_sustained_rounds: LoadAwareAllocationSettings::default().load_sustained_rounds,
            load_selector: "mix".into(),
            coordinator_state: CoordinatorStateConfig {
                write_majority_plus: d.coordinator_write_majority_plus,
                read_majority_plus: d.coordinator_read_majority_plus,
            },
            majority_min_cap: d.majority_min_cap,
            waiting_for_state_timeout: Duration::from_millis(d.waiting_for_state_timeout_ms),
            updating_state_timeout: Duration::from_millis(d.updating_state_timeout_ms),
            shard_region_query_timeout: Duration::from_millis(d.shard_region_query_timeout_ms),
            removal_margin: None,
        }
    }
}

impl Default for RecoveryRateConfig {
    fn default() -> Self {
        ShardingConfig::default().entity_recovery_constant_rate_strategy
    }
}

impl Default for PassivationConfig {
    fn default() -> Self {
        ShardingConfig::default().passivation
    }
}

impl Default for AllocationConfig {
    fn default() -> Self {
        ShardingConfig::default().least_shard_allocation_strategy
    }
}

impl Default for CoordinatorStateConfig {
    fn default() -> Self {
        ShardingConfig::default().coordinator_state
    }
}

impl ConfigSection for ShardingConfig {
    const KEY: &'static str = "sharding";

    fn validate(&self, _config: &Config) -> Result<(), ConfigError> {
        self.check()
    }
}

impl ShardingConfig {
    /// The settings of entity type `type_name` (the removal margin from the split brain
    /// resolver's `stable-after` in `config` unless set).
    pub fn settings(&self, type_name: &str, config: &Config) -> ShardingSettings {
        let c = self;
        let removal_margin_ms = config.removal_margin_ms(c.removal_margin);
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
            load_aware_allocation: (c.allocation_strategy == "load-aware").then(|| {
                LoadAwareAllocationSettings {
                    load_threshold: c.load_threshold,
                    load_sustained_rounds: c.load_sustained_rounds.max(1),
                    selector: selector(&c.load_selector).unwrap_or_default(),
                    ..LoadAwareAllocationSettings::default()
                }
            }),
            coordinator_write_majority_plus: c.coordinator_state.write_majority_plus,
            coordinator_read_majority_plus: c.coordinator_state.read_majority_plus,
            majority_min_cap: c.majority_min_cap,
            waiting_for_state_timeout_ms: ms(c.waiting_for_state_timeout).max(1),
            updating_state_timeout_ms: ms(c.updating_state_timeout).max(1),
            removal_margin_ms,
            shard_region_query_timeout_ms: ms(c.shard_region_query_timeout).max(1),
        }
    }

    /// Checks the values that have no meaning (the first error, naming its key).
    fn check(&self) -> Result<(), ConfigError> {
        let mut errors = Vec::new();
        if self.number_of_shards == 0 {
            errors.push(ConfigError::new(
                "sharding.number-of-shards",
                "must be at least 1",
            ));
        }
        if !matches!(self.remember_entities_store.as_str(), "ddata" | "redb") {
            errors.push(ConfigError::new(
                "sharding.remember-entities-store",
                format!(
                    "`{}` is not a store: \"ddata\" or \"redb\"",
                    self.remember_entities_store
                ),
            ));
        }
        if !matches!(self.entity_recovery_strategy.as_str(), "all" | "constant") {
            errors.push(ConfigError::new(
                "sharding.entity-recovery-strategy",
                format!(
                    "`{}` is not a strategy: \"all\" or \"constant\"",
                    self.entity_recovery_strategy
                ),
            ));
        }
        let r = self
            .least_shard_allocation_strategy
            .rebalance_relative_limit;
        if !(0.0..=1.0).contains(&r) {
            errors.push(ConfigError::new(
                "sharding.least-shard-allocation-strategy.rebalance-relative-limit",
                "must be between 0.0 and 1.0",
            ));
        }
        if !matches!(
            self.allocation_strategy.as_str(),
            "least-shard" | "load-aware"
        ) {
            errors.push(ConfigError::new(
                "sharding.allocation-strategy",
                format!(
                    "`{}` is not a strategy: \"least-shard\" or \"load-aware\"",
                    self.allocation_strategy
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.load_threshold) {
            errors.push(ConfigError::new(
                "sharding.load-threshold",
                "must be between 0.0 and 1.0",
            ));
        }
        if self.load_sustained_rounds == 0 {
            errors.push(ConfigError::new(
                "sharding.load-sustained-rounds",
                "must be at least 1",
            ));
        }
        if selector(&self.load_selector).is_none() {
            errors.push(ConfigError::new(
                "sharding.load-selector",
                format!(
                    "`{}` is not a selector: \"cpu\", \"load\", \"memory\", \"queues\" or \"mix\"",
                    self.load_selector
                ),
            ));
        }
        if self.buffer_size == 0 || self.entity_mailbox_size == 0 {
            errors.push(ConfigError::new(
                "sharding.buffer-size",
                "buffer-size and entity-mailbox-size must be at least 1",
            ));
        }
        if self.handoff_timeout < Duration::from_secs(1) {
            errors.push(ConfigError::new(
                "sharding.handoff-timeout",
                "must be at least 1s",
            ));
        }
        match errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The capacity selector named `name` in `load-selector`.
fn selector(name: &str) -> Option<CapacitySelector> {
    match name {
        "cpu" => Some(CapacitySelector::Cpu),
        "load" => Some(CapacitySelector::Load),
        "memory" => Some(CapacitySelector::Memory),
        "queues" => Some(CapacitySelector::Queues),
        "mix" => Some(CapacitySelector::Mix),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_shard_by_default_and_load_aware_when_asked() {
        let c = ShardingConfig::default();
        assert_eq!(c.check(), Ok(()));
        let config = Config::default();
        assert_eq!(c.settings("t", &config).load_aware_allocation, None);
        let c = ShardingConfig {
            allocation_strategy: "load-aware".into(),
            load_threshold: 0.3,
            load_sustained_rounds: 5,
            load_selector: "queues".into(),
            ..ShardingConfig::default()
        };
        assert_eq!(c.check(), Ok(()));
        let s = c
            .settings("t", &config)
            .load_aware_allocation
            .expect("load-aware");
        assert_eq!(s.load_threshold, 0.3);
        assert_eq!(s.load_sustained_rounds, 5);
        assert_eq!(s.selector, CapacitySelector::Queues);
        assert_eq!(s.shard_count_weight, 1.0);
    }

    #[test]
    fn load_aware_keys_are_validated() {
        let bad = |f: fn(&mut ShardingConfig)| {
            let mut c = ShardingConfig::default();
            f(&mut c);
            c.check().map_err(|e| e.to_string())
        };
        let e = bad(|c| c.allocation_strategy = "random".into()).unwrap_err();
        assert!(e.contains("sharding.allocation-strategy"), "{e}");
        let e = bad(|c| c.load_threshold = f64::NAN).unwrap_err();
        assert!(e.contains("sharding.load-threshold"), "{e}");
        let e = bad(|c| c.load_threshold = 1.5).unwrap_err();
        assert!(e.contains("sharding.load-threshold"), "{e}");
        let e = bad(|c| c.load_sustained_rounds = 0).unwrap_err();
        assert!(e.contains("sharding.load-sustained-rounds"), "{e}");
        let e = bad(|c| c.load_selector = "heap".into()).unwrap_err();
        assert!(e.contains("sharding.load-selector"), "{e}");
    }

    #[test]
    fn the_keys_parse_from_toml() {
        let c: ShardingConfig = toml::from_str(
            "allocation-strategy = \"load-aware\"\nload-threshold = 0.25\nload-sustained-rounds = 2\nload-selector = \"cpu\"\n",
        )
        .expect("parses");
        assert_eq!(c.allocation_strategy, "load-aware");
        assert_eq!(c.load_threshold, 0.25);
        assert_eq!(c.load_sustained_rounds, 2);
        assert_eq!(c.load_selector, "cpu");
    }
}
