//! [`DeliveryError`]: why a message was not accepted or not confirmed.

use std::time::Duration;

/// Why a message was not accepted by a producer, or its confirmation not awaited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryError {
    /// The producer holds `limit` unconfirmed messages (`buffer-size`): nothing was taken;
    /// send again later (a slow or unreachable consumer fills it).
    #[error("the producer's buffer is full: {limit} messages wait for confirmation")]
    BufferFull {
        /// The limit, messages.
        limit: u32,
    },
    /// The entity id is empty or longer than 512 bytes.
    #[error("entity id is empty or longer than 512 bytes")]
    BadEntityId,
    /// An endpoint name or producer id is empty, too long, or already runs on this node.
    #[error("{0}")]
    BadName(String),
    /// The message does not encode.
    #[error("encoding: {0}")]
    Encoding(String),
    /// Accepted, but not confirmed within the timeout: it stays in the producer and is
    /// still delivered.
    #[error("accepted, not confirmed within {0:?}")]
    Timeout(Duration),
    /// The durable queue could not be read or written (the store is unavailable, or
    /// another producer with this id wrote first): the producer stopped; start it again to
    /// recover what it held.
    #[error("durable producer queue: {0}")]
    Store(String),
    /// An `ask` was confirmed this many times without the entity's answer: the consumer
    /// skipped the message (it did not decode there) or keeps no answer for its key.
    #[error("the ask was confirmed {0} times without an answer")]
    NoAnswer(u32),
    /// The producer has stopped (its node stopped, or its durable queue failed).
    #[error("the producer has stopped")]
    Stopped,
}
