//! Persistence's pure logic (Akka Persistence as the model; docs/PERSISTENCE.md): what
//! identifies a journal ([`PersistenceId`], its [`slice`](PersistenceId::slice)), the
//! events and atomic writes a journal holds ([`PersistentEvent`], [`AtomicWrite`]), the
//! check that a replay is one gap-free history ([`ReplayCheck`]), and when to snapshot and
//! what to delete ([`RetentionCriteria`]).
//!
//! The stores and the entities that use them run in the `concord` crate
//! (`concord::persistence`); everything here is plain data and functions, unit- and
//! property-tested.

pub mod journal;
mod persistence_id;
mod repr;
mod retention;

pub use persistence_id::{
    PersistenceId, PersistenceIdError, MAX_ENTITY_ID_BYTES, MAX_ENTITY_TYPE_BYTES, NUMBER_OF_SLICES,
};
pub use repr::{AtomicWrite, AtomicWriteError, PersistentEvent, ReplayCheck, ReplayError};
pub use retention::RetentionCriteria;
