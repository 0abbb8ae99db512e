//! The `Shard` part of [`ClusterSharding`]: the entities of one shard hosted on this
//! node — created on their first message, stopped when passivated (idle for
//! `passivation.idle-timeout`, over the `active-entity-limit` as the least recently
//! used, or on their own request), with the messages that arrive while one stops buffered
//! and delivered to its next incarnation (Akka's `Passivate` protocol).
//!
//! A shard is in one of four phases: **Receiving** (a new home waiting for the old one's
//! entity states), **Active**, **HandingOff** (an old home stopping its entities and
//! forwarding new messages) and **Forwarding** (an old home after the stop, until every
//! region has acknowledged the new home). The handoff itself is in [`super::handoff`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::address::UniqueAddress;

use super::remember::RememberState;
use super::shard_context::ShardContext;
use super::{
    ClusterSharding, Delivery, DropReason, EntityId, ShardId, ShardingEvent, ShardingTimer,
    StopReason,
};

/// Where a shard is in its life on this node.
#[derive(Debug)]
pub(super) enum Phase {
    /// New home of a handoff: holding what the old home forwards until it is both done
    /// (`HandOverDone`, or gone) and confirmed by the coordinator (which has written the
    /// move: `BeginHandOff`, `HostShard` or `ShardHome` naming this node).
    Receiving {
        /// Messages forwarded by the old home, in order.
        held: VecDeque<Delivery>,
        /// Handed-over entity states.
        states: Vec<(EntityId, Vec<u8>)>,
        /// `HandOverDone` arrived.
        done: bool,
        /// The coordinator has written this node as the home.
        confirmed: bool,
    },
    /// Serving its entities.
    Active,
    /// Old home: its entities are stopping; new messages go to `to` (or back to the
    /// region when there is no new home).
    HandingOff {
        to: Option<UniqueAddress>,
        since_ms: u64,
        killed: bool,
    },
    /// Old home after the stop: forwarding to `to` until every region acknowledged.
    Forwarding { to: UniqueAddress, since_ms: u64 },
}

/// The new home's side of a handoff: the per-sender buffers of the update transition.
#[derive(Debug)]
pub(super) struct Incoming {
    /// The old home.
    pub(super) from: UniqueAddress,
    /// Regions whose acknowledgements are awaited (known from `BeginHandOff`).
    pub(super) expected: Option<BTreeSet<UniqueAddress>>,
    /// Regions whose acknowledgements arrived through the old home.
    pub(super) acked: BTreeSet<UniqueAddress>,
    /// Messages sent here directly, per origin, until its acknowledgement arrives.
    pub(super) closed: BTreeMap<UniqueAddress, VecDeque<Delivery>>,
    /// When the buffers open regardless, ms.
    pub(super) deadline_ms: u64,
}

impl Incoming {
    /// True if messages from `origin` may be delivered now.
    pub(super) fn is_open(&self, origin: &UniqueAddress) -> bool {
        self.acked.contains(origin) || self.expected.as_ref().is_some_and(|e| !e.contains(origin))
    }

    /// True once every expected region has acknowledged.
    pub(super) fn is_complete(&self) -> bool {
        self.expected
            .as_ref()
            .is_some_and(|e| e.iter().all(|r| self.acked.contains(r)))
    }
}

/// The old home's side: which regions acknowledged the new home.
#[derive(Debug, Default)]
pub(super) struct Outgoing {
    pub(super) expected: Option<BTreeSet<UniqueAddress>>,
    pub(super) acked: BTreeSet<UniqueAddress>,
}

/// An entity's status in its shard.
#[derive(Debug)]
pub(super) enum EntityStatus {
    /// Running.
    Active,
    /// Stopping after passivation; messages wait here for its next incarnation.
    Passivating(VecDeque<Delivery>),
    /// Its start is being recorded (remember-entities); messages wait here.
    RememberingStart(VecDeque<Delivery>),
    /// Stopping for good (handoff, shutdown).
    Stopping,
}

