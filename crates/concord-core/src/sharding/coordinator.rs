//! The `ShardCoordinator` (Akka's `ShardCoordinator`, `DDataShardCoordinator` mode; Pekko
//! `ShardCoordinator.scala`; spec `cluster-sharding-concepts.md`): active on the node where
//! the coordinator singleton runs. It registers regions, answers `GetShardHome`
//! (allocating unknown shards with its [`ShardAllocationStrategy`]), watches regions and
//! re-allocates the shards of removed ones after `removal-margin`, and persists every
//! change of its [`CoordinatorState`] in Distributed Data before it acts on it (research
//! notes §1.2–1.3).
//!
//! - **Start / fail-over**: read the state with `ReadMajorityPlus` (retried until it
//!   succeeds; not found = empty), and with remember-entities the set of remembered shards;
//!   then regions whose node is gone count as terminated, every registered region is told
//!   `RegisterAck` (so it re-registers at once), every allocation is confirmed with
//!   `HostShard` (a region that was handing a shard off answers `ShardStopped` and the
//!   handoff is finished), and remembered shards are allocated. Known homes keep serving
//!   in the regions meanwhile; new shards wait in the regions' buffers.
//! - **Writes**: one at a time, `WriteMajorityPlus`; changes that arrive meanwhile go into
//!   the next write together. A write that times out is written again (Akka retries
//!   forever too). Answers (`ShardHome`, `RegisterAck`, `BeginHandOff`) go out only after
//!   the write that justifies them succeeded.
//!
//! [`Coordinator`] owns its state, its allocation strategy, its persistence
//! ([`super::coordinator_persistence::CoordinatorStore`]) and its rebalance workers; each
//! step borrows the rest of the machine through a [`CoordinatorContext`] and talks to the
//! regions — this node's too — only through messages. Rebalancing and the coordinator's
//! side of handoffs are in [`super::rebalance`], registration and the watch of regions in
//! [`super::coordinator_regions`].

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::ddata::replicator::GetResult;
use crate::ddata::UpdateResult;
use crate::member::MemberStatus;

use super::allocation::{RegionEntry, ShardAllocationStrategy};
use super::coordinator_context::CoordinatorContext;
use super::coordinator_persistence::{AfterWrite, CoordinatorStore};
use super::coordinator_state::{CoordinatorEvent, CoordinatorState};
use super::ids::{ShardId, MAX_SHARDS, MAX_SHARD_ID_BYTES};
use super::message::ShardingBody;
use super::outbox::ShardingOutputs;
use super::rebalance_worker::Worker;
use super::timer::ShardingTimer;

/// One incarnation of the coordinator singleton on this node (Akka's `ShardCoordinator`).
pub(super) struct Coordinator {
    /// The allocation strategy (kept by the machine between incarnations, as Akka's
    /// `ShardCoordinatorSupervisor` keeps the one it was given).
    pub(super) strategy: Box<dyn ShardAllocationStrategy>,
    /// Loaded and serving.
    pub(super) active: bool,
    /// The persisted state (as last written, or read on start).
    pub(super) state: CoordinatorState,
    /// Reads on start, the write in flight and what is queued behind it.
    pub(super) store: CoordinatorStore,
    /// Shards whose allocation is being written → (their region, the regions that asked).
    pub(super) allocating: BTreeMap<ShardId, (UniqueAddress, Vec<UniqueAddress>)>,
    /// Registrations being written.
    pub(super) registering: BTreeSet<UniqueAddress>,
    /// `HostShard` not yet answered: shard → (region, when to send again, ms).
    pub(super) unacked_host: BTreeMap<ShardId, (UniqueAddress, u64)>,
    /// Rebalance workers, by the shard they move.
    pub(super) workers: BTreeMap<ShardId, Worker>,
    /// Regions handing everything over.
    pub(super) graceful: BTreeSet<UniqueAddress>,
    /// Regions removed, within their removal margin (or being written as terminated).
    pub(super) terminating: BTreeSet<UniqueAddress>,
    /// A rebalance round moved shards and has not finished.
    pub(super) round_active: bool,
}

