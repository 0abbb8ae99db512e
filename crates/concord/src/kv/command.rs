//! [`KvCommand`]: what the key-value store's host is asked.

use concord_core::ddata::VersionVector;
use concord_core::kv::{KvError, KvStats, KvStatus, ReadOptions, ReadResult, WriteOptions};
use futures_channel::oneshot;

/// A request from the `KvStore` handle or the coordinated shutdown.
#[allow(missing_docs)] // the fields are named by what they carry
pub enum KvCommand {
    Put {
        key: String,
        value: Vec<u8>,
        context: Option<VersionVector>,
        options: WriteOptions,
        reply: oneshot::Sender<Result<(), KvError>>,
    },
    Delete {
        key: String,
        context: Option<VersionVector>,
        options: WriteOptions,
        reply: oneshot::Sender<Result<(), KvError>>,
    },
    Get {
        key: String,
        options: ReadOptions,
        reply: oneshot::Sender<Result<ReadResult, KvError>>,
    },
    Status {
        reply: oneshot::Sender<KvStatusReport>,
    },
    /// Answered once this node holds no key it does not own (its handoff is done).
    HandoffDone { reply: oneshot::Sender<()> },
    /// `command`, sent from inside a sampled span (tracing on): the coordination it starts
    /// (coordinator → replicas) carries the trace.
    Traced {
        command: Box<KvCommand>,
        trace: crate::host::TraceContext,
    },
}

/// A node's store at one moment (`GET /kv-status`).
#[derive(Clone, Debug)]
pub struct KvStatusReport {
    /// The machine's snapshot.
    pub status: KvStatus,
    /// Its counters.
    pub stats: KvStats,
    /// Bytes of the store's file.
    pub file_bytes: u64,
}
