//! Remember entities (Akka `remember-entities`, off by default): a shard records which of
//! its entities are started, and when the shard starts on a node — after a rebalance, a
//! graceful leave or a crash of its previous home — it starts them again without waiting
//! for a message, `entity-recovery-strategy` at a time.
//!
//! An entity's first message waits until its start is recorded; a passivated entity is
//! removed from the record (Akka's semantics). Records are written in batches: while one
//! write is in flight, the next collects every change.
//!
//! Stores: the machine's replicator (one `ORSet<String>` per shard under the durable key
//! `shard-<type>-<shard>`, written with `WriteMajorityPlus` and read with
//! `ReadMajorityPlus`; a write that times out has still updated the local replica and
//! spreads by gossip, so it is counted and the entities start), or an external store the
//! runtime provides ([`super::ShardingEvent::RememberLoad`] /
//! [`super::ShardingEvent::RememberUpdate`]).

//! The bookkeeping here ([`RememberState`]) is the shard's own (Akka's `Shard` with its
//! `RememberEntitiesShardStore`; Pekko `Shard.scala`); it borrows a [`ShardContext`] for
//! each step and knows nothing of the shard's entities: it hands back which entities to
//! start, and the machine starts them (`shard_remember`).

use std::collections::VecDeque;

use crate::ddata::replicator::{GetResult, Key, ReadConsistency, RequestId, WriteConsistency};
use crate::ddata::ORSet;

use super::api::ShardingEvent;
use super::ddata_requests::DdataPurpose;
use super::ids::{EntityId, ShardId};
use super::settings::ShardingSettings;
use super::settings::{EntityRecoveryStrategy, RememberEntitiesStore};
use super::shard_context::ShardContext;
use super::timer::ShardingTimer;

/// A shard's remember-entities bookkeeping (Akka `Shard`'s remember-entities state).
#[derive(Debug, Default)]
pub(super) struct RememberState {
    /// A write is in flight.
    pub(super) in_flight: bool,
    /// Entities whose start the write in flight records.
    pub(super) writing: Vec<EntityId>,
    /// Changes for the next write.
    pub(super) started: Vec<EntityId>,
    pub(super) stopped: Vec<EntityId>,
    /// Remembered entities still to start.
    pub(super) to_recover: VecDeque<EntityId>,
}

/// The replicator key of `shard`'s remembered entities (`shard-<type>-<shard>`).
fn remember_key(settings: &ShardingSettings, shard: &str) -> Option<Key<ORSet<String>>> {
    Key::new(format!("shard-{}-{}", settings.type_name, shard)).ok()
}

impl RememberState {
    /// The shard became active here: load its remembered entities (a `RememberLoad`
    /// event for an external store, a `ReadMajorityPlus` read of the replicator else).
    pub(super) fn shard_started(ctx: &mut ShardContext<'_>, now_ms: u64, shard: &ShardId) {
        if !ctx.settings.remember_entities {
            return;
        }
        match ctx.settings.remember_entities_store {
            RememberEntitiesStore::External => {
                ctx.out.events.push_back(ShardingEvent::RememberLoad {
                    shard: shard.clone(),
                })
            }
            RememberEntitiesStore::DistributedData => Self::ddata_load(ctx, now_ms, shard),
        }
    }

    fn ddata_load(ctx: &mut ShardContext<'_>, now_ms: u64, shard: &ShardId) {
        let Some(key) = remember_key(ctx.settings, shard) else {
            return;
        };
        let id = ctx.ddata.open(DdataPurpose::RememberLoad(shard.clone()));
        let consistency = ReadConsistency::MajorityPlus {
            additional: ctx.settings.coordinator_read_majority_plus,
            timeout_ms: ctx.settings.waiting_for_state_timeout_ms,
            min_cap: ctx.settings.majority_min_cap,
        };
        ctx.replicator
            .get(now_ms, RequestId(id), key.id(), consistency);
    }

