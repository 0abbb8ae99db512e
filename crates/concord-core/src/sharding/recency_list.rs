//! The active-entity LRU of a region's shards (Akka's `RecencyList`, used by its
//! `LeastRecentlyUsedEntityPassivationStrategy` for `active-entity-limit`; spec
//! `cluster-sharding-concepts.md`, *Passivation*): every active entity of the shards
//! hosted here, ordered by last use. An entity's position is a tick (from 1; 0 in its
//! cell means "not in the list"); touching it moves it to the most recently used end.

use std::collections::BTreeMap;

use super::ids::{EntityId, ShardId};

/// Active entities by recency: tick → (shard, entity), the least recently used first.
#[derive(Debug, Default)]
pub(super) struct RecencyList {
    entries: BTreeMap<u64, (ShardId, EntityId)>,
    tick: u64,
}

impl RecencyList {
    /// Moves `entity` (at position `at`, 0 if not listed) to the most recently used end;
    /// its new position.
    pub(super) fn touch(&mut self, at: u64, shard: &ShardId, entity: &EntityId) -> u64 {
        self.remove(at);
        self.tick += 1;
        self.entries
            .insert(self.tick, (shard.clone(), entity.clone()));
        self.tick
    }

    /// Takes the entity at position `at` out of the list (nothing if `at` is 0).
    pub(super) fn remove(&mut self, at: u64) {
        if at != 0 {
            self.entries.remove(&at);
        }
    }

    /// Listed entities, count.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Takes out the least recently used entity.
    pub(super) fn pop_least_recent(&mut self) -> Option<(ShardId, EntityId)> {
        self.entries.pop_first().map(|(_, e)| e)
    }

    /// Empties the list (the tick keeps counting).
    pub(super) fn clear(&mut self) {
        self.entries.clear();
    }
}
