//! The Cluster Sharding protocol's messages: Akka's coordinator protocol
//! (`Register`/`RegisterAck`, `ShardHomes`, `GetShardHome`/`ShardHome`,
//! `HostShard`/`ShardStarted`, `BeginHandOff`/`BeginHandOffAck`, `HandOff`,
//! `ShardStopped`, `GracefulShutdownReq`, `RegionStopped`), the messages regions exchange
//! (deliveries, replies, and the handoff transfer of the original cluster spec), and the
//! wrapped messages of the machine's own replicator and coordinator singleton.
//!
//! How Concord's handoff uses Akka's names (see [`super`] for the whole protocol):
//! `HostShard { handoff_from }` prepares the new home, `HandOff { to }` tells the old home
//! to stop its entities and forward to the new one, `ShardStopped { handed_to }` reports
//! that, and `BeginHandOff` starts the *update transition* of the spec: every region
//! switches to the new home and sends its `BeginHandOffAck` **through the old home**, on the
//! same ordered link as its earlier messages, so the new home opens that sender's buffer
//! only after everything it sent before has been forwarded.

use crate::address::UniqueAddress;
use crate::ddata::ReplicatorMessage;
use crate::singleton::SingletonBody;

use super::ids::{EntityId, ShardId};

/// A message of the sharding protocol; every message names its entity type.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardingMessage {
    /// The entity type (`ShardingSettings::type_name`).
    pub type_name: String,
    /// What it says.
    pub body: ShardingBody,
}

/// One user message for one entity, as regions pass it on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// The entity.
    pub entity: EntityId,
    /// The encoded user message.
    pub payload: Vec<u8>,
    /// The node whose region accepted the message from its sender (replies to an ask go
    /// there; the per-sender order is kept per origin).
    pub origin: UniqueAddress,
    /// Set for an ask: the origin's id of it.
    pub ask: Option<u64>,
}

/// The sharding protocol's messages.
#[derive(Clone, Debug, PartialEq)]
pub enum ShardingBody {
    // ---- region → coordinator ----
    /// A region (or a proxy) introduces itself; answered by [`ShardingBody::RegisterAck`].
    Register {
        /// A proxy: routes, hosts nothing.
        proxy: bool,
    },
    /// Where is this shard?
    GetShardHome {
        /// The shard.
        shard: ShardId,
    },
    /// The region hosts the shard (answer to [`ShardingBody::HostShard`]).
    ShardStarted {
        /// The shard.
        shard: ShardId,
    },
    /// The old home has stopped the shard's entities (answer to [`ShardingBody::HandOff`]);
    /// `handed_to` is where their states and later messages went.
    ShardStopped {
        /// The shard.
        shard: ShardId,
        /// The new home the old one handed to, if any.
        handed_to: Option<UniqueAddress>,
    },
    /// The region's node is leaving: hand all its shards over (Akka's coordinated shutdown
    /// of a region).
    GracefulShutdownReq,
    /// The region has stopped (after a graceful shutdown).
    RegionStopped,

    // ---- coordinator → region ----
    /// Registration accepted.
    RegisterAck,
    /// Known shard homes, sent after registration in batches of at most
    /// [`super::ids::SHARD_HOMES_BATCH`] (shards being handed off are left out).
    ShardHomes {
        /// (shard, home).
        homes: Vec<(ShardId, UniqueAddress)>,
    },
    /// The home of a shard (answer to [`ShardingBody::GetShardHome`]); `previous` is set
    /// when the shard was just handed off from there (the region acknowledges through it).
    ShardHome {
        /// The shard.
        shard: ShardId,
        /// Its home.
        home: UniqueAddress,
        /// Its home before a handoff that just completed.
        previous: Option<UniqueAddress>,
    },
    /// Host this shard; `handoff_from` is set when it comes from a live old home (wait for
    /// its entities' states and forwarded messages).
    HostShard {
        /// The shard.
        shard: ShardId,
        /// The old home handing it over.
        handoff_from: Option<UniqueAddress>,
    },
    /// The update transition of a handoff begins: the shard's home is now `to`; send the
    /// acknowledgement through `from`. `regions` are the regions whose acknowledgements the
    /// new home waits for.
    BeginHandOff {
        /// The shard.
        shard: ShardId,
        /// The old home.
        from: UniqueAddress,
        /// The new home.
        to: UniqueAddress,
        /// Regions and proxies that acknowledge.
        regions: Vec<UniqueAddress>,
    },
    /// Old home: stop the shard's entities, send their states to `to` and forward every
    /// message for the shard there (`to = None`: only stop).
    HandOff {
        /// The shard.
        shard: ShardId,
        /// The new home.
        to: Option<UniqueAddress>,
    },

