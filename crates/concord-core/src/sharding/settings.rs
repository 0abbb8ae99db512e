//! [`ShardingSettings`]: Akka's `akka.cluster.sharding` settings with their defaults
//! (research notes, anchors §2.4), except where a field's doc says why Concord differs.

use crate::cluster_metrics::CapacitySelector;

/// How remembered entities are started again when their shard starts (Akka
/// `entity-recovery-strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntityRecoveryStrategy {
    /// All at once (Akka `all`, the default).
    All,
    /// `number_of_entities` every `frequency_ms` (Akka `constant`: 5 per 100 ms).
    Constant {
        /// Period, ms.
        frequency_ms: u64,
        /// Entities started per period, count.
        number_of_entities: usize,
    },
}

/// Where remembered entity ids are kept (Akka `remember-entities-store`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RememberEntitiesStore {
    /// In Distributed Data (the sharding machine's own replicator), one `ORSet` per shard
    /// under the durable key `shard-<type>-<shard>`, written with `WriteMajorityPlus`
    /// (Akka's `ddata` store, the default).
    DistributedData,
    /// In a store the runtime provides (Concord's node: a local `redb` file); the machine
    /// asks for it with [`super::ShardingEvent::RememberLoad`] and
    /// [`super::ShardingEvent::RememberUpdate`].
    External,
}

/// Settings of the Least Shard Allocation Strategy (Akka
/// `least-shard-allocation-strategy`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeastShardAllocationSettings {
    /// Most shards moved in one rebalance round, count (Akka `rebalance-absolute-limit`).
    /// Akka's default 0 selects its old algorithm; Concord's default is 20, the newer
    /// algorithm (Akka's docs suggest 20).
    pub rebalance_absolute_limit: usize,
    /// Most shards moved in one round as a fraction of all shards (Akka
    /// `rebalance-relative-limit`, 0.1).
    pub rebalance_relative_limit: f64,
    /// Old algorithm only: the difference between the fullest and the emptiest region that
    /// starts a rebalance (Akka `rebalance-threshold`, 1).
    pub rebalance_threshold: usize,
    /// Old algorithm only: most shards moving at once (Akka `max-simultaneous-rebalance`, 3).
    pub max_simultaneous_rebalance: usize,
}

impl Default for LeastShardAllocationSettings {
    fn default() -> Self {
        LeastShardAllocationSettings {
            rebalance_absolute_limit: 20,
            rebalance_relative_limit: 0.1,
            rebalance_threshold: 1,
            max_simultaneous_rebalance: 3,
        }
    }
}

/// Settings of the Load-Aware Shard Allocation Strategy (Concord's; no Akka equivalent —
/// Akka's cluster-metrics only drive routers). Loads are in *load units*: a node's
/// `1 − capacity` by [`Self::selector`], 0.0 idle … 1.0 saturated. See
/// [`super::LoadAwareShardAllocationStrategy`] for how each field is used.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoadAwareAllocationSettings {
    /// A region is *above* when its load exceeds the mean of the regions' loads by more
    /// than this, load units (0.2; 0.0–1.0). An above region gets no new shard while a
    /// region of the same preference class (Up, app-version) is not above.
    pub load_threshold: f64,
    /// Shards move away from a region only after it has been above in this many consecutive
    /// rebalance rounds, count (3; at least 1): with `rebalance-interval` 10 s, about half a
    /// minute of sustained load, longer than the metrics' 12 s half-life.
    pub load_sustained_rounds: u32,
    /// How much a region's shard count adds to its measured load when a new shard's home is
    /// chosen, load units per `optimal` shards (1.0): a region holding the optimal count
    /// counts as one load unit busier. Keeps a burst of allocations from all landing on the
    /// one idle node before the metrics show the shards' load.
    pub shard_count_weight: f64,
    /// Which capacity the runtime measures loads by (`Mix`, the mean of CPU, load average,
    /// memory and queues; Akka's default selector).
    pub selector: CapacitySelector,
}

