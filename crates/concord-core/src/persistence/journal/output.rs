//! What the journal machine answers its callers: [`JournalEvent`] (a request's id and
//! result), [`JournalOutput`] and [`JournalError`].

use super::entry::{Entry, StoredSnapshot};
use super::stream;
#[cfg(doc)]
use super::{JournalMachine, MAX_SNAPSHOT_BYTES, MAX_WRITE_BYTES};

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum JournalError {
    /// Another writer holds the log, or the write does not follow its highest number.
    #[error("{0}")]
    Conflict(String),
    /// No majority answered in time; a write's outcome is unknown.
    #[error("{0}")]
    Unavailable(String),
    /// The write or snapshot was refused before anything was sent (larger than
    /// [`MAX_WRITE_BYTES`] or [`MAX_SNAPSHOT_BYTES`]): nothing was stored.
    #[error("{0}")]
    Rejected(String),
}

/// A request's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JournalOutput {
    /// This node is the log's writer: the page asked for and the highest number.
    Recovered {
        /// Writes from the page's start, in order.
        page: Vec<Entry>,
        /// The log's highest sequence number (0: empty).
        highest: u64,
        /// The newest snapshot a majority holds, for a recovery that asked for it
        /// ([`JournalMachine::recover_from_snapshot`]); the page then starts after it.
        snapshot: Option<StoredSnapshot>,
    },
    /// Writes read, in order.
    Read(Vec<Entry>),
    /// The write is chosen (on a majority's disks).
    Appended,
    /// The newest snapshot a majority holds.
    Snapshot(Option<StoredSnapshot>),
    /// Saved or deleted on a majority.
    Done,
    /// Events of an entity type, in offset order.
    Events(Vec<stream::StreamEvent>),
    /// The operator's give-up done here ([`JournalMachine::give_up`]).
    GaveUp(super::GivenUp),
    /// The segments this node waits for, each with the replicas it still awaits
    /// ([`JournalMachine::waits`]).
    Waits(Vec<(u16, Vec<crate::address::Address>)>),
    /// This node replicates nothing and handed every copy it holds over
    /// ([`JournalMachine::handed_over`]).
    HandedOver,
}

/// The answer to a caller's request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalEvent {
    /// The caller's request id.
    pub request: u64,
    /// The result.
    pub result: Result<JournalOutput, JournalError>,
}
