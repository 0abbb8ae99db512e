//! What [`super::ClusterSharding`] tells its runtime and asks of it: events, why entities
//! stop and messages are dropped, and the counters an operator watches.

use crate::address::UniqueAddress;

use super::ids::{EntityId, ShardId};

/// Why an entity is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// Idle, over the active-entity limit, or it asked itself: its state is dropped.
    Passivate,
    /// Its shard moves: report its state with [`ClusterSharding::entity_stopped`](super::ClusterSharding::entity_stopped).
    HandOff,
    /// The node stops (it is Down or shutting down).
    Shutdown,
}

/// Why a message was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The region's buffer (`buffer-size`) was full.
    BufferFull,
    /// The entity or shard id is invalid (too long).
    InvalidId,
    /// The region is shutting down and cannot take new messages.
    ShuttingDown,
}

impl DropReason {
    /// A short label for metrics and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::BufferFull => "buffer-full",
            DropReason::InvalidId => "invalid-id",
            DropReason::ShuttingDown => "shutting-down",
        }
    }
}

/// What the machine asks of its runtime, or tells it.
#[derive(Clone, Debug, PartialEq)]
pub enum ShardingEvent {
    /// Create the entity (with the state handed over from its previous home, if any).
    StartEntity {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
        /// Its handed-over state.
        state: Option<Vec<u8>>,
    },
    /// A message for a started entity, in delivery order.
    Deliver {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
        /// The encoded message.
        payload: Vec<u8>,
        /// For an ask: pass to [`ClusterSharding::reply`](super::ClusterSharding::reply).
        reply_to: Option<(UniqueAddress, u64)>,
    },
    /// Stop the entity once it has handled what it was given; then report
    /// [`ClusterSharding::entity_stopped`](super::ClusterSharding::entity_stopped) (with its state for [`StopReason::HandOff`]).
    StopEntity {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
        /// Why.
        reason: StopReason,
    },
    /// The entity did not stop within the handoff's force-stop time: stop it now and
    /// report it stopped (without a state).
    KillEntity {
        /// Its shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// The answer to one of this node's asks.
    Reply {
        /// The ask.
        ask: u64,
        /// The encoded reply, or why there is none.
        result: Result<Vec<u8>, String>,
    },
    /// A message accepted here was dropped (for an ask: fail it).
    Dropped {
        /// Its ask, if any.
        ask: Option<u64>,
        /// Why.
        reason: DropReason,
    },
    /// External remember-entities store: load the shard's remembered ids and answer
    /// [`ClusterSharding::remember_loaded`](super::ClusterSharding::remember_loaded).
    RememberLoad {
        /// The shard.
        shard: ShardId,
    },
    /// External remember-entities store: record these changes, then answer
    /// [`ClusterSharding::remember_written`](super::ClusterSharding::remember_written).
    RememberUpdate {
        /// The shard.
        shard: ShardId,
        /// Entities started.
        started: Vec<EntityId>,
        /// Entities stopped (passivated).
        stopped: Vec<EntityId>,
    },
    /// A durable key of the machine's replicator changed: store it (the runtime loads
    /// them back with [`ClusterSharding::load_durable`](super::ClusterSharding::load_durable)).
    Store {
        /// The key.
        key: String,
        /// The envelope.
        envelope: crate::ddata::replicator::SerializedEnvelope,
    },
    /// The graceful shutdown asked with [`ClusterSharding::graceful_shutdown`](super::ClusterSharding::graceful_shutdown) is done:
    /// every shard was handed over.
    GracefulShutdownDone,
    /// The coordinator's hand-over asked with [`ClusterSharding::self_exiting`](super::ClusterSharding::self_exiting) is done.
    ExitingDone,
    /// The answer to [`ClusterSharding::query_cluster_stats`](super::ClusterSharding::query_cluster_stats): every region's shards with
    /// their numbers of entities; regions that did not answer in time are left out.
    ClusterShardingStats {
        /// The query.
        request: u64,
        /// (region, [(shard, entities)]).
        regions: Vec<(UniqueAddress, Vec<(ShardId, u32)>)>,
    },
}

/// Counters an operator watches (exported as metrics by the runtime).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardingStats {
    /// Messages dropped because the region's buffer was full.
    pub dropped_buffer_full: u64,
    /// Messages dropped for an invalid id or during shutdown.
    pub dropped_other: u64,
    /// Messages forwarded by an old home during a handoff.
    pub forwarded: u64,
    /// Messages a new home held back in a per-sender buffer until that sender's
    /// acknowledgement came through the old home (the order-preserving part of a handoff).
    pub held_for_order: u64,
    /// `GetShardHome` requests this region sent.
    pub shard_home_requests: u64,
    /// Handoffs this node started as the old home.
    pub handoffs_started: u64,
    /// Handoffs this node completed as the new home (its buffers opened).
    pub handoffs_completed: u64,
    /// Rebalance rounds this node's coordinator ran (that moved at least one shard).
    pub rebalance_rounds: u64,
    /// Shards this node's coordinator allocated.
    pub shards_allocated: u64,
    /// Entities started here.
    pub entities_started: u64,
    /// Entities passivated here.
    pub entities_passivated: u64,
    /// Messages refused as invalid (unknown sender, bad ids, out of place).
    pub invalid_messages: u64,
    /// Coordinator-state events that did not apply.
    pub state_errors: u64,
    /// Coordinator-state or remember-entities writes that did not reach their
    /// consistency in time (they are retried, or spread by gossip).
    pub write_timeouts: u64,
}
