//! Entity and shard identifiers (Akka's `ShardRegion.EntityId` / `ShardId`) and the
//! bounds on them and on the number of shards, which keep what a message can make the
//! machine hold bounded.

/// An entity's id (Akka `EntityId`).
pub type EntityId = String;
/// A shard's id (Akka `ShardId`).
pub type ShardId = String;

/// Shard homes per `ShardHomes` message (Akka: 500).
pub const SHARD_HOMES_BATCH: usize = 500;
/// Longest entity id accepted, bytes; longer ones are refused.
pub const MAX_ENTITY_ID_BYTES: usize = 1_024;
/// Longest shard id accepted, bytes.
pub const MAX_SHARD_ID_BYTES: usize = 128;
/// Most distinct shards a region knows homes of, hosts, or a coordinator allocates: a bound
/// on what messages can make the machine hold, far above any sane `number-of-shards`.
pub const MAX_SHARDS: usize = 100_000;
