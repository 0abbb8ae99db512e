//! How the `ShardCoordinator` keeps its state in Distributed Data (Akka's
//! `DDataShardCoordinator`, with its `RememberEntitiesCoordinatorStore` for the remembered
//! shards; research notes §1.2–1.3): the state is read with `ReadMajorityPlus` on start and
//! fail-over (retried until it succeeds; not found = empty), and every change is written
//! with `WriteMajorityPlus` before the coordinator acts on it — one write at a time,
//! changes that arrive meanwhile going into the next write together, a write that is not
//! confirmed written again (Akka retries forever too). With remember-entities, the set of
//! every shard ever allocated is a `GSet` beside it.
//!
//! [`CoordinatorStore`] owns the reads and writes in flight; it hands what it read and
//! what a confirmed write justifies back to the coordinator, which acts on it.

use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::ddata::replicator::{GetResult, Key, ReadConsistency, RequestId, WriteConsistency};
use crate::ddata::{GSet, LWWRegister, UpdateResult};

use super::coordinator_context::CoordinatorContext;
use super::coordinator_state::{CoordinatorEvent, CoordinatorState};
use super::ddata_requests::DdataPurpose;
use super::ids::ShardId;
use super::settings::ShardingSettings;

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
struct InFlight {
    next: CoordinatorState,
    after: Vec<AfterWrite>,
}

/// The coordinator's persistence: its reads on start, the write in flight and the changes
/// queued behind it, and (with remember-entities) the remembered shards.
#[derive(Debug)]
pub(super) struct CoordinatorStore {
    state_loaded: bool,
    all_shards_loaded: bool,
    writing: Option<InFlight>,
    queued: Vec<CoordinatorEvent>,
    queued_after: Vec<AfterWrite>,
    /// With remember-entities: every shard ever allocated.
    remembered_shards: BTreeSet<ShardId>,
}

/// The Distributed Data key of the coordinator's state (Akka's name for it).
fn state_key(settings: &ShardingSettings) -> Option<Key<LWWRegister<CoordinatorState>>> {
    Key::new(format!("{}CoordinatorState", settings.type_name)).ok()
}

/// The key of the remembered shards (with remember-entities).
fn all_shards_key(settings: &ShardingSettings) -> Option<Key<GSet<String>>> {
    Key::new(format!("shard-{}-all", settings.type_name)).ok()
}

/// Reads `key` with `ReadMajorityPlus`, the answer routed by `purpose`.
fn read(ctx: &mut CoordinatorContext<'_>, now_ms: u64, key: &str, purpose: DdataPurpose) {
    let id = ctx.ddata.open(purpose);
    let consistency = ReadConsistency::MajorityPlus {
        additional: ctx.settings.coordinator_read_majority_plus,
        timeout_ms: ctx.settings.waiting_for_state_timeout_ms,
        min_cap: ctx.settings.majority_min_cap,
    };
    ctx.replicator.get(now_ms, RequestId(id), key, consistency);
}

/// `WriteMajorityPlus` with the coordinator's settings.
fn write_consistency(settings: &ShardingSettings) -> WriteConsistency {
    WriteConsistency::MajorityPlus {
        additional: settings.coordinator_write_majority_plus,
        timeout_ms: settings.updating_state_timeout_ms,
        min_cap: settings.majority_min_cap,
    }
}

/// Sends `next` to the replicator (the first write, or the same state again).
fn issue_write(
    ctx: &mut CoordinatorContext<'_>,
    now_ms: u64,
    key: &Key<LWWRegister<CoordinatorState>>,
    next: CoordinatorState,
) {
    let id = ctx.ddata.open(DdataPurpose::CoordinatorWrite);
    let me = ctx.replicator.replica();
    let ts = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let initial = next.clone();
    let consistency = write_consistency(ctx.settings);
    ctx.replicator.update(
        now_ms,
        RequestId(id),
        key,
        consistency,
        move || LWWRegister::new(me, initial, ts),
        move |r| r.set(me, next, ts),
    );
}

impl CoordinatorStore {
    /// Nothing read yet (the remembered shards count as read without remember-entities).
    pub(super) fn new(settings: &ShardingSettings) -> Self {
        CoordinatorStore {
            state_loaded: false,
            all_shards_loaded: !settings.remember_entities,
            writing: None,
            queued: Vec::new(),
            queued_after: Vec::new(),
            remembered_shards: BTreeSet::new(),
        }
    }

    /// The state and (with remember-entities) the remembered shards have been read.
    pub(super) fn is_loaded(&self) -> bool {
        self.state_loaded && self.all_shards_loaded
    }

    /// With remember-entities: every shard ever allocated (as read, plus those since).
    pub(super) fn remembered_shards(&self) -> &BTreeSet<ShardId> {
        &self.remembered_shards
    }

