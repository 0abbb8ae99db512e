//! Where a [`super::shard::Shard`]'s remember-entities store meets its entities: the
//! machine routes the store's answers (replicator responses, an external store's
//! `remember_loaded` / `remember_written`, the `constant` recovery timer) to the shard's
//! [`super::remember::RememberState`], and starts the entities it hands back — remembered
//! ones on recovery, recorded ones with the messages that waited for the record (Akka
//! `Shard`: `RememberEntitiesShardStore.UpdateDone` / `RememberedEntityIds`; Pekko
//! `Shard.scala`).

use crate::ddata::replicator::GetResult;

use super::hosted_shards::HostedShards;
use super::ids::{EntityId, ShardId};
use super::settings::EntityRecoveryStrategy;
use super::shard::{EntityStatus, Phase};
use super::shard_context::ShardContext;
use super::timer::ShardingTimer;

impl HostedShards {
    /// Records a start (`started`) or a stop of `entity` in its shard's remember store.
    pub(super) fn remember_queue(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
        entity: EntityId,
        started: bool,
    ) {
        if let Some(shard) = self.shards.get_mut(shard_id) {
            shard.remember.queue(ctx, now_ms, shard_id, entity, started);
        }
    }

    /// The replicator's answer to a load of `shard`'s remembered entities.
    pub(super) fn remember_ddata_loaded(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
        result: GetResult,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        if let Some(ids) = shard.remember.ddata_loaded(ctx, now_ms, shard_id, result) {
            self.remember_ids_loaded(ctx, now_ms, shard_id, ids);
        }
    }

    /// The remembered entities of `shard`: start those not running.
    pub(super) fn remember_ids_loaded(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &str,
        ids: Vec<EntityId>,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        if !matches!(shard.phase, Phase::Active) {
            return;
        }
        let entities = &shard.entities;
        let all = shard
            .remember
            .ids_loaded(ctx, now_ms, ids, |id| entities.contains_key(id));
        if all {
            self.remember_recover(ctx, now_ms, &shard_id.to_string(), usize::MAX);
        }
    }

    /// Starts up to `n` remembered entities of `shard`.
    fn remember_recover(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
        n: usize,
    ) {
        for _ in 0..n {
            let Some(shard) = self.shards.get_mut(shard_id) else {
                return;
            };
            if !matches!(shard.phase, Phase::Active) {
                return;
            }
            let Some(id) = shard.remember.next_to_recover() else {
                return;
            };
            if !shard.entities.contains_key(&id) {
                self.start_entity(ctx, now_ms, shard_id, id, None);
            }
        }
    }

    /// `constant` recovery: the next batch.
    pub(super) fn remember_recovery_tick(&mut self, ctx: &mut ShardContext<'_>, now_ms: u64) {
        let EntityRecoveryStrategy::Constant {
            frequency_ms,
            number_of_entities,
        } = ctx.settings.entity_recovery_strategy
        else {
            return;
        };
        let mut budget = number_of_entities.max(1);
        let ids: Vec<ShardId> = self
            .shards
            .iter()
            .filter(|(_, s)| !s.remember.to_recover.is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            let before = self
                .shards
                .get(&id)
                .map_or(0, |s| s.remember.to_recover.len());
            self.remember_recover(ctx, now_ms, &id, budget);
            let after = self
                .shards
                .get(&id)
                .map_or(0, |s| s.remember.to_recover.len());
            budget = budget.saturating_sub(before - after);
            if budget == 0 {
                break;
            }
        }
        if self
            .shards
            .values()
            .any(|s| !s.remember.to_recover.is_empty())
        {
            ctx.out
                .timers
                .set(ShardingTimer::Recovery, now_ms + frequency_ms.max(1));
        }
    }

    /// The write in flight is done: the entities it recorded start with their messages.
    pub(super) fn remember_write_done(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &str,
    ) {
        let shard_id = shard_id.to_string();
        let Some(shard) = self.shards.get_mut(&shard_id) else {
            return;
        };
        let writing = shard.remember.write_done();
        for e in writing {
            let Some(shard) = self.shards.get_mut(&shard_id) else {
                break;
            };
            let buf = match shard.entities.get_mut(&e) {
                Some(cell) => match &mut cell.status {
                    EntityStatus::RememberingStart(buf) => std::mem::take(buf),
                    _ => continue,
                },
                None => continue,
            };
            shard.entities.remove(&e);
            ctx.release(buf.len());
            self.start_entity(ctx, now_ms, &shard_id, e, None);
            for d in buf {
                self.deliver_entity(ctx, now_ms, &shard_id, d);
            }
        }
        if let Some(shard) = self.shards.get_mut(&shard_id) {
            shard.remember.flush(ctx, now_ms, &shard_id);
        }
    }
}