/// One entity's cell.
#[derive(Debug)]
pub(super) struct EntityCell {
    pub(super) status: EntityStatus,
    pub(super) last_used_ms: u64,
    /// Position in the LRU (with an active-entity limit).
    pub(super) lru: u64,
}

/// One shard hosted on this node.
#[derive(Debug)]
pub(super) struct Shard {
    pub(super) phase: Phase,
    pub(super) entities: BTreeMap<EntityId, EntityCell>,
    pub(super) incoming: Option<Incoming>,
    pub(super) outgoing: Outgoing,
    /// A `HandOff` that arrived while this shard's own incoming handoff was still open.
    pub(super) pending_handoff: Option<Option<UniqueAddress>>,
    pub(super) remember: RememberState,
}

impl Shard {
    /// Hosted here: active, or handing its entities off (not receiving yet, not only
    /// forwarding).
    pub(super) fn is_hosting(&self) -> bool {
        matches!(self.phase, Phase::Active | Phase::HandingOff { .. })
    }

    /// Handing off or forwarding, or waiting for acknowledgements as the new home.
    pub(super) fn in_handoff(&self) -> bool {
        !matches!(self.phase, Phase::Active) || self.incoming.is_some()
    }

    /// Forwarding after the stop.
    pub(super) fn is_forwarding(&self) -> bool {
        matches!(self.phase, Phase::Forwarding { .. })
    }

    /// `Some(to)` while handing off or forwarding.
    pub(super) fn handed_to(&self) -> Option<Option<&UniqueAddress>> {
        match &self.phase {
            Phase::HandingOff { to, .. } => Some(to.as_ref()),
            Phase::Forwarding { to, .. } => Some(Some(to)),
            _ => None,
        }
    }

    /// Entities (any status), count.
    pub(super) fn entity_count(&self) -> usize {
        self.entities.len()
    }

    /// Entities that are started and not stopped.
    pub(super) fn live_entities(&self) -> impl Iterator<Item = &EntityId> {
        self.entities
            .iter()
            .filter(|(_, c)| !matches!(c.status, EntityStatus::RememberingStart(_)))
            .map(|(e, _)| e)
    }
}

impl ClusterSharding {
    /// The shards hosted here and the context a shard step borrows from the machine.
    pub(super) fn shard_parts(&mut self) -> (&mut BTreeMap<ShardId, Shard>, ShardContext<'_>) {
        (
            &mut self.shards,
            ShardContext {
                settings: &self.settings,
                out: &mut self.out,
                replicator: &mut self.replicator,
                ddata: &mut self.ddata,
            },
        )
    }

    /// `shard` became active here: its remember store loads the remembered entities.
    pub(super) fn remember_shard_started(&mut self, now_ms: u64, shard: &ShardId) {
        let (_, mut ctx) = self.shard_parts();
        RememberState::shard_started(&mut ctx, now_ms, shard);
    }

    /// Records a start (`started`) or a stop of `entity` in its shard's remember store.
    pub(super) fn remember_queue(
        &mut self,
        now_ms: u64,
        shard_id: &ShardId,
        entity: EntityId,
        started: bool,
    ) {
        let (shards, mut ctx) = self.shard_parts();
        if let Some(shard) = shards.get_mut(shard_id) {
            shard
                .remember
                .queue(&mut ctx, now_ms, shard_id, entity, started);
        }
    }

    /// Hosts `shard` here: active at once, or receiving from `handoff_from`.
    pub(super) fn shard_create(
        &mut self,
        now_ms: u64,
        shard: ShardId,
        handoff_from: Option<UniqueAddress>,
    ) {
        let (phase, incoming) = match handoff_from {
            Some(from) => (
                Phase::Receiving {
                    held: VecDeque::new(),
                    states: Vec::new(),
                    done: false,
                    confirmed: false,
                },
                Some(Incoming {
                    from,
                    expected: None,
                    acked: BTreeSet::new(),
                    closed: BTreeMap::new(),
                    deadline_ms: now_ms + 2 * self.settings.handoff_timeout_ms,
                }),
            ),
            None => (Phase::Active, None),
        };
        let active = matches!(phase, Phase::Active);
        self.shards.insert(
            shard.clone(),
            Shard {
                phase,
                entities: BTreeMap::new(),
                incoming,
                outgoing: Outgoing::default(),
                pending_handoff: None,
                remember: RememberState::default(),
            },
        );
        if active {
            self.region
                .homes
                .insert(shard.clone(), self.self_node.clone());
            self.remember_shard_started(now_ms, &shard);
        }
        self.region_flush_buffer(now_ms, &shard);
    }

