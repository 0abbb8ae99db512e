//! What a [`super::shard::Shard`] borrows from [`super::ClusterSharding`] for one step of
//! its remember-entities store (Akka `Shard` with its `RememberEntitiesShardStore`; spec
//! `cluster-sharding-concepts.md`, *Remembering entities*): the settings, the shared
//! outputs (events for an external store, the recovery timer), and the machine's
//! replicator with its open requests (Akka's `DDataRememberEntitiesShardStore` writes
//! through the sharding replicator). The shard owns its remembered-entity bookkeeping
//! ([`super::remember::RememberState`]); everything else stays with the machine.

use crate::ddata::Replicator;

use super::ddata_requests::DdataRequests;
use super::outbox::ShardingOutputs;
use super::ShardingSettings;

/// The machine's parts a shard's remember-entities step may use; built by the machine
/// (`ClusterSharding::shard_parts`) for each step.
pub(super) struct ShardContext<'a> {
    /// The sharding settings of the entity type.
    pub(super) settings: &'a ShardingSettings,
    /// Transmits, events and timers for the host.
    pub(super) out: &'a mut ShardingOutputs,
    /// The machine's replicator (the `shard-<type>-<shard>` keys of remembered entities).
    pub(super) replicator: &'a mut Replicator,
    /// Open replicator requests, to route their answers back to the shard.
    pub(super) ddata: &'a mut DdataRequests,
}
