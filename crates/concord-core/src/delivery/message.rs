//! The reliable delivery protocol's messages (Akka's `SequencedMessage`, `Request` and
//! `Resend`; `akka.actor.typed.delivery.internal`), as plain data: the runtime carries
//! them in its own envelopes.

use serde::{Deserialize, Serialize};

/// Longest producer id accepted, bytes.
pub const MAX_PRODUCER_ID_BYTES: usize = 512;

/// Which run of a producer's controller a message comes from. A consumer that sees a
/// newer incarnation than the one it knows starts that producer's numbering afresh (a
/// producer restarted without a durable queue, or a sharded producer's controller for an
/// entity created again after it was cleaned up); an older one is stale and dropped.
/// Ordered by `started_ms`, then `generation`, then `nonce`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Incarnation {
    /// When the producer started, ms since the Unix epoch (or after it learned of a newer
    /// incarnation of its id than its own: that one's, see
    /// [`crate::delivery::ProducerController`]).
    pub started_ms: u64,
    /// Counts the controllers the producer created for one consumer, and the times it
    /// stepped over a newer incarnation.
    pub generation: u32,
    /// Random, chosen at the producer's start: two producers started in the same
    /// millisecond differ.
    pub nonce: u64,
}

/// A message from a producer to a consumer (Akka's `SequencedMessage`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SequencedMessage {
    /// The producer's id (unique in the cluster while it runs).
    pub producer_id: String,
    /// Its controller's incarnation.
    pub incarnation: Incarnation,
    /// This message's number: from 1, without gaps.
    pub seq_nr: u64,
    /// The highest number the producer knows confirmed when it sent this (below
    /// `seq_nr`): a consumer that does not know the producer expects the message after it.
    pub confirmed_seq_nr: u64,
    /// The message, encoded by the runtime.
    pub payload: Vec<u8>,
}

/// A consumer's answer to a producer (Akka's `Request` and `Resend`; an answer to a stale
/// incarnation is new).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsumerMessage {
    /// Every message up to `confirmed_seq_nr` was handled (a cumulative confirmation);
    /// the producer may send up to `request_up_to_seq_nr`.
    Request {
        /// The incarnation it answers.
        incarnation: Incarnation,
        /// Highest number handled.
        confirmed_seq_nr: u64,
        /// Highest number the producer may send (the flow control window).
        request_up_to_seq_nr: u64,
    },
    /// A message was missing: the consumer ignores every message until `from_seq_nr`
    /// arrives, and asks for everything from it again.
    Resend {
        /// The incarnation it answers.
        incarnation: Incarnation,
        /// The first number missing.
        from_seq_nr: u64,
    },
    /// The message came from an incarnation older than `current`, the newest the
    /// consumer knows of this producer id: it was dropped.
    Stale {
        /// The newest incarnation the consumer knows.
        current: Incarnation,
    },
}
