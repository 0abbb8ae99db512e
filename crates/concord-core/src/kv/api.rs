//! What [`super::KvMachine`] takes and gives its runtime: request options, answers and their
//! errors, counters and the status snapshot.

use crate::address::{Address, UniqueAddress};
use crate::kv::object::Versioned;
use crate::kv::settings::Quorum;

/// Why a request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    /// The request is malformed (key, value, context or a quorum out of range).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The value is over `max-value-size`.
    #[error("{0}")]
    TooLarge(String),
    /// A delete without a context found nothing to delete.
    #[error("not found")]
    NotFound,
    /// Too many requests in progress on this node (`max-pending-requests`).
    #[error("overloaded: {0} requests in progress")]
    Overloaded(usize),
    /// Fewer replicas than needed answered before the deadline.
    #[error("{0}")]
    Unavailable(QuorumFailure),
    /// This node's storage failed.
    #[error("storage failure: {0}")]
    Storage(String),
}

/// Which replicas answered a request that did not reach its quorum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuorumFailure {
    /// `"r"` or `"w"`.
    pub quorum: &'static str,
    /// The replicas needed.
    pub needed: u8,
    /// Replicas whose answers counted.
    pub counted: Vec<Address>,
    /// Replicas that answered without counting (fallbacks without `sloppy-quorum`, or
    /// replicas still synchronising that had nothing).
    pub uncounted: Vec<Address>,
    /// Replicas that refused, with their reason.
    pub failed: Vec<(Address, String)>,
    /// Replicas that did not answer in time.
    pub unanswered: Vec<Address>,
}

impl std::fmt::Display for QuorumFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[Address]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.iter()
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        write!(
            f,
            "{}={} not reached: counted {} ({})",
            self.quorum,
            self.needed,
            self.counted.len(),
            list(&self.counted)
        )?;
        if !self.uncounted.is_empty() {
            write!(f, "; answered without counting: {}", list(&self.uncounted))?;
        }
        for (a, why) in &self.failed {
            write!(f, "; {a} refused: {why}")?;
        }
        if !self.unanswered.is_empty() {
            write!(f, "; no answer from {}", list(&self.unanswered))?;
        }
        Ok(())
    }
}

/// The answer to a read.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadResult {
    /// The merged version of the replicas that answered (`None`: none had the key). A
    /// version whose siblings are all tombstones reads as deleted.
    pub object: Option<Versioned>,
}

impl ReadResult {
    /// True if the key has no live value (absent or deleted).
    pub fn is_not_found(&self) -> bool {
        self.object.as_ref().is_none_or(Versioned::is_deleted)
    }
}

/// What the machine tells its runtime.
#[derive(Clone, Debug, PartialEq)]
pub enum KvEvent {
    /// A put or delete finished.
    WriteDone {
        /// The runtime's request id.
        request: u64,
        /// The outcome.
        result: Result<(), KvError>,
    },
    /// A get finished.
    ReadDone {
        /// The runtime's request id.
        request: u64,
        /// The outcome.
        result: Result<ReadResult, KvError>,
    },
}

/// Options of a write (`None`: the settings' default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Replication factor.
    pub n: Option<u8>,
    /// Write quorum.
    pub w: Option<Quorum>,
}

/// Options of a read (`None`: the settings' default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Replication factor.
    pub n: Option<u8>,
    /// Read quorum.
    pub r: Option<Quorum>,
}

/// Counters an operator watches (exported as metrics).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvStats {
    /// Puts and deletes coordinated here that succeeded.
    pub writes_ok: u64,
    /// Puts and deletes coordinated here that failed.
    pub writes_failed: u64,
    /// Gets coordinated here that succeeded.
    pub reads_ok: u64,
    /// Gets coordinated here that failed.
    pub reads_failed: u64,
    /// Writes sent to a fallback because a primary was unreachable (hinted writes).
    pub hinted_writes: u64,
    /// Read repairs sent (one per stale replica).
    pub read_repairs: u64,
    /// Tombstones reaped here.
    pub tombstones_reaped: u64,
    /// Anti-entropy exchanges this node started.
    pub ae_exchanges: u64,
    /// Anti-entropy exchanges that found differences.
    pub ae_exchanges_with_differences: u64,
    /// Versions merged here from anti-entropy that changed a key.
    pub ae_keys_repaired: u64,
    /// Versions sent by handoff.
    pub handoff_keys_sent: u64,
    /// Versions merged here from a handoff that changed a key.
    pub handoff_keys_received: u64,
    /// Keys removed here after every owner stored them.
    pub handoff_keys_removed: u64,
    /// Messages dropped: from non-members, or malformed.
    pub invalid_messages: u64,
    /// Storage failures.
    pub storage_errors: u64,
    /// Requests refused as overloaded.
    pub overloaded: u64,
}

/// A snapshot for `GET /kv-status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvStatus {
    /// The default replication factor.
    pub n: u8,
    /// The ring's members with the segments each replicates (for `n`).
    pub ownership: Vec<(UniqueAddress, usize)>,
    /// Keys stored here.
    pub keys: u64,
    /// Keys stored here in groups this node does not own (waiting for handoff).
    pub misplaced_keys: u64,
    /// Segments this node owns but has not synchronised with every co-owner yet.
    pub pending_segments: usize,
    /// Groups being handed off.
    pub handoffs_in_progress: usize,
    /// Anti-entropy exchanges in progress (started here).
    pub exchanges_in_progress: usize,
    /// Requests being coordinated here.
    pub requests_in_progress: usize,
}
