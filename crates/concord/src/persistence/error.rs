//! [`PersistenceError`]: what a store or a persistent entity reports, and what an `ask` of
//! a persistent entity gets instead of its reply.

use serde::{Deserialize, Serialize};

/// A persistence failure. Serde, so that it reaches an asking node: a persistent entity
/// answers `Result<Reply, PersistenceError>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum PersistenceError {
    /// Another writer stored this sequence number (or revision) first: two incarnations of
    /// the entity existed (a split brain, a stale node). Nothing was stored; the entity
    /// stopped, and its next message recovers it from the journal.
    #[error("{persistence_id}: sequence number {seq_nr} was written by another writer; this incarnation stopped")]
    Conflict {
        /// The persistence id (`<type>|<id>`).
        persistence_id: String,
        /// The sequence number or revision that existed.
        seq_nr: u64,
    },
    /// The store refused the write and stored nothing (the event does not encode, is too
    /// large, ...); the entity goes on as before the command.
    #[error("{persistence_id}: write rejected, nothing stored: {reason}")]
    Rejected {
        /// The persistence id.
        persistence_id: String,
        /// Why.
        reason: String,
    },
    /// The store could not be reached or did not answer in time: the write may or may not
    /// be stored. A writing entity stops (its next message recovers what was stored).
    #[error("persistence store unavailable: {reason}")]
    Unavailable {
        /// What failed.
        reason: String,
    },
    /// Recovery found what it cannot fold — an event or snapshot that does not decode, or
    /// a gap — and stopped the entity. The journal is unchanged.
    #[error("{persistence_id}: recovery failed at sequence number {seq_nr}: {reason}")]
    RecoveryFailed {
        /// The persistence id.
        persistence_id: String,
        /// The sequence number of the event or snapshot at fault.
        seq_nr: u64,
        /// Why.
        reason: String,
    },
    /// Recovery (waiting for a permit included) took longer than
    /// `persistence.recovery-timeout`; the entity stopped.
    #[error("{persistence_id}: recovery did not finish within {timeout_ms} ms")]
    RecoveryTimeout {
        /// The persistence id.
        persistence_id: String,
        /// The timeout, ms.
        timeout_ms: u64,
    },
    /// The entity had stopped after an earlier failure; this message was not handled.
    #[error("{persistence_id}: the entity stopped after a persistence failure; the message was not handled")]
    Stopped {
        /// The persistence id.
        persistence_id: String,
    },
    /// The entity id does not make a persistence id (empty, over 512 bytes).
    #[error("not a persistence id: {0}")]
    BadId(String),
}

impl PersistenceError {
    /// The metric label of the failure's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            PersistenceError::Conflict { .. } => "conflict",
            PersistenceError::Rejected { .. } => "rejected",
            PersistenceError::Unavailable { .. } => "unavailable",
            PersistenceError::RecoveryFailed { .. } => "recovery-failed",
            PersistenceError::RecoveryTimeout { .. } => "recovery-timeout",
            PersistenceError::Stopped { .. } => "stopped",
            PersistenceError::BadId(_) => "bad-id",
        }
    }

    /// An [`PersistenceError::Unavailable`] with `reason`.
    pub fn unavailable(reason: impl std::fmt::Display) -> Self {
        PersistenceError::Unavailable {
            reason: reason.to_string(),
        }
    }
}