impl Coordinator {
    /// The singleton started the coordinator here: a fresh incarnation with `strategy`,
    /// which starts reading its state.
    pub(super) fn start(
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        strategy: Box<dyn ShardAllocationStrategy>,
    ) -> Self {
        let mut c = Coordinator {
            strategy,
            active: false,
            state: CoordinatorState::new(ctx.settings.remember_entities),
            store: CoordinatorStore::new(ctx.settings),
            allocating: BTreeMap::new(),
            registering: BTreeSet::new(),
            unacked_host: BTreeMap::new(),
            workers: BTreeMap::new(),
            graceful: BTreeSet::new(),
            terminating: BTreeSet::new(),
            round_active: false,
        };
        c.store.start(ctx, now_ms);
        c
    }

    /// The singleton stopped the coordinator: its strategy goes back to the machine.
    pub(super) fn into_strategy(self) -> Box<dyn ShardAllocationStrategy> {
        self.strategy
    }

    /// Cancels the coordinator's timers (it stopped, or never ran here).
    pub(super) fn cancel_timers(out: &mut ShardingOutputs) {
        out.timers.cancel(&ShardingTimer::Rebalance);
        out.timers
            .retain(|t| !matches!(t, ShardingTimer::RegionTerminated(_)));
    }

    /// Loaded and serving.
    pub(super) fn is_active(&self) -> bool {
        self.active
    }

    /// The persisted state.
    pub(super) fn state(&self) -> &CoordinatorState {
        &self.state
    }

    /// The replicator answered the read of the state.
    pub(super) fn state_read(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        result: GetResult,
    ) {
        if let Some(state) = self.store.state_read(ctx, now_ms, result) {
            self.state = state;
            self.maybe_activate(ctx, now_ms);
        }
    }

    /// The replicator answered the read of the remembered shards.
    pub(super) fn all_shards_read(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        result: GetResult,
    ) {
        if self.store.all_shards_read(ctx, now_ms, result) {
            self.maybe_activate(ctx, now_ms);
        }
    }

    /// The replicator answered the write in flight: on success the coordinator takes the
    /// state written and acts on it, then the next write starts.
    pub(super) fn written(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        result: UpdateResult,
    ) {
        let Some((state, after)) = self.store.written(ctx, now_ms, result) else {
            return;
        };
        self.state = state;
        for a in after {
            self.after_write(ctx, now_ms, a);
        }
        self.store.start_write(ctx, now_ms, &self.state);
    }

    /// Queues `events` for the next write, with what follows it.
    pub(super) fn write(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        events: Vec<CoordinatorEvent>,
        after: AfterWrite,
    ) {
        self.store.write(ctx, now_ms, &self.state, events, after);
    }

    /// Activates once the state (and the remembered shards) are read (Akka's
    /// `activate()` after `stateInitialized`).
    fn maybe_activate(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64) {
        if self.active || !self.store.is_loaded() {
            return;
        }
        self.active = true;
        tracing::info!(
            type_name = %ctx.settings.type_name,
            regions = self.state.regions().len(),
            shards = self.state.shard_count(),
            "shard coordinator active"
        );
        let registered: Vec<UniqueAddress> = self
            .state
            .regions()
            .keys()
            .chain(self.state.proxies().iter())
            .cloned()
            .collect();
        let homes: Vec<(ShardId, UniqueAddress)> = self
            .state
            .shards()
            .map(|(s, r)| (s.clone(), r.clone()))
            .collect();
        for r in registered {
            if ctx.is_member(&r) {
                ctx.send(&r, ShardingBody::RegisterAck);
            } else {
                self.schedule_termination(ctx, now_ms, r);
            }
        }
        // Confirm every allocation; a region handing a shard off answers `ShardStopped`.
        let resend = now_ms + ctx.settings.shard_start_timeout_ms;
        for (shard, region) in homes {
            if ctx.is_member(&region) {
                ctx.send(
                    &region,
                    ShardingBody::HostShard {
                        shard: shard.clone(),
                        handoff_from: None,
                    },
                );
                self.unacked_host.insert(shard, (region, resend));
            }
        }
        self.allocate_shard_homes_for_remember_entities(ctx, now_ms);
        ctx.out.timers.set(
            ShardingTimer::Rebalance,
            now_ms + ctx.settings.rebalance_interval_ms,
        );
    }