impl Default for LoadAwareAllocationSettings {
    fn default() -> Self {
        LoadAwareAllocationSettings {
            load_threshold: 0.2,
            load_sustained_rounds: 3,
            shard_count_weight: 1.0,
            selector: CapacitySelector::Mix,
        }
    }
}

/// Settings of one entity type's sharding (region, shards, coordinator). Durations in ms,
/// sizes in counts.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardingSettings {
    /// The entity type's name (Akka's `typeName`); every node must use the same.
    pub type_name: String,
    /// Host shards (and run the coordinator) only on members with this role; a node
    /// without it runs a proxy.
    pub role: Option<String>,
    /// Host nothing here, only route (Akka's proxy-only region).
    pub proxy_only: bool,
    /// Shards of the default message extractor (Akka typed `number-of-shards`, 1000).
    pub number_of_shards: u32,
    /// Messages a region buffers while shard homes are unknown or entities are moving, in
    /// all, count (Akka `buffer-size`, 100 000); more are dropped and counted.
    pub buffer_size: usize,
    /// Messages waiting for one entity's handler, count; more are dropped and counted.
    pub entity_mailbox_size: usize,
    /// Re-ask the coordinator for buffered shards' homes, and the longest register
    /// back-off, ms (Akka `retry-interval`, 2 s).
    pub retry_interval_ms: u64,
    /// How often the coordinator looks for shards to rebalance, ms (Akka
    /// `rebalance-interval`, 10 s). A round that moved shards is followed at once by the
    /// next while the strategy still finds shards to move (Concord: so a new node gets its
    /// share in seconds, not `shards / limit` intervals).
    pub rebalance_interval_ms: u64,
    /// The longest a handoff may take before it is ended, ms (Akka `handoff-timeout`,
    /// 60 s); entities that have not stopped are force-stopped 5 s earlier.
    pub handoff_timeout_ms: u64,
    /// `HostShard` is sent again until `ShardStarted`, every this, ms (Akka
    /// `shard-start-timeout`, 10 s).
    pub shard_start_timeout_ms: u64,
    /// Passivate entities idle this long, ms (Akka `passivation.default-idle-strategy`,
    /// 120 s); `None`: never.
    pub passivation_idle_timeout_ms: Option<u64>,
    /// Most active entities in this region; the least recently used is passivated when a
    /// new one starts (Akka's `active-entity-limit` with LRU replacement); `None`: no
    /// limit (the default, as Akka's idle strategy).
    pub active_entity_limit: Option<usize>,
    /// Remember entities: started entities are recorded and started again when their
    /// shard starts elsewhere after a rebalance or a crash (Akka `remember-entities`, off).
    pub remember_entities: bool,
    /// Where remembered entities are kept.
    pub remember_entities_store: RememberEntitiesStore,
    /// How remembered entities are started again (Concord: 100 every 100 ms by default, so
    /// a shard with many remembered entities does not start them all in one burst; Akka's
    /// default is `all`).
    pub entity_recovery_strategy: EntityRecoveryStrategy,
    /// The allocation strategy's settings (also the rebalance limits and the fallback of
    /// the load-aware strategy).
    pub least_shard_allocation: LeastShardAllocationSettings,
    /// `Some`: allocate with [`super::LoadAwareShardAllocationStrategy`] and these
    /// settings (the runtime then feeds the machine the nodes' loads); `None` (the
    /// default): [`super::LeastShardAllocationStrategy`].
    pub load_aware_allocation: Option<LoadAwareAllocationSettings>,
    /// Replicas beyond a majority for coordinator-state writes (Akka
    /// `coordinator-state.write-majority-plus`, 3).
    pub coordinator_write_majority_plus: usize,
    /// Replicas beyond a majority for coordinator-state reads (Akka
    /// `coordinator-state.read-majority-plus`, 5).
    pub coordinator_read_majority_plus: usize,
    /// The least number of replicas of a majority (Akka sharding's
    /// `distributed-data.majority-min-cap`, 5).
    pub majority_min_cap: usize,
    /// Timeout of a coordinator-state read, ms (Akka `waiting-for-state-timeout`, 2 s).
    pub waiting_for_state_timeout_ms: u64,
    /// Timeout of a coordinator-state or remember-entities write, ms (Akka
    /// `updating-state-timeout`, 5 s).
    pub updating_state_timeout_ms: u64,
    /// How long after a region's node is removed the coordinator waits before it
    /// re-allocates that region's shards, ms: the time the removed node needs to notice
    /// and stop its entities (Akka: the downing provider's `down-removal-margin`; the node
    /// sets it to the split brain resolver's `stable-after`).
    pub removal_margin_ms: u64,
    /// Timeout of `GET /cluster/shards/{name}` collecting every region's shards, ms (Akka
    /// `shard-region-query-timeout`, 3 s).
    pub shard_region_query_timeout_ms: u64,
}