    /// The singleton started the coordinator here: read the state.
    pub(super) fn start(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64) {
        if let Some(k) = state_key(ctx.settings) {
            let id = k.id().to_string();
            read(ctx, now_ms, &id, DdataPurpose::CoordinatorLoad);
        }
        if ctx.settings.remember_entities {
            if let Some(k) = all_shards_key(ctx.settings) {
                let id = k.id().to_string();
                read(ctx, now_ms, &id, DdataPurpose::AllShardsLoad);
            }
        }
    }

    /// The state was read (or not): the state read (empty if there was none), or None if
    /// it is being read again or did not decode.
    pub(super) fn state_read(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        result: GetResult,
    ) -> Option<CoordinatorState> {
        let state = match result {
            GetResult::Success(v) => {
                let Some(reg) = v.as_any().downcast_ref::<LWWRegister<CoordinatorState>>() else {
                    ctx.stats.state_errors += 1;
                    return None;
                };
                let mut s = reg.value().clone();
                s.rebuild_index();
                s
            }
            GetResult::NotFound | GetResult::Deleted => {
                CoordinatorState::new(ctx.settings.remember_entities)
            }
            GetResult::Failure(reason) => {
                tracing::debug!(type_name = %ctx.settings.type_name, %reason, "coordinator state not read yet; retrying");
                if let Some(k) = state_key(ctx.settings) {
                    let id = k.id().to_string();
                    read(ctx, now_ms, &id, DdataPurpose::CoordinatorLoad);
                }
                return None;
            }
        };
        self.state_loaded = true;
        Some(state)
    }

    /// The remembered shards were read (or not); true once they are.
    pub(super) fn all_shards_read(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        result: GetResult,
    ) -> bool {
        match result {
            GetResult::Success(v) => {
                if let Some(set) = v.as_any().downcast_ref::<GSet<String>>() {
                    self.remembered_shards = set.elements().cloned().collect();
                }
            }
            GetResult::NotFound | GetResult::Deleted => {}
            GetResult::Failure(_) => {
                if let Some(k) = all_shards_key(ctx.settings) {
                    let id = k.id().to_string();
                    read(ctx, now_ms, &id, DdataPurpose::AllShardsLoad);
                }
                return false;
            }
        }
        self.all_shards_loaded = true;
        true
    }

    /// Queues `events` for the next write, with what follows it; starts it if no write is
    /// in flight (`state` is the coordinator's current state).
    pub(super) fn write(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        state: &CoordinatorState,
        events: Vec<CoordinatorEvent>,
        after: AfterWrite,
    ) {
        self.queued.extend(events);
        self.queued_after.push(after);
        if self.writing.is_none() {
            self.start_write(ctx, now_ms, state);
        }
    }

    /// Starts the next write if none is in flight: `state` with every queued event applied.
    pub(super) fn start_write(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        state: &CoordinatorState,
    ) {
        let Some(key) = state_key(ctx.settings) else {
            return;
        };
        if self.writing.is_some() || (self.queued.is_empty() && self.queued_after.is_empty()) {
            return;
        }
        let mut next = state.clone();
        for ev in std::mem::take(&mut self.queued) {
            if let Err(e) = next.apply(&ev) {
                tracing::debug!(type_name = %ctx.settings.type_name, error = %e, "coordinator event does not apply");
                ctx.stats.state_errors += 1;
            }
        }
        let after = std::mem::take(&mut self.queued_after);
        self.writing = Some(InFlight {
            next: next.clone(),
            after,
        });
        issue_write(ctx, now_ms, &key, next);
    }

    /// The write in flight finished: on success the state written and what follows it
    /// (the coordinator takes the state, acts, then calls [`Self::start_write`]); on
    /// failure the same state is written again and None returned.
    pub(super) fn written(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        result: UpdateResult,
    ) -> Option<(CoordinatorState, Vec<AfterWrite>)> {
        let flight = self.writing.take()?;
        if result != UpdateResult::Success {
            // Write the same state again (the local replica has it already).
            ctx.stats.write_timeouts += 1;
            tracing::debug!(type_name = %ctx.settings.type_name, result = ?result, "coordinator state write not confirmed; writing again");
            let next = flight.next.clone();
            self.writing = Some(flight);
            if let Some(key) = state_key(ctx.settings) {
                issue_write(ctx, now_ms, &key, next);
            }
            return None;
        }
        Some((flight.next, flight.after))
    }

    /// With remember-entities: records a newly allocated shard in the durable set of
    /// remembered shards (so a whole-cluster restart starts it again).
    pub(super) fn remember_shard(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        shard: &ShardId,
    ) {
        if !ctx.settings.remember_entities {
            return;
        }
        if !self.remembered_shards.insert(shard.clone()) {
            return;
        }
        let Some(key) = all_shards_key(ctx.settings) else {
            return;
        };
        let id = ctx.ddata.open(DdataPurpose::AllShardsWrite);
        let s = shard.clone();
        let consistency = write_consistency(ctx.settings);
        ctx.replicator.update(
            now_ms,
            RequestId(id),
            &key,
            consistency,
            GSet::new,
            move |g| g.add(s),
        );
    }
}
