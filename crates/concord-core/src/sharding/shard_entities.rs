//! The entities of the shards hosted here (Akka's `Shard`; spec
//! `cluster-sharding-concepts.md`, *Passivation*): an entity is created on its first
//! message, stopped when passivated — idle for `passivation.idle-timeout`, the least
//! recently used over `active-entity-limit`, or on its own request (Akka's `Passivate`) —
//! and the messages that arrive while it stops are buffered and delivered to its next
//! incarnation. With remember-entities, a new entity's messages wait until its start is
//! recorded.

use std::collections::VecDeque;

use super::api::{DropReason, ShardingEvent, StopReason};
use super::hosted_shards::HostedShards;
use super::ids::{EntityId, ShardId};
use super::message::{Delivery, ShardingBody};
use super::shard::{EntityCell, EntityStatus, Phase};
use super::shard_context::ShardContext;
use super::timer::ShardingTimer;

impl HostedShards {
    /// Delivers to the entity, starting it if needed (or buffering while it passivates
    /// or its start is being remembered).
    pub(super) fn deliver_entity(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
        d: Delivery,
    ) {
        let remember = ctx.settings.remember_entities;
        let down = ctx.self_down();
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        match shard.entities.get_mut(&d.entity) {
            Some(cell) => match &mut cell.status {
                EntityStatus::Active => {
                    cell.last_used_ms = now_ms;
                    let entity = d.entity.clone();
                    self.touch_lru(ctx, shard_id, &entity);
                    Self::emit_deliver(ctx, shard_id, d);
                }
                EntityStatus::Passivating(buf) | EntityStatus::RememberingStart(buf) => {
                    if let Some(d) = ctx.take_buffer_slot(d) {
                        buf.push_back(d);
                    }
                }
                EntityStatus::Stopping => ctx.drop_delivery(d, DropReason::ShuttingDown),
            },
            None if down => ctx.drop_delivery(d, DropReason::ShuttingDown),
            None if remember => {
                let entity = d.entity.clone();
                let Some(d) = ctx.take_buffer_slot(d) else {
                    return;
                };
                shard.entities.insert(
                    entity.clone(),
                    EntityCell {
                        status: EntityStatus::RememberingStart(VecDeque::from([d])),
                        last_used_ms: now_ms,
                        lru: 0,
                    },
                );
                self.remember_queue(ctx, now_ms, shard_id, entity, true);
            }
            None => {
                let entity = d.entity.clone();
                self.start_entity(ctx, now_ms, shard_id, entity, None);
                Self::emit_deliver(ctx, shard_id, d);
            }
        }
    }

    fn emit_deliver(ctx: &mut ShardContext<'_>, shard_id: &ShardId, d: Delivery) {
        let reply_to = d.ask.map(|a| (d.origin, a));
        ctx.out.events.push_back(ShardingEvent::Deliver {
            shard: shard_id.clone(),
            entity: d.entity,
            payload: d.payload,
            reply_to,
        });
    }

    /// Starts `entity` (Active) and tells the runtime.
    pub(super) fn start_entity(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
        entity: EntityId,
        state: Option<Vec<u8>>,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        shard.entities.insert(
            entity.clone(),
            EntityCell {
                status: EntityStatus::Active,
                last_used_ms: now_ms,
                lru: 0,
            },
        );
        ctx.stats.entities_started += 1;
        ctx.out.events.push_back(ShardingEvent::StartEntity {
            shard: shard_id.clone(),
            entity: entity.clone(),
            state,
        });
        self.touch_lru(ctx, shard_id, &entity);
        self.enforce_entity_limit(ctx, now_ms);
    }

    /// Moves the entity to the most recently used end of the LRU (with a limit only).
    fn touch_lru(&mut self, ctx: &ShardContext<'_>, shard_id: &ShardId, entity: &EntityId) {
        if ctx.settings.active_entity_limit.is_none() {
            return;
        }
        let Some(cell) = self
            .shards
            .get_mut(shard_id)
            .and_then(|s| s.entities.get_mut(entity))
        else {
            return;
        };
        cell.lru = self.lru.touch(cell.lru, shard_id, entity);
    }

    /// Takes the entity out of the LRU.
    pub(super) fn forget_lru(&mut self, shard_id: &ShardId, entity: &EntityId) {
        if let Some(cell) = self
            .shards
            .get_mut(shard_id)
            .and_then(|s| s.entities.get_mut(entity))
        {
            self.lru.remove(cell.lru);
            cell.lru = 0;
        }
    }

    /// Passivates the least recently used entities over the active-entity limit.
    fn enforce_entity_limit(&mut self, ctx: &mut ShardContext<'_>, now_ms: u64) {
        let Some(limit) = ctx.settings.active_entity_limit else {
            return;
        };
        while self.lru.len() > limit.max(1) {
            let Some((shard, entity)) = self.lru.pop_least_recent() else {
                break;
            };
            if let Some(cell) = self
                .shards
                .get_mut(&shard)
                .and_then(|s| s.entities.get_mut(&entity))
            {
                cell.lru = 0;
            }
            self.passivate(ctx, now_ms, &shard, &entity);
        }
    }