    // ---- region ↔ region ----
    /// A region's acknowledgement of [`ShardingBody::BeginHandOff`] (or of any change of a
    /// shard's home it had cached): sent to the shard's *old* home on the same ordered link
    /// as everything the region sent there before; the old home forwards it to the new
    /// home ([`ShardingBody::HandOffAckForward`]). Unlike Akka's, it does not go to the
    /// coordinator: the coordinator's part of the handoff ends with `BeginHandOff`.
    BeginHandOffAck {
        /// The shard.
        shard: ShardId,
    },
    /// A message for an entity; `origin` is `None` when it is the sending node.
    Deliver {
        /// The shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
        /// The encoded user message.
        payload: Vec<u8>,
        /// The region that accepted it, when not the sender of this message.
        origin: Option<UniqueAddress>,
        /// The origin's ask id, for an ask.
        ask: Option<u64>,
    },
    /// The answer to an ask (to its origin).
    Reply {
        /// The origin's ask id.
        ask: u64,
        /// The encoded reply, or why there is none.
        result: Result<Vec<u8>, String>,
    },
    /// Old home → new home: the state a stopped entity hands over.
    EntityHandOver {
        /// The shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
        /// Its encoded state.
        state: Vec<u8>,
    },
    /// Old home → new home: every entity has stopped and every state was sent; messages
    /// forwarded from now on follow.
    HandOverDone {
        /// The shard.
        shard: ShardId,
    },
    /// Old home → new home: `region`'s [`ShardingBody::BeginHandOffAck`] arrived, after
    /// everything it had sent to the old home.
    HandOffAckForward {
        /// The shard.
        shard: ShardId,
        /// The region.
        region: UniqueAddress,
    },
    /// Which shards do you host, with how many entities? (For `GET /cluster/shards`.)
    GetShardRegionStats {
        /// The asker's request id.
        request: u64,
    },
    /// The answer: (shard, number of entities).
    ShardRegionStats {
        /// The request.
        request: u64,
        /// (shard, entities).
        shards: Vec<(ShardId, u32)>,
    },

    // ---- embedded machines ----
    /// A message of the machine's replicator (coordinator state, remembered entities).
    Replicator(ReplicatorMessage),
    /// A message of the coordinator's singleton manager.
    Singleton(SingletonBody),
}

impl ShardingBody {
    /// The message's name, for logs and metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            ShardingBody::Register { .. } => "Register",
            ShardingBody::GetShardHome { .. } => "GetShardHome",
            ShardingBody::ShardStarted { .. } => "ShardStarted",
            ShardingBody::ShardStopped { .. } => "ShardStopped",
            ShardingBody::BeginHandOffAck { .. } => "BeginHandOffAck",
            ShardingBody::GracefulShutdownReq => "GracefulShutdownReq",
            ShardingBody::RegionStopped => "RegionStopped",
            ShardingBody::RegisterAck => "RegisterAck",
            ShardingBody::ShardHomes { .. } => "ShardHomes",
            ShardingBody::ShardHome { .. } => "ShardHome",
            ShardingBody::HostShard { .. } => "HostShard",
            ShardingBody::BeginHandOff { .. } => "BeginHandOff",
            ShardingBody::HandOff { .. } => "HandOff",
            ShardingBody::Deliver { .. } => "Deliver",
            ShardingBody::Reply { .. } => "Reply",
            ShardingBody::EntityHandOver { .. } => "EntityHandOver",
            ShardingBody::HandOverDone { .. } => "HandOverDone",
            ShardingBody::HandOffAckForward { .. } => "HandOffAckForward",
            ShardingBody::GetShardRegionStats { .. } => "GetShardRegionStats",
            ShardingBody::ShardRegionStats { .. } => "ShardRegionStats",
            ShardingBody::Replicator(_) => "Replicator",
            ShardingBody::Singleton(_) => "Singleton",
        }
    }

    /// True for the messages that carry entities' traffic between regions (deliveries,
    /// replies and the handoff's transfer), which a node removed a moment ago may still
    /// have in flight.
    pub fn is_data(&self) -> bool {
        matches!(
            self,
            ShardingBody::Deliver { .. }
                | ShardingBody::Reply { .. }
                | ShardingBody::BeginHandOffAck { .. }
                | ShardingBody::HandOffAckForward { .. }
                | ShardingBody::EntityHandOver { .. }
                | ShardingBody::HandOverDone { .. }
        )
    }

    /// True for messages only the coordinator handles.
    pub fn is_for_coordinator(&self) -> bool {
        matches!(
            self,
            ShardingBody::Register { .. }
                | ShardingBody::GetShardHome { .. }
                | ShardingBody::ShardStarted { .. }
                | ShardingBody::ShardStopped { .. }
                | ShardingBody::GracefulShutdownReq
                | ShardingBody::RegionStopped
        )
    }
}

impl crate::group::Routed for ShardingMessage {
    fn route_key(&self) -> &str {
        &self.type_name
    }
}