    /// The replicator's answer to a load: the remembered entity ids, or `None` when not
    /// enough replicas answered (the load is asked again, as Akka retries).
    pub(super) fn ddata_loaded(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard: &ShardId,
        result: GetResult,
    ) -> Option<Vec<EntityId>> {
        match result {
            GetResult::Success(v) => Some(
                v.as_any()
                    .downcast_ref::<ORSet<String>>()
                    .map(|s| s.elements().cloned().collect())
                    .unwrap_or_default(),
            ),
            GetResult::NotFound | GetResult::Deleted => Some(Vec::new()),
            GetResult::Failure(_) => {
                Self::ddata_load(ctx, now_ms, shard);
                None
            }
        }
    }

    /// The remembered entities of an active shard arrived: queues those for which
    /// `known` is false (ids over [`super::ids::MAX_ENTITY_ID_BYTES`] are ignored). True if
    /// all of them start now (`entity-recovery-strategy = all`); with `constant` the
    /// recovery timer is set.
    pub(super) fn ids_loaded(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        ids: Vec<EntityId>,
        known: impl Fn(&EntityId) -> bool,
    ) -> bool {
        for id in ids {
            if id.len() <= super::ids::MAX_ENTITY_ID_BYTES && !known(&id) {
                self.to_recover.push_back(id);
            }
        }
        match ctx.settings.entity_recovery_strategy {
            EntityRecoveryStrategy::All => true,
            EntityRecoveryStrategy::Constant { .. } => {
                ctx.out.timers.set_if_unset(ShardingTimer::Recovery, now_ms);
                false
            }
        }
    }

    /// The next remembered entity to start, if any.
    pub(super) fn next_to_recover(&mut self) -> Option<EntityId> {
        self.to_recover.pop_front()
    }

    /// Records a start (`started`) or a stop of `entity`.
    pub(super) fn queue(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard: &ShardId,
        entity: EntityId,
        started: bool,
    ) {
        if started {
            self.started.push(entity);
        } else {
            self.stopped.push(entity);
        }
        self.flush(ctx, now_ms, shard);
    }

    /// Starts the next write (a `RememberUpdate` event, or a `WriteMajorityPlus` update of
    /// the shard's `ORSet`) if none is in flight.
    pub(super) fn flush(&mut self, ctx: &mut ShardContext<'_>, now_ms: u64, shard: &ShardId) {
        if self.in_flight || (self.started.is_empty() && self.stopped.is_empty()) {
            return;
        }
        self.in_flight = true;
        let started = std::mem::take(&mut self.started);
        let stopped = std::mem::take(&mut self.stopped);
        self.writing = started.clone();
        match ctx.settings.remember_entities_store {
            RememberEntitiesStore::External => {
                ctx.out.events.push_back(ShardingEvent::RememberUpdate {
                    shard: shard.clone(),
                    started,
                    stopped,
                })
            }
            RememberEntitiesStore::DistributedData => {
                let Some(key) = remember_key(ctx.settings, shard) else {
                    return;
                };
                let id = ctx.ddata.open(DdataPurpose::RememberWrite(shard.clone()));
                let me = ctx.replicator.replica();
                let consistency = WriteConsistency::MajorityPlus {
                    additional: ctx.settings.coordinator_write_majority_plus,
                    timeout_ms: ctx.settings.updating_state_timeout_ms,
                    min_cap: ctx.settings.majority_min_cap,
                };
                ctx.replicator.update(
                    now_ms,
                    RequestId(id),
                    &key,
                    consistency,
                    ORSet::new,
                    move |set| {
                        for e in &stopped {
                            set.remove(me, e);
                        }
                        for e in started {
                            set.add(me, e);
                        }
                    },
                );
            }
        }
    }

    /// The write in flight is done: the entities whose start it recorded (the machine
    /// starts them with their messages, then calls [`RememberState::flush`]).
    pub(super) fn write_done(&mut self) -> Vec<EntityId> {
        self.in_flight = false;
        std::mem::take(&mut self.writing)
    }
}
