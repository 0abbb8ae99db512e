//! [`ShardingError`]: why a message to an entity was not delivered or answered.

use std::time::Duration;

/// Why a message to an entity was not delivered or answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardingError {
    /// No reply within the timeout (the entity may be moving or slow; a late reply is
    /// dropped).
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// Not delivered: a region's buffer was full (`buffer-size`), the id was too long, or
    /// the region is shutting down.
    #[error("not delivered: {0}")]
    Dropped(String),
    /// Delivered, but the entity could not handle it (the message did not decode there,
    /// its mailbox was full, or its handler panicked).
    #[error("failed: {0}")]
    Failed(String),
    /// The message or the reply does not encode or decode here.
    #[error("encoding: {0}")]
    Encoding(String),
    /// The node has stopped.
    #[error("the sharding layer has stopped")]
    Stopped,
}
