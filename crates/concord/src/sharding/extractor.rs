//! [`Extractor`]: how an entity id maps to its shard id (Akka's `ExtractShardId`).

use std::sync::Arc;

/// Entity id → shard id.
pub(crate) type Extractor = Arc<dyn Fn(&str) -> String + Send + Sync>;