    /// A message for the coordinator (from a region or proxy, this node's included).
    pub(super) fn handle_message(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        body: ShardingBody,
    ) {
        if !self.active {
            // Still reading its state: the regions retry.
            return;
        }
        match body {
            ShardingBody::Register { proxy } => self.register(ctx, now_ms, from, proxy),
            ShardingBody::GetShardHome { shard } => {
                if shard.len() <= MAX_SHARD_ID_BYTES {
                    self.get_shard_home(ctx, now_ms, from, shard)
                }
            }
            ShardingBody::ShardStarted { shard } => self.shard_started(ctx, now_ms, from, &shard),
            ShardingBody::ShardStopped { shard, handed_to } => {
                self.shard_stopped(ctx, now_ms, from, shard, handed_to)
            }
            ShardingBody::GracefulShutdownReq => self.graceful_shutdown(ctx, now_ms, from),
            ShardingBody::RegionStopped => self.region_stopped(ctx, now_ms, from),
            _ => ctx.stats.invalid_messages += 1,
        }
    }

    /// `GetShardHome`: the known home, or a new allocation (written first).
    pub(super) fn get_shard_home(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        requester: &UniqueAddress,
        shard: ShardId,
    ) {
        if let Some(w) = self.workers.get_mut(&shard) {
            w.deferred.insert(requester.clone());
            return;
        }
        if let Some(home) = self.state.home(&shard) {
            if !self.terminating.contains(home) {
                let home = home.clone();
                ctx.send(
                    requester,
                    ShardingBody::ShardHome {
                        shard,
                        home,
                        previous: None,
                    },
                );
            }
            // A region being terminated: asked again after its shards are deallocated.
            return;
        }
        if let Some((_, waiting)) = self.allocating.get_mut(&shard) {
            if !waiting.contains(requester) {
                waiting.push(requester.clone());
            }
            return;
        }
        if self.state.shard_count() + self.allocating.len() >= MAX_SHARDS {
            ctx.stats.invalid_messages += 1;
            return;
        }
        let entries = self.region_entries(ctx, &BTreeSet::new());
        if entries.is_empty() {
            return;
        }
        let Some(region) = self.strategy.allocate_shard(requester, &shard, &entries) else {
            return;
        };
        if !entries.iter().any(|e| e.region == region) {
            ctx.stats.state_errors += 1;
            return;
        }
        self.allocating
            .insert(shard.clone(), (region.clone(), vec![requester.clone()]));
        ctx.stats.shards_allocated += 1;
        self.store.remember_shard(ctx, now_ms, &shard);
        self.write(
            ctx,
            now_ms,
            vec![CoordinatorEvent::ShardHomeAllocated {
                shard: shard.clone(),
                region,
            }],
            AfterWrite::Allocated(shard),
        );
    }

    /// The regions a shard may be allocated to: registered, member with the role, not
    /// handing everything over, not being terminated, not in `exclude`; with their shard
    /// counts as they will be once the running handoffs complete.
    pub(super) fn region_entries(
        &self,
        ctx: &CoordinatorContext<'_>,
        exclude: &BTreeSet<UniqueAddress>,
    ) -> Vec<RegionEntry> {
        let role = ctx.settings.role.as_deref();
        let mut entries: Vec<RegionEntry> = self
            .state
            .regions()
            .iter()
            .filter(|(r, _)| {
                !exclude.contains(*r)
                    && !self.graceful.contains(*r)
                    && !self.terminating.contains(*r)
            })
            .filter_map(|(r, shards)| {
                let m = ctx.view.member(r)?;
                if !matches!(
                    m.status,
                    MemberStatus::Up
                        | MemberStatus::Leaving
                        | MemberStatus::PreparingForShutdown
                        | MemberStatus::ReadyForShutdown
                ) || !role.is_none_or(|x| m.has_role(x))
                {
                    return None;
                }
                Some(RegionEntry {
                    region: r.clone(),
                    shards: shards.clone(),
                    app_version: m.app_version.clone(),
                    is_up: m.status == MemberStatus::Up,
                })
            })
            .collect();
        // Shards being allocated, and shards moving, count at their destination already.
        for (shard, (region, _)) in &self.allocating {
            if let Some(e) = entries.iter_mut().find(|e| e.region == *region) {
                e.shards.push(shard.clone());
            }
        }
        for (shard, w) in &self.workers {
            if let Some(to) = &w.to {
                if let Some(e) = entries.iter_mut().find(|e| e.region == *to) {
                    if !e.shards.contains(shard) {
                        e.shards.push(shard.clone());
                    }
                }
            }
            if let Some(e) = entries.iter_mut().find(|e| e.region == w.from) {
                e.shards.retain(|s| s != shard);
            }
        }
        entries
    }

