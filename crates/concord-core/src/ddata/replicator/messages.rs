//! The messages replicators exchange (Akka's `Read`/`ReadResult`, `Write`/`WriteAck`/
//! `WriteNack`, `DeltaPropagation`/`DeltaNack`, `Status` and `Gossip`).

use super::envelope::{Digest, SerializedEnvelope};
use super::value::DataTypeId;

/// One delta (or, when a delta would be larger, the full value) of one key from its
/// origin, numbered per (origin, key) so a receiver notices a gap.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaEntry {
    /// The key.
    pub key: String,
    /// The value's type.
    pub data_type: DataTypeId,
    /// Sequence number of this delta from the sender for this key (from 1).
    pub seq: u64,
    /// True if `bytes` is the whole value rather than a delta.
    pub full: bool,
    /// The encoded delta or value.
    pub bytes: Vec<u8>,
    /// The sender's "pruning performed" markers for the key: the receiver drops the pruned
    /// replicas' entries before it applies the delta, which may carry their counts folded
    /// into the pruning node's (no double counting).
    pub pruning: Vec<(
        crate::ddata::replica_id::ReplicaId,
        super::envelope::PruningState,
    )>,
}

/// A message between replicators.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplicatorMessage {
    /// Asks for a key's envelope; answered by [`ReplicatorMessage::ReadResult`].
    Read {
        /// The asker's request number.
        request: u64,
        /// The key.
        key: String,
    },
    /// The envelope, or `None` if the replica does not have the key.
    ReadResult {
        /// The request answered.
        request: u64,
        /// The envelope.
        envelope: Option<SerializedEnvelope>,
    },
    /// Merge this envelope; acknowledged when `request` is set (read repair sends none).
    Write {
        /// The writer's request number, if it wants an ack.
        request: Option<u64>,
        /// The key.
        key: String,
        /// The envelope (a tombstone deletes the key).
        envelope: SerializedEnvelope,
    },
    /// The write was merged.
    WriteAck {
        /// The request answered.
        request: u64,
    },
    /// The write could not be merged (unknown type, type mismatch, too many keys).
    WriteNack {
        /// The request answered.
        request: u64,
    },
    /// Deltas of the sender's own updates, in order per key.
    DeltaPropagation {
        /// The deltas.
        deltas: Vec<DeltaEntry>,
    },
    /// A delta of `key` arrived after a gap: send the full state.
    DeltaNack {
        /// The key.
        key: String,
    },
    /// Digests of one chunk of the sender's keys (anti-entropy).
    Status {
        /// (key, digest) pairs; [`Digest::NOT_FOUND`] for keys the sender lacks.
        digests: Vec<(String, Digest)>,
        /// This chunk's number.
        chunk: u32,
        /// How many chunks the sender's keys are split into.
        total_chunks: u32,
    },
    /// Envelopes to merge; with `send_back` the receiver answers with its own envelopes
    /// of those keys that differ after the merge.
    Gossip {
        /// (key, envelope) pairs.
        entries: Vec<(String, SerializedEnvelope)>,
        /// Answer with the receiver's differing envelopes.
        send_back: bool,
    },
}

impl ReplicatorMessage {
    /// A short name for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            ReplicatorMessage::Read { .. } => "read",
            ReplicatorMessage::ReadResult { .. } => "read-result",
            ReplicatorMessage::Write { .. } => "write",
            ReplicatorMessage::WriteAck { .. } => "write-ack",
            ReplicatorMessage::WriteNack { .. } => "write-nack",
            ReplicatorMessage::DeltaPropagation { .. } => "delta-propagation",
            ReplicatorMessage::DeltaNack { .. } => "delta-nack",
            ReplicatorMessage::Status { .. } => "status",
            ReplicatorMessage::Gossip { .. } => "gossip",
        }
    }
}