    /// Stops an active entity for passivation; messages meanwhile wait in its cell.
    pub(super) fn passivate(
        &mut self,
        ctx: &mut ShardContext<'_>,
        _now_ms: u64,
        shard_id: &str,
        entity: &str,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        if !matches!(shard.phase, Phase::Active) {
            return;
        }
        let Some(cell) = shard.entities.get_mut(entity) else {
            return;
        };
        if !matches!(cell.status, EntityStatus::Active) {
            return;
        }
        cell.status = EntityStatus::Passivating(VecDeque::new());
        let (shard_id, entity) = (shard_id.to_string(), entity.to_string());
        self.forget_lru(&shard_id, &entity);
        ctx.stats.entities_passivated += 1;
        ctx.out.events.push_back(ShardingEvent::StopEntity {
            shard: shard_id,
            entity,
            reason: StopReason::Passivate,
        });
    }

    /// Passivates entities idle longer than `passivation.idle-timeout`.
    pub(super) fn passivate_idle(&mut self, ctx: &mut ShardContext<'_>, now_ms: u64) {
        let Some(idle) = ctx.settings.passivation_idle_timeout_ms else {
            return;
        };
        let idle_ones: Vec<(ShardId, EntityId)> = self
            .shards
            .iter()
            .filter(|(_, s)| matches!(s.phase, Phase::Active))
            .flat_map(|(sid, s)| {
                s.entities
                    .iter()
                    .filter(|(_, c)| {
                        matches!(c.status, EntityStatus::Active)
                            && c.last_used_ms.saturating_add(idle) <= now_ms
                    })
                    .map(move |(e, _)| (sid.clone(), e.clone()))
            })
            .collect();
        for (s, e) in idle_ones {
            self.passivate(ctx, now_ms, &s, &e);
        }
        ctx.out
            .timers
            .set(ShardingTimer::Passivation, now_ms + (idle / 2).max(1));
    }

    /// The runtime reports an entity stopped.
    pub(super) fn entity_stopped(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &str,
        entity: &str,
        state: Option<Vec<u8>>,
    ) {
        let shard_id = shard_id.to_string();
        self.forget_lru(&shard_id, &entity.to_string());
        let Some(shard) = self.shards.get_mut(&shard_id) else {
            return;
        };
        let Some(cell) = shard.entities.remove(entity) else {
            return;
        };
        match &shard.phase {
            Phase::HandingOff { to, .. } => {
                if let (Some(to), Some(state)) = (to.clone(), state) {
                    ctx.send(
                        &to,
                        ShardingBody::EntityHandOver {
                            shard: shard_id.clone(),
                            entity: entity.to_string(),
                            state,
                        },
                    );
                }
                self.handoff_check_stopped(ctx, now_ms, &shard_id);
            }
            _ => match cell.status {
                EntityStatus::Passivating(buf) if buf.is_empty() => {
                    if ctx.settings.remember_entities {
                        self.remember_queue(ctx, now_ms, &shard_id, entity.to_string(), false);
                    }
                }
                EntityStatus::Passivating(buf) => {
                    // Messages arrived while it stopped: its next incarnation gets them.
                    ctx.release(buf.len());
                    self.start_entity(ctx, now_ms, &shard_id, entity.to_string(), None);
                    for d in buf {
                        self.deliver_entity(ctx, now_ms, &shard_id, d);
                    }
                }
                EntityStatus::RememberingStart(buf) => {
                    ctx.release(buf.len());
                }
                // Stopped by itself (or failed), or stopping for good: nothing to do; a
                // later message starts it again.
                EntityStatus::Active | EntityStatus::Stopping => {}
            },
        }
    }

    /// This node is down: stop every entity now, hand nothing over.
    pub(super) fn stop_all_entities(&mut self, ctx: &mut ShardContext<'_>) {
        let mut stops = Vec::new();
        let mut dropped = 0;
        for (sid, s) in self.shards.iter_mut() {
            for (e, c) in s.entities.iter_mut() {
                match std::mem::replace(&mut c.status, EntityStatus::Stopping) {
                    EntityStatus::Active => stops.push((sid.clone(), e.clone())),
                    EntityStatus::Passivating(buf) | EntityStatus::RememberingStart(buf) => {
                        dropped += buf.len()
                    }
                    EntityStatus::Stopping => {}
                }
            }
        }
        ctx.release(dropped);
        ctx.stats.dropped_other += dropped as u64;
        self.lru.clear();
        for (shard, entity) in stops {
            ctx.out.events.push_back(ShardingEvent::StopEntity {
                shard,
                entity,
                reason: StopReason::Shutdown,
            });
        }
    }
}