    /// A write succeeded: what it justified.
    fn after_write(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64, after: AfterWrite) {
        match after {
            AfterWrite::Ack(r) => {
                self.registering.remove(&r);
                self.ack_registration(ctx, &r);
            }
            AfterWrite::Allocated(shard) => {
                let requesters = self
                    .allocating
                    .remove(&shard)
                    .map(|(_, r)| r)
                    .unwrap_or_default();
                let Some(home) = self.state.home(&shard).cloned() else {
                    return;
                };
                self.unacked_host.insert(
                    shard.clone(),
                    (home.clone(), now_ms + ctx.settings.shard_start_timeout_ms),
                );
                ctx.send(
                    &home,
                    ShardingBody::HostShard {
                        shard: shard.clone(),
                        handoff_from: None,
                    },
                );
                for r in requesters {
                    ctx.send(
                        &r,
                        ShardingBody::ShardHome {
                            shard: shard.clone(),
                            home: home.clone(),
                            previous: None,
                        },
                    );
                }
            }
            AfterWrite::Flipped(shard) => self.handoff_flipped(ctx, now_ms, shard),
            AfterWrite::Deallocated(shard) => self.handoff_deallocated(ctx, now_ms, shard),
            AfterWrite::Terminated(r) => self.after_terminated(ctx, now_ms, r),
        }
    }

    /// `ShardStarted`: the region hosts the shard (an allocation or a handoff's new home).
    fn shard_started(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        shard: &ShardId,
    ) {
        if self.unacked_host.get(shard).is_some_and(|(r, _)| r == from) {
            self.unacked_host.remove(shard);
        }
        self.handoff_started(ctx, now_ms, from, shard);
    }

    /// With remember-entities: every shard remembered but without a home is allocated now
    /// (its region starts its remembered entities).
    pub(super) fn allocate_shard_homes_for_remember_entities(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
    ) {
        if !ctx.settings.remember_entities {
            return;
        }
        let missing: Vec<ShardId> = self
            .state
            .unallocated()
            .iter()
            .chain(self.store.remembered_shards().iter())
            .filter(|s| self.state.home(s).is_none() && !self.allocating.contains_key(*s))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let me = ctx.self_node.clone();
        for shard in missing {
            self.get_shard_home(ctx, now_ms, &me, shard);
        }
    }

    /// Once a second: `HostShard` re-sends (Akka's `ResendShardHost`), handoff timeouts.
    pub(super) fn housekeeping(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64) {
        if !self.active {
            return;
        }
        let due: Vec<(ShardId, UniqueAddress)> = self
            .unacked_host
            .iter()
            .filter(|(_, (_, at))| *at <= now_ms)
            .map(|(s, (r, _))| (s.clone(), r.clone()))
            .collect();
        let next = now_ms + ctx.settings.shard_start_timeout_ms;
        for (shard, region) in due {
            let still = self.state.home(&shard) == Some(&region);
            if still && ctx.is_member(&region) {
                self.unacked_host
                    .insert(shard.clone(), (region.clone(), next));
                ctx.send(
                    &region,
                    ShardingBody::HostShard {
                        shard,
                        handoff_from: None,
                    },
                );
            } else {
                self.unacked_host.remove(&shard);
            }
        }
        self.handoff_timeouts(ctx, now_ms);
    }
}