    /// A message for a shard hosted here, from `from` (this node for local sends).
    pub(super) fn shard_receive(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        shard_id: &ShardId,
        d: Delivery,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        enum Route {
            Deliver,
            Hold,
            Close,
            Forward(UniqueAddress),
            BackToRegion,
        }
        let from_previous = shard.incoming.as_ref().is_some_and(|i| i.from == *from);
        let route = match &shard.phase {
            Phase::Receiving { .. } if from_previous => Route::Hold,
            Phase::Receiving { .. } => Route::Close,
            Phase::Active => match &shard.incoming {
                Some(inc) if !from_previous && !inc.is_open(&d.origin) => Route::Close,
                _ => Route::Deliver,
            },
            Phase::HandingOff { to: Some(t), .. } | Phase::Forwarding { to: t, .. } => {
                Route::Forward(t.clone())
            }
            Phase::HandingOff { to: None, .. } => Route::BackToRegion,
        };
        match route {
            Route::Deliver => self.deliver_entity(now_ms, shard_id, d),
            Route::Hold => {
                if let Some(d) = self.take_buffer_slot(d) {
                    if let Some(Shard {
                        phase: Phase::Receiving { held, .. },
                        ..
                    }) = self.shards.get_mut(shard_id)
                    {
                        held.push_back(d);
                    }
                }
            }
            Route::Close => {
                self.stats.held_for_order += 1;
                if let Some(d) = self.take_buffer_slot(d) {
                    if let Some(inc) = self
                        .shards
                        .get_mut(shard_id)
                        .and_then(|s| s.incoming.as_mut())
                    {
                        inc.closed.entry(d.origin.clone()).or_default().push_back(d);
                    }
                }
            }
            Route::Forward(to) => {
                self.stats.forwarded += 1;
                self.send_delivery(&to, shard_id.clone(), d);
            }
            Route::BackToRegion => self.region_buffer(now_ms, shard_id.clone(), d),
        }
    }

    /// Delivers to the entity, starting it if needed (or buffering while it passivates
    /// or its start is being remembered).
    pub(super) fn deliver_entity(&mut self, now_ms: u64, shard_id: &ShardId, d: Delivery) {
        let remember = self.settings.remember_entities;
        let down = self.self_down();
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        match shard.entities.get_mut(&d.entity) {
            Some(cell) => match &mut cell.status {
                EntityStatus::Active => {
                    cell.last_used_ms = now_ms;
                    let entity = d.entity.clone();
                    self.touch_lru(shard_id, &entity);
                    self.emit_deliver(shard_id, d);
                }
                EntityStatus::Passivating(_) | EntityStatus::RememberingStart(_) => {
                    if let Some(d) = self.take_buffer_slot(d) {
                        if let Some(EntityCell {
                            status:
                                EntityStatus::Passivating(buf) | EntityStatus::RememberingStart(buf),
                            ..
                        }) = self
                            .shards
                            .get_mut(shard_id)
                            .and_then(|s| s.entities.get_mut(&d.entity))
                        {
                            buf.push_back(d);
                        }
                    }
                }
                EntityStatus::Stopping => self.drop_delivery(d, DropReason::ShuttingDown),
            },
            None if down => self.drop_delivery(d, DropReason::ShuttingDown),
            None if remember => {
                let entity = d.entity.clone();
                let Some(d) = self.take_buffer_slot(d) else {
                    return;
                };
                if let Some(shard) = self.shards.get_mut(shard_id) {
                    shard.entities.insert(
                        entity.clone(),
                        EntityCell {
                            status: EntityStatus::RememberingStart(VecDeque::from([d])),
                            last_used_ms: now_ms,
                            lru: 0,
                        },
                    );
                }
                self.remember_queue(now_ms, shard_id, entity, true);
            }
            None => {
                let entity = d.entity.clone();
                self.start_entity(now_ms, shard_id, entity, None);
                self.emit_deliver(shard_id, d);
            }
        }
    }

