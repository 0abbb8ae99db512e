//! Persistence: entities whose state survives crashes, rebalances and passivation
//! (Akka Persistence's `EventSourcedBehavior` and `DurableStateBehavior` as the model;
//! docs/PERSISTENCE.md).
//!
//! - [`EventSourced`] — commands in, events persisted (atomically), state = the fold of
//!   the events; [`Effect`] says what to persist and answer. Snapshots every
//!   `snapshot-every` events ([`concord_core::persistence::RetentionCriteria`]).
//! - [`DurableState`] — the whole state stored on each change, with a revision;
//!   [`StateEffect`].
//! - Run them sharded: [`Persistence::init_event_sourced`],
//!   [`Persistence::init_durable_state`]. Each entity recovers before its first command
//!   (under the node's `recovery-permits` and `recovery-timeout`), and a write conflicting
//!   with another writer stops it ([`PersistenceError::Conflict`]).
//! - Stores: the traits [`Journal`], [`SnapshotStore`], [`DurableStateStore`];
//!   [`PostgresStore`] and [`InMemoryStore`]. The layer ([`Persistence::layer`]) starts the
//!   one `[persistence].store` names.
//!
//! The pure parts — persistence ids and slices, atomic writes, the replay check,
//! retention — are in [`concord_core::persistence`].

mod config;
mod durable_state;
mod error;
mod event_sourced;
pub(crate) use event_sourced::ReplyWith;
mod event_sourced_entity;
mod handle;
mod incarnation;
mod layer;
mod memory;
mod metrics;
mod postgres;
mod postgres_batch;
pub mod replicated;
pub mod routes;
mod store;

pub use concord_core::persistence::{PersistenceId, RetentionCriteria};
pub use config::{PersistenceConfig, PersistenceSettings, PostgresConfig, STORES};
pub use durable_state::{DurableState, DurableStateEntity, StateEffect, StateEffectBuilder};
pub use error::PersistenceError;
pub use event_sourced::{Effect, EffectBuilder, EventSourced};
pub use event_sourced_entity::EventSourcedEntity;
pub use handle::Persistence;
pub use layer::PersistenceLayer;
pub use memory::InMemoryStore;
pub use postgres::{PostgresStore, SCHEMA};
pub use replicated::ReplicatedStore;
pub use store::{
    DurableStateStore, EventEnvelope, EventsQuery, Journal, Offset, RecoveryStart, Snapshot,
    SnapshotStore, StoreFuture, StoredState, Stores,
};

#[cfg(test)]
mod tests;