impl Default for ShardingSettings {
    fn default() -> Self {
        ShardingSettings {
            type_name: "entity".into(),
            role: None,
            proxy_only: false,
            number_of_shards: 1000,
            buffer_size: 100_000,
            entity_mailbox_size: 10_000,
            retry_interval_ms: 2_000,
            rebalance_interval_ms: 10_000,
            handoff_timeout_ms: 60_000,
            shard_start_timeout_ms: 10_000,
            passivation_idle_timeout_ms: Some(120_000),
            active_entity_limit: None,
            remember_entities: false,
            remember_entities_store: RememberEntitiesStore::DistributedData,
            entity_recovery_strategy: EntityRecoveryStrategy::Constant {
                frequency_ms: 100,
                number_of_entities: 100,
            },
            least_shard_allocation: LeastShardAllocationSettings::default(),
            load_aware_allocation: None,
            coordinator_write_majority_plus: 3,
            coordinator_read_majority_plus: 5,
            majority_min_cap: 5,
            waiting_for_state_timeout_ms: 2_000,
            updating_state_timeout_ms: 5_000,
            removal_margin_ms: 0,
            shard_region_query_timeout_ms: 3_000,
        }
    }
}

impl ShardingSettings {
    /// Default settings for entity type `type_name`.
    pub fn new(type_name: impl Into<String>) -> Self {
        ShardingSettings {
            type_name: type_name.into(),
            ..Default::default()
        }
    }

    /// When entities still running in a handoff are force-stopped, ms after it began:
    /// `max(handoff-timeout − 5 s, 1 s)` (Akka's `HandOffStopper`).
    pub fn handoff_force_stop_ms(&self) -> u64 {
        self.handoff_timeout_ms.saturating_sub(5_000).max(1_000)
    }

    /// The coordinator singleton's name: `<type>Coordinator` (Akka's actor name).
    pub fn coordinator_singleton_name(&self) -> String {
        format!("{}Coordinator", self.type_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_akkas_except_the_documented_ones() {
        let s = ShardingSettings::new("counter");
        assert_eq!(s.number_of_shards, 1000);
        assert_eq!(s.buffer_size, 100_000);
        assert_eq!(s.rebalance_interval_ms, 10_000);
        assert_eq!(s.handoff_timeout_ms, 60_000);
        assert_eq!(s.passivation_idle_timeout_ms, Some(120_000));
        assert_eq!(s.least_shard_allocation.rebalance_absolute_limit, 20);
        assert_eq!(s.load_aware_allocation, None, "least-shard unless asked");
        let l = LoadAwareAllocationSettings::default();
        assert_eq!((l.load_threshold, l.load_sustained_rounds), (0.2, 3));
        assert!(!s.remember_entities);
        assert_eq!(s.handoff_force_stop_ms(), 55_000);
        assert_eq!(
            ShardingSettings {
                handoff_timeout_ms: 2_000,
                ..s.clone()
            }
            .handoff_force_stop_ms(),
            1_000
        );
        assert_eq!(s.coordinator_singleton_name(), "counterCoordinator");
    }
}