    fn emit_deliver(&mut self, shard_id: &ShardId, d: Delivery) {
        let reply_to = d.ask.map(|a| (d.origin, a));
        self.out.events.push_back(ShardingEvent::Deliver {
            shard: shard_id.clone(),
            entity: d.entity,
            payload: d.payload,
            reply_to,
        });
    }

    /// Starts `entity` (Active) and tells the runtime.
    pub(super) fn start_entity(
        &mut self,
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
        self.stats.entities_started += 1;
        self.out.events.push_back(ShardingEvent::StartEntity {
            shard: shard_id.clone(),
            entity: entity.clone(),
            state,
        });
        self.touch_lru(shard_id, &entity);
        self.enforce_entity_limit(now_ms);
    }

    /// Moves the entity to the most recently used end of the LRU (with a limit only).
    fn touch_lru(&mut self, shard_id: &ShardId, entity: &EntityId) {
        if self.settings.active_entity_limit.is_none() {
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
    fn forget_lru(&mut self, shard_id: &ShardId, entity: &EntityId) {
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
    fn enforce_entity_limit(&mut self, now_ms: u64) {
        let Some(limit) = self.settings.active_entity_limit else {
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
            self.shard_passivate(now_ms, &shard, &entity);
        }
    }

    /// Stops an active entity for passivation; messages meanwhile wait in its cell.
    pub(super) fn shard_passivate(&mut self, _now_ms: u64, shard_id: &str, entity: &str) {
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
        self.stats.entities_passivated += 1;
        self.out.events.push_back(ShardingEvent::StopEntity {
            shard: shard_id,
            entity,
            reason: StopReason::Passivate,
        });
    }

    /// Passivates entities idle longer than `passivation.idle-timeout`.
    pub(super) fn passivate_idle(&mut self, now_ms: u64) {
        let Some(idle) = self.settings.passivation_idle_timeout_ms else {
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
            self.shard_passivate(now_ms, &s, &e);
        }
        self.out
            .timers
            .set(ShardingTimer::Passivation, now_ms + (idle / 2).max(1));
    }

    /// The runtime reports an entity stopped.
    pub(super) fn shard_entity_stopped(
        &mut self,
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
                    self.send(
                        &to,
                        super::ShardingBody::EntityHandOver {
                            shard: shard_id.clone(),
                            entity: entity.to_string(),
                            state,
                        },
                    );
                }
                self.handoff_check_stopped(now_ms, &shard_id);
            }
            _ => match cell.status {
                EntityStatus::Passivating(buf) if buf.is_empty() => {
                    if self.settings.remember_entities {
                        self.remember_queue(now_ms, &shard_id, entity.to_string(), false);
                    }
                }
                EntityStatus::Passivating(buf) => {
                    // Messages arrived while it stopped: its next incarnation gets them.
                    self.region.release(buf.len());
                    self.start_entity(now_ms, &shard_id, entity.to_string(), None);
                    for d in buf {
                        self.deliver_entity(now_ms, &shard_id, d);
                    }
                }
                EntityStatus::RememberingStart(buf) => {
                    self.region.release(buf.len());
                }
                // Stopped by itself (or failed), or stopping for good: nothing to do; a
                // later message starts it again.
                EntityStatus::Active | EntityStatus::Stopping => {}
            },
        }
    }

    /// This node is down: stop every entity now, hand nothing over.
    pub(super) fn stop_all_entities(&mut self, _now_ms: u64) {
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
        self.region.release(dropped);
        self.stats.dropped_other += dropped as u64;
        self.lru.clear();
        for (shard, entity) in stops {
            self.out.events.push_back(ShardingEvent::StopEntity {
                shard,
                entity,
                reason: StopReason::Shutdown,
            });
        }
    }
}
