//! How the `ShardCoordinator` keeps its state in Distributed Data (Akka's
//! `DDataShardCoordinator`; research notes §1.2–1.3): the state is read with
//! `ReadMajorityPlus` on start and fail-over (retried until it succeeds; not found = empty),
//! and every change is written with `WriteMajorityPlus` before the coordinator acts on it —
//! one write at a time, changes that arrive meanwhile going into the next write together,
//! a write that is not confirmed written again (Akka retries forever too). With
//! remember-entities, the set of every shard ever allocated is a `GSet` beside it.

use crate::address::UniqueAddress;
use crate::ddata::replicator::{GetResult, Key, ReadConsistency, RequestId, WriteConsistency};
use crate::ddata::{GSet, LWWRegister, UpdateResult};

use super::coordinator_state::{CoordinatorEvent, CoordinatorState};
use super::{ClusterSharding, DdataPurpose, ShardId};

/// What to do once a write succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum AfterWrite {
    /// Acknowledge a registration.
    Ack(UniqueAddress),
    /// A shard was allocated: `HostShard` to its region, `ShardHome` to the requesters.
    Allocated(ShardId),
    /// A handoff moved the shard: `BeginHandOff` to every region.
    Flipped(ShardId),
    /// A handoff ended without a new home: allocate again for whoever asked.
    Deallocated(ShardId),
    /// A region or proxy is gone.
    Terminated(UniqueAddress),
}

/// The write in flight: the state it writes and what follows it.
#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) next: CoordinatorState,
    pub(super) after: Vec<AfterWrite>,
}

impl ClusterSharding {
    /// The Distributed Data key of the coordinator's state (Akka's name for it).
    pub(super) fn state_key(&self) -> Option<Key<LWWRegister<CoordinatorState>>> {
        Key::new(format!("{}CoordinatorState", self.settings.type_name)).ok()
    }

    /// The key of the remembered shards (with remember-entities).
    pub(super) fn all_shards_key(&self) -> Option<Key<GSet<String>>> {
        Key::new(format!("shard-{}-all", self.settings.type_name)).ok()
    }

    /// Reads `key` with `ReadMajorityPlus`, the answer routed by `purpose`.
    pub(super) fn coordinator_read(&mut self, now_ms: u64, key: &str, purpose: DdataPurpose) {
        let id = self.next_request_id();
        self.ddata_requests.insert(id, purpose);
        let consistency = ReadConsistency::MajorityPlus {
            additional: self.settings.coordinator_read_majority_plus,
            timeout_ms: self.settings.waiting_for_state_timeout_ms,
            min_cap: self.settings.majority_min_cap,
        };
        self.replicator.get(now_ms, RequestId(id), key, consistency);
    }

    /// `WriteMajorityPlus` with the coordinator's settings.
    pub(super) fn write_consistency(&self) -> WriteConsistency {
        WriteConsistency::MajorityPlus {
            additional: self.settings.coordinator_write_majority_plus,
            timeout_ms: self.settings.updating_state_timeout_ms,
            min_cap: self.settings.majority_min_cap,
        }
    }

    /// The singleton started the coordinator here: read the state.
    pub(super) fn coordinator_start(&mut self, now_ms: u64) {
        if let Some(k) = self.state_key() {
            let id = k.id().to_string();
            self.coordinator_read(now_ms, &id, DdataPurpose::CoordinatorLoad);
        }
        if self.settings.remember_entities {
            if let Some(k) = self.all_shards_key() {
                let id = k.id().to_string();
                self.coordinator_read(now_ms, &id, DdataPurpose::AllShardsLoad);
            }
        }
    }

    /// The state was read (or not).
    pub(super) fn coordinator_loaded(&mut self, now_ms: u64, result: GetResult) {
        let remember = self.settings.remember_entities;
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        match result {
            GetResult::Success(v) => {
                let Some(reg) = v.as_any().downcast_ref::<LWWRegister<CoordinatorState>>() else {
                    self.stats.state_errors += 1;
                    return;
                };
                let mut s = reg.value().clone();
                s.rebuild_index();
                c.state = s;
            }
            GetResult::NotFound | GetResult::Deleted => c.state = CoordinatorState::new(remember),
            GetResult::Failure(reason) => {
                tracing::debug!(type_name = %self.settings.type_name, %reason, "coordinator state not read yet; retrying");
                if let Some(k) = self.state_key() {
                    let id = k.id().to_string();
                    self.coordinator_read(now_ms, &id, DdataPurpose::CoordinatorLoad);
                }
                return;
            }
        }
        c.state_loaded = true;
        self.coordinator_maybe_activate(now_ms);
    }

