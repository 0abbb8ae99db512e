//! What the singleton layer's host is asked ([`SingletonCommand`], from the
//! [`super::SingletonRef`] handles and the coordinated shutdown) and what its background
//! work reports ([`SingletonCompletion`]).

use concord_core::UniqueAddress;
use futures_channel::oneshot;

/// An ask's outcome: the encoded reply, or why there is none.
pub type AskReply = oneshot::Sender<Result<Vec<u8>, String>>;

/// A request from a handle or a shutdown task.
#[allow(missing_docs)] // the fields are named by what they carry
pub enum SingletonCommand {
    /// A message for the singleton `name` (through its proxy), answered to `ask` if set.
    Tell {
        name: String,
        payload: Vec<u8>,
        ask: Option<AskReply>,
        /// The caller's trace context (tracing on, inside a sampled span).
        trace: Option<crate::host::TraceContext>,
    },
    /// The `cluster-exiting` hand-over of every singleton; `done` fires when all are done.
    SelfExiting { done: oneshot::Sender<()> },
    /// Every singleton's status here (the dashboard's `singleton` panel).
    Status {
        reply: oneshot::Sender<Vec<serde_json::Value>>,
    },
}

/// A report of work the layer started (opaque: only the layer reads it).
pub struct SingletonCompletion(pub(crate) Completion);

/// What a [`SingletonCompletion`] reports.
pub(crate) enum Completion {
    /// The instance `incarnation` of `name` returned from its behaviour (or panicked).
    InstanceEnded { name: String, incarnation: u64 },
    /// The lease of `name` was acquired (or renewed) or not.
    Lease { name: String, granted: bool },
    /// The running instance of `name` answered the ask `ask` of `to`.
    Reply {
        name: String,
        to: UniqueAddress,
        ask: u64,
        payload: Vec<u8>,
    },
}
