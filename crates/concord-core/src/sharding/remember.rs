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

use crate::ddata::replicator::{GetResult, Key, ReadConsistency, RequestId, WriteConsistency};
use crate::ddata::ORSet;

use super::ddata_requests::DdataPurpose;
use super::settings::{EntityRecoveryStrategy, RememberEntitiesStore};
use super::shard::{EntityStatus, Phase};
use super::{ClusterSharding, EntityId, ShardId, ShardingEvent, ShardingTimer};

impl ClusterSharding {
    /// The replicator key of `shard`'s remembered entities.
    fn remember_key(&self, shard: &str) -> Option<Key<ORSet<String>>> {
        Key::new(format!("shard-{}-{}", self.settings.type_name, shard)).ok()
    }

    /// A shard became active here: load its remembered entities.
    pub(super) fn remember_shard_started(&mut self, now_ms: u64, shard: &ShardId) {
        if !self.settings.remember_entities {
            return;
        }
        match self.settings.remember_entities_store {
            RememberEntitiesStore::External => {
                self.out.events.push_back(ShardingEvent::RememberLoad {
                    shard: shard.clone(),
                })
            }
            RememberEntitiesStore::DistributedData => self.remember_ddata_load(now_ms, shard),
        }
    }

    fn remember_ddata_load(&mut self, now_ms: u64, shard: &ShardId) {
        let Some(key) = self.remember_key(shard) else {
            return;
        };
        let id = self.ddata.open(DdataPurpose::RememberLoad(shard.clone()));
        let consistency = ReadConsistency::MajorityPlus {
            additional: self.settings.coordinator_read_majority_plus,
            timeout_ms: self.settings.waiting_for_state_timeout_ms,
            min_cap: self.settings.majority_min_cap,
        };
        self.replicator
            .get(now_ms, RequestId(id), key.id(), consistency);
    }

    /// The replicator's answer to a load.
    pub(super) fn remember_ddata_loaded(
        &mut self,
        now_ms: u64,
        shard: &ShardId,
        result: GetResult,
    ) {
        let ids = match result {
            GetResult::Success(v) => v
                .as_any()
                .downcast_ref::<ORSet<String>>()
                .map(|s| s.elements().cloned().collect())
                .unwrap_or_default(),
            GetResult::NotFound | GetResult::Deleted => Vec::new(),
            GetResult::Failure(_) => {
                // Not enough replicas answered: try again (Akka retries too).
                if self.shards.contains_key(shard) {
                    self.remember_ddata_load(now_ms, shard);
                }
                return;
            }
        };
        self.remember_ids_loaded(now_ms, shard, ids);
    }

    /// The remembered entities of `shard`: start those not running.
    pub(super) fn remember_ids_loaded(&mut self, now_ms: u64, shard_id: &str, ids: Vec<EntityId>) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        if !matches!(shard.phase, Phase::Active) {
            return;
        }
        for id in ids {
            if id.len() <= super::MAX_ENTITY_ID_BYTES && !shard.entities.contains_key(&id) {
                shard.remember.to_recover.push_back(id);
            }
        }
        match self.settings.entity_recovery_strategy {
            EntityRecoveryStrategy::All => {
                let shard_id = shard_id.to_string();
                self.remember_recover(now_ms, &shard_id, usize::MAX);
            }
            EntityRecoveryStrategy::Constant { .. } => {
                self.out
                    .timers
                    .set_if_unset(ShardingTimer::Recovery, now_ms);
            }
        }
    }

    /// Starts up to `n` remembered entities of `shard`.
    fn remember_recover(&mut self, now_ms: u64, shard_id: &ShardId, n: usize) {
        for _ in 0..n {
            let Some(shard) = self.shards.get_mut(shard_id) else {
                return;
            };
            if !matches!(shard.phase, Phase::Active) {
                return;
            }
            let Some(id) = shard.remember.to_recover.pop_front() else {
                return;
            };
            if !shard.entities.contains_key(&id) {
                self.start_entity(now_ms, shard_id, id, None);
            }
        }
    }

    /// `constant` recovery: the next batch.
    pub(super) fn remember_recovery_tick(&mut self, now_ms: u64) {
        let EntityRecoveryStrategy::Constant {
            frequency_ms,
            number_of_entities,
        } = self.settings.entity_recovery_strategy
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
            self.remember_recover(now_ms, &id, budget);
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
            self.out
                .timers
                .set(ShardingTimer::Recovery, now_ms + frequency_ms.max(1));
        }
    }

    /// Records a start (`started`) or a stop of `entity`.
    pub(super) fn remember_queue(
        &mut self,
        now_ms: u64,
        shard_id: &ShardId,
        entity: EntityId,
        started: bool,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        if started {
            shard.remember.started.push(entity);
        } else {
            shard.remember.stopped.push(entity);
        }
        self.remember_flush(now_ms, shard_id);
    }

    /// Starts the next write if none is in flight.
    fn remember_flush(&mut self, now_ms: u64, shard_id: &ShardId) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        let r = &mut shard.remember;
        if r.in_flight || (r.started.is_empty() && r.stopped.is_empty()) {
            return;
        }
        r.in_flight = true;
        let started = std::mem::take(&mut r.started);
        let stopped = std::mem::take(&mut r.stopped);
        r.writing = started.clone();
        match self.settings.remember_entities_store {
            RememberEntitiesStore::External => {
                self.out.events.push_back(ShardingEvent::RememberUpdate {
                    shard: shard_id.clone(),
                    started,
                    stopped,
                })
            }
            RememberEntitiesStore::DistributedData => {
                let Some(key) = self.remember_key(shard_id) else {
                    return;
                };
                let id = self
                    .ddata
                    .open(DdataPurpose::RememberWrite(shard_id.clone()));
                let me = self.replicator.replica();
                let consistency = WriteConsistency::MajorityPlus {
                    additional: self.settings.coordinator_write_majority_plus,
                    timeout_ms: self.settings.updating_state_timeout_ms,
                    min_cap: self.settings.majority_min_cap,
                };
                self.replicator.update(
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

    /// The write in flight is done: the entities it recorded start with their messages.
    pub(super) fn remember_write_done(&mut self, now_ms: u64, shard_id: &str) {
        let shard_id = shard_id.to_string();
        let Some(shard) = self.shards.get_mut(&shard_id) else {
            return;
        };
        shard.remember.in_flight = false;
        let writing = std::mem::take(&mut shard.remember.writing);
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
            self.region.release(buf.len());
            self.start_entity(now_ms, &shard_id, e, None);
            for d in buf {
                self.deliver_entity(now_ms, &shard_id, d);
            }
        }
        self.remember_flush(now_ms, &shard_id);
    }
}