    /// The remembered shards were read (or not).
    pub(super) fn coordinator_all_shards_loaded(&mut self, now_ms: u64, result: GetResult) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        match result {
            GetResult::Success(v) => {
                if let Some(set) = v.as_any().downcast_ref::<GSet<String>>() {
                    c.remembered_shards = set.elements().cloned().collect();
                }
            }
            GetResult::NotFound | GetResult::Deleted => {}
            GetResult::Failure(_) => {
                if let Some(k) = self.all_shards_key() {
                    let id = k.id().to_string();
                    self.coordinator_read(now_ms, &id, DdataPurpose::AllShardsLoad);
                }
                return;
            }
        }
        c.all_shards_loaded = true;
        self.coordinator_maybe_activate(now_ms);
    }

    /// Queues `events` for the next write, with what follows it.
    pub(super) fn coordinator_write(
        &mut self,
        now_ms: u64,
        events: Vec<CoordinatorEvent>,
        after: AfterWrite,
    ) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        c.queued.extend(events);
        c.queued_after.push(after);
        if c.writing.is_none() {
            self.coordinator_start_write(now_ms);
        }
    }

    /// Starts the next write if none is in flight: the state with every queued event applied.
    pub(super) fn coordinator_start_write(&mut self, now_ms: u64) {
        let Some(key) = self.state_key() else {
            return;
        };
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if c.writing.is_some() || (c.queued.is_empty() && c.queued_after.is_empty()) {
            return;
        }
        let mut next = c.state.clone();
        for ev in std::mem::take(&mut c.queued) {
            if let Err(e) = next.apply(&ev) {
                tracing::debug!(type_name = %self.settings.type_name, error = %e, "coordinator event does not apply");
                self.stats.state_errors += 1;
            }
        }
        let after = std::mem::take(&mut c.queued_after);
        c.writing = Some(InFlight {
            next: next.clone(),
            after,
        });
        self.coordinator_issue_write(now_ms, &key, next);
    }

    /// Sends `next` to the replicator (the first write, or the same state again).
    pub(super) fn coordinator_issue_write(
        &mut self,
        now_ms: u64,
        key: &Key<LWWRegister<CoordinatorState>>,
        next: CoordinatorState,
    ) {
        let id = self.next_request_id();
        self.ddata_requests
            .insert(id, DdataPurpose::CoordinatorWrite);
        let me = self.replicator.replica();
        let ts = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let initial = next.clone();
        let consistency = self.write_consistency();
        self.replicator.update(
            now_ms,
            RequestId(id),
            key,
            consistency,
            move || LWWRegister::new(me, initial, ts),
            move |r| r.set(me, next, ts),
        );
    }

    /// The write in flight finished.
    pub(super) fn coordinator_written(&mut self, now_ms: u64, result: UpdateResult) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        let Some(flight) = c.writing.take() else {
            return;
        };
        if result != UpdateResult::Success {
            // Write the same state again (the local replica has it already).
            self.stats.write_timeouts += 1;
            tracing::debug!(type_name = %self.settings.type_name, result = ?result, "coordinator state write not confirmed; writing again");
            let next = flight.next.clone();
            c.writing = Some(flight);
            if let Some(key) = self.state_key() {
                self.coordinator_issue_write(now_ms, &key, next);
            }
            return;
        }
        c.state = flight.next;
        for a in flight.after {
            self.coordinator_after_write(now_ms, a);
        }
        self.coordinator_start_write(now_ms);
    }

    /// With remember-entities: records a newly allocated shard in the durable set of
    /// remembered shards (so a whole-cluster restart starts it again).
    pub(super) fn coordinator_remember_shard(&mut self, now_ms: u64, shard: &ShardId) {
        if !self.settings.remember_entities {
            return;
        }
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if !c.remembered_shards.insert(shard.clone()) {
            return;
        }
        let Some(key) = self.all_shards_key() else {
            return;
        };
        let id = self.next_request_id();
        self.ddata_requests.insert(id, DdataPurpose::AllShardsWrite);
        let s = shard.clone();
        let consistency = self.write_consistency();
        self.replicator.update(
            now_ms,
            RequestId(id),
            &key,
            consistency,
            GSet::new,
            move |g| g.add(s),
        );
    }
}
