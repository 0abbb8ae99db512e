//! The `ShardCoordinator` part of [`ClusterSharding`]: active on the node where the
//! coordinator singleton runs. It registers regions, answers `GetShardHome` (allocating
//! unknown shards with the [`super::ShardAllocationStrategy`]), watches regions and
//! re-allocates the shards of removed ones after `removal-margin`, and persists every
//! change of its [`CoordinatorState`] in Distributed Data before it acts on it (Akka's
//! `DDataShardCoordinator`; research notes §1.2–1.3).
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
//! Reading and writing the state are in [`super::coordinator_persistence`]; rebalancing and
//! the coordinator's side of handoffs in [`super::rebalance`].

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::member::MemberStatus;

use super::allocation::RegionEntry;
use super::coordinator_persistence::{AfterWrite, InFlight};
use super::coordinator_state::{CoordinatorEvent, CoordinatorState};
use super::{
    ClusterSharding, ShardId, ShardingBody, ShardingSettings, ShardingTimer, SHARD_HOMES_BATCH,
};

/// Where a handoff worker is (one per shard moving).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum WorkerPhase {
    /// `HostShard { handoff_from }` sent to the new home; waiting for `ShardStarted`.
    WaitingStarted,
    /// `HandOff` sent to the old home; waiting for `ShardStopped`.
    WaitingStopped,
    /// Writing the new home (or the deallocation).
    Writing,
}

/// The coordinator's side of one handoff (Akka's `RebalanceWorker`).
#[derive(Clone, Debug)]
pub(super) struct Worker {
    pub(super) from: UniqueAddress,
    pub(super) to: Option<UniqueAddress>,
    pub(super) phase: WorkerPhase,
    /// When a phase that waits gives up (`WaitingStarted`) or asks again for good measure,
    /// ms.
    pub(super) deadline_ms: u64,
    /// When the phase's request is sent again (messages between live nodes are not lost
    /// on TCP, but a connection can drop), ms.
    pub(super) resend_ms: u64,
    /// Started by a graceful shutdown (not counted as a rebalance).
    pub(super) graceful: bool,
    /// Regions that asked for the shard's home meanwhile.
    pub(super) deferred: BTreeSet<UniqueAddress>,
}

/// The coordinator's state.
#[derive(Debug)]
pub(super) struct Coordinator {
    pub(super) state_loaded: bool,
    pub(super) all_shards_loaded: bool,
    pub(super) active: bool,
    pub(super) state: CoordinatorState,
    pub(super) writing: Option<InFlight>,
    pub(super) queued: Vec<CoordinatorEvent>,
    pub(super) queued_after: Vec<AfterWrite>,
    /// Shards whose allocation is being written → (their region, the regions that asked).
    pub(super) allocating: BTreeMap<ShardId, (UniqueAddress, Vec<UniqueAddress>)>,
    /// Registrations being written.
    pub(super) registering: BTreeSet<UniqueAddress>,
    /// `HostShard` not yet answered: shard → (region, when to send again).
    pub(super) unacked_host: BTreeMap<ShardId, (UniqueAddress, u64)>,
    pub(super) workers: BTreeMap<ShardId, Worker>,
    /// Regions handing everything over.
    pub(super) graceful: BTreeSet<UniqueAddress>,
    /// Regions removed, within their removal margin (or being written as terminated).
    pub(super) terminating: BTreeSet<UniqueAddress>,
    /// With remember-entities: every shard ever allocated.
    pub(super) remembered_shards: BTreeSet<ShardId>,
    /// A rebalance round moved shards and has not finished.
    pub(super) round_active: bool,
}

impl Coordinator {
    pub(super) fn new(settings: &ShardingSettings) -> Self {
        Coordinator {
            state_loaded: false,
            all_shards_loaded: !settings.remember_entities,
            active: false,
            state: CoordinatorState::new(settings.remember_entities),
            writing: None,
            queued: Vec::new(),
            queued_after: Vec::new(),
            allocating: BTreeMap::new(),
            registering: BTreeSet::new(),
            unacked_host: BTreeMap::new(),
            workers: BTreeMap::new(),
            graceful: BTreeSet::new(),
            terminating: BTreeSet::new(),
            remembered_shards: BTreeSet::new(),
            round_active: false,
        }
    }

    /// Loaded and serving.
    pub(super) fn is_active(&self) -> bool {
        self.active
    }

    /// The persisted state.
    pub(super) fn state(&self) -> &CoordinatorState {
        &self.state
    }
}

impl ClusterSharding {
    pub(super) fn coordinator_maybe_activate(&mut self, now_ms: u64) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if c.active || !c.state_loaded || !c.all_shards_loaded {
            return;
        }
        c.active = true;
        tracing::info!(
            type_name = %self.settings.type_name,
            regions = c.state.regions().len(),
            shards = c.state.shard_count(),
            "shard coordinator active"
        );
        let registered: Vec<UniqueAddress> = c
            .state
            .regions()
            .keys()
            .chain(c.state.proxies().iter())
            .cloned()
            .collect();
        let homes: Vec<(ShardId, UniqueAddress)> = c
            .state
            .shards()
            .map(|(s, r)| (s.clone(), r.clone()))
            .collect();
        for r in registered {
            if self.is_member(&r) {
                self.send(&r, ShardingBody::RegisterAck);
            } else {
                self.coordinator_schedule_termination(now_ms, r);
            }
        }
        // Confirm every allocation; a region handing a shard off answers `ShardStopped`.
        let resend = now_ms + self.settings.shard_start_timeout_ms;
        for (shard, region) in homes {
            if self.is_member(&region) {
                self.send(
                    &region,
                    ShardingBody::HostShard {
                        shard: shard.clone(),
                        handoff_from: None,
                    },
                );
                if let Some(c) = self.coordinator.as_mut() {
                    c.unacked_host.insert(shard, (region, resend));
                }
            }
        }
        self.coordinator_allocate_remembered(now_ms);
        self.out.timers.set(
            ShardingTimer::Rebalance,
            now_ms + self.settings.rebalance_interval_ms,
        );
    }

    /// A message for the coordinator.
    pub(super) fn coordinator_message(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        body: ShardingBody,
    ) {
        if !self.coordinator.as_ref().is_some_and(|c| c.active) {
            // Not running here (or still reading its state): the regions retry.
            return;
        }
        match body {
            ShardingBody::Register { proxy } => self.coordinator_register(now_ms, from, proxy),
            ShardingBody::GetShardHome { shard } => {
                if shard.len() <= super::MAX_SHARD_ID_BYTES {
                    self.coordinator_get_shard_home(now_ms, from, shard)
                }
            }
            ShardingBody::ShardStarted { shard } => {
                self.coordinator_shard_started(now_ms, from, &shard)
            }
            ShardingBody::ShardStopped { shard, handed_to } => {
                self.coordinator_shard_stopped(now_ms, from, shard, handed_to)
            }
            ShardingBody::GracefulShutdownReq => self.coordinator_graceful_shutdown(now_ms, from),
            ShardingBody::RegionStopped => self.coordinator_region_stopped(now_ms, from),
            _ => self.stats.invalid_messages += 1,
        }
    }

    fn coordinator_register(&mut self, now_ms: u64, from: &UniqueAddress, proxy: bool) {
        let ok_status = self.view.member(from).is_some_and(|m| {
            matches!(
                m.status,
                MemberStatus::Up
                    | MemberStatus::Leaving
                    | MemberStatus::Exiting
                    | MemberStatus::PreparingForShutdown
                    | MemberStatus::ReadyForShutdown
            )
        });
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if !ok_status || c.terminating.contains(from) {
            return;
        }
        let registered = if proxy {
            c.state.proxies().contains(from)
        } else {
            c.state.regions().contains_key(from)
        };
        if registered {
            self.coordinator_ack_registration(from);
        } else if c.registering.insert(from.clone()) {
            let event = if proxy {
                CoordinatorEvent::RegionProxyRegistered(from.clone())
            } else {
                CoordinatorEvent::RegionRegistered(from.clone())
            };
            self.coordinator_write(now_ms, vec![event], AfterWrite::Ack(from.clone()));
        }
    }

    /// `RegisterAck` and the known homes (left out: shards being handed off).
    fn coordinator_ack_registration(&mut self, to: &UniqueAddress) {
        let Some(c) = self.coordinator.as_ref() else {
            return;
        };
        let homes: Vec<(ShardId, UniqueAddress)> = c
            .state
            .shards()
            .filter(|(s, _)| !c.workers.contains_key(*s))
            .map(|(s, r)| (s.clone(), r.clone()))
            .collect();
        self.send(to, ShardingBody::RegisterAck);
        for batch in homes.chunks(SHARD_HOMES_BATCH) {
            self.send(
                to,
                ShardingBody::ShardHomes {
                    homes: batch.to_vec(),
                },
            );
        }
    }

    /// `GetShardHome`: the known home, or a new allocation (written first).
    pub(super) fn coordinator_get_shard_home(
        &mut self,
        now_ms: u64,
        requester: &UniqueAddress,
        shard: ShardId,
    ) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if let Some(w) = c.workers.get_mut(&shard) {
            w.deferred.insert(requester.clone());
            return;
        }
        if let Some(home) = c.state.home(&shard) {
            if !c.terminating.contains(home) {
                let home = home.clone();
                self.send(
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
        if let Some((_, waiting)) = c.allocating.get_mut(&shard) {
            if !waiting.contains(requester) {
                waiting.push(requester.clone());
            }
            return;
        }
        if c.state.shard_count() + c.allocating.len() >= super::MAX_SHARDS {
            self.stats.invalid_messages += 1;
            return;
        }
        let entries = self.coordinator_region_entries(&BTreeSet::new());
        if entries.is_empty() {
            return;
        }
        let Some(region) = self.strategy.allocate_shard(requester, &shard, &entries) else {
            return;
        };
        if !entries.iter().any(|e| e.region == region) {
            self.stats.state_errors += 1;
            return;
        }
        if let Some(c) = self.coordinator.as_mut() {
            c.allocating
                .insert(shard.clone(), (region.clone(), vec![requester.clone()]));
        }
        self.stats.shards_allocated += 1;
        self.coordinator_remember_shard(now_ms, &shard);
        self.coordinator_write(
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
    pub(super) fn coordinator_region_entries(
        &self,
        exclude: &BTreeSet<UniqueAddress>,
    ) -> Vec<RegionEntry> {
        let Some(c) = self.coordinator.as_ref() else {
            return Vec::new();
        };
        let role = self.settings.role.as_deref();
        let mut entries: Vec<RegionEntry> = c
            .state
            .regions()
            .iter()
            .filter(|(r, _)| {
                !exclude.contains(*r) && !c.graceful.contains(*r) && !c.terminating.contains(*r)
            })
            .filter_map(|(r, shards)| {
                let m = self.view.member(r)?;
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
        for (shard, (region, _)) in &c.allocating {
            if let Some(e) = entries.iter_mut().find(|e| e.region == *region) {
                e.shards.push(shard.clone());
            }
        }
        for (shard, w) in &c.workers {
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

    pub(super) fn coordinator_after_write(&mut self, now_ms: u64, after: AfterWrite) {
        match after {
            AfterWrite::Ack(r) => {
                if let Some(c) = self.coordinator.as_mut() {
                    c.registering.remove(&r);
                }
                self.coordinator_ack_registration(&r);
            }
            AfterWrite::Allocated(shard) => {
                let Some(c) = self.coordinator.as_mut() else {
                    return;
                };
                let requesters = c
                    .allocating
                    .remove(&shard)
                    .map(|(_, r)| r)
                    .unwrap_or_default();
                let Some(home) = c.state.home(&shard).cloned() else {
                    return;
                };
                c.unacked_host.insert(
                    shard.clone(),
                    (home.clone(), now_ms + self.settings.shard_start_timeout_ms),
                );
                self.send(
                    &home,
                    ShardingBody::HostShard {
                        shard: shard.clone(),
                        handoff_from: None,
                    },
                );
                for r in requesters {
                    {
                        self.send(
                            &r,
                            ShardingBody::ShardHome {
                                shard: shard.clone(),
                                home: home.clone(),
                                previous: None,
                            },
                        );
                    }
                }
            }
            AfterWrite::Flipped(shard) => self.coordinator_handoff_flipped(now_ms, shard),
            AfterWrite::Deallocated(shard) => self.coordinator_handoff_deallocated(now_ms, shard),
            AfterWrite::Terminated(r) => self.coordinator_after_terminated(now_ms, r),
        }
    }

    fn coordinator_shard_started(&mut self, now_ms: u64, from: &UniqueAddress, shard: &ShardId) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if c.unacked_host.get(shard).is_some_and(|(r, _)| r == from) {
            c.unacked_host.remove(shard);
        }
        self.coordinator_handoff_started(now_ms, from, shard);
    }

    /// A region's node left the membership: its shards are re-allocated after the
    /// removal margin.
    pub(super) fn coordinator_membership(&mut self, now_ms: u64) {
        let Some(c) = self.coordinator.as_ref() else {
            return;
        };
        if !c.active {
            return;
        }
        let gone: Vec<UniqueAddress> = c
            .state
            .regions()
            .keys()
            .chain(c.state.proxies().iter())
            .filter(|r| !self.view.members.contains_key(*r) && !c.terminating.contains(*r))
            .cloned()
            .collect();
        for r in gone {
            self.coordinator_schedule_termination(now_ms, r);
        }
        self.coordinator_handoff_membership(now_ms);
    }

    fn coordinator_schedule_termination(&mut self, now_ms: u64, region: UniqueAddress) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if !c.terminating.insert(region.clone()) {
            return;
        }
        let margin = if c.state.proxies().contains(&region) {
            0
        } else {
            self.settings.removal_margin_ms
        };
        tracing::info!(type_name = %self.settings.type_name, region = %region, margin_ms = margin, "shard region removed; its shards are re-allocated after the removal margin");
        self.out
            .timers
            .set(ShardingTimer::RegionTerminated(region), now_ms + margin);
    }

    /// The removal margin of `region` passed: write it terminated.
    pub(super) fn coordinator_region_terminated(&mut self, now_ms: u64, region: UniqueAddress) {
        let Some(c) = self.coordinator.as_ref() else {
            return;
        };
        let event = if c.state.regions().contains_key(&region) {
            CoordinatorEvent::RegionTerminated(region.clone())
        } else if c.state.proxies().contains(&region) {
            CoordinatorEvent::RegionProxyTerminated(region.clone())
        } else {
            return;
        };
        self.coordinator_write(now_ms, vec![event], AfterWrite::Terminated(region));
    }

    fn coordinator_region_stopped(&mut self, now_ms: u64, from: &UniqueAddress) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if !c.state.is_registered(from) || !c.terminating.insert(from.clone()) {
            return;
        }
        self.coordinator_region_terminated(now_ms, from.clone());
    }

    fn coordinator_after_terminated(&mut self, now_ms: u64, region: UniqueAddress) {
        if let Some(c) = self.coordinator.as_mut() {
            c.terminating.remove(&region);
            c.graceful.remove(&region);
        }
        self.coordinator_handoff_region_gone(now_ms, &region);
        self.coordinator_allocate_remembered(now_ms);
    }

    /// With remember-entities: every shard remembered but without a home is allocated now
    /// (its region starts its remembered entities).
    fn coordinator_allocate_remembered(&mut self, now_ms: u64) {
        if !self.settings.remember_entities {
            return;
        }
        let Some(c) = self.coordinator.as_ref() else {
            return;
        };
        let missing: Vec<ShardId> = c
            .state
            .unallocated()
            .iter()
            .chain(c.remembered_shards.iter())
            .filter(|s| c.state.home(s).is_none() && !c.allocating.contains_key(*s))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let me = self.self_node.clone();
        for shard in missing {
            self.coordinator_get_shard_home(now_ms, &me, shard);
        }
    }

    /// Once a second: `HostShard` re-sends, handoff timeouts.
    pub(super) fn coordinator_housekeeping(&mut self, now_ms: u64) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if !c.active {
            return;
        }
        let due: Vec<(ShardId, UniqueAddress)> = c
            .unacked_host
            .iter()
            .filter(|(_, (_, at))| *at <= now_ms)
            .map(|(s, (r, _))| (s.clone(), r.clone()))
            .collect();
        let next = now_ms + self.settings.shard_start_timeout_ms;
        for (shard, region) in due {
            let still = self
                .coordinator
                .as_ref()
                .is_some_and(|c| c.state.home(&shard) == Some(&region));
            if still && self.is_member(&region) {
                if let Some(c) = self.coordinator.as_mut() {
                    c.unacked_host.insert(shard.clone(), (region.clone(), next));
                }
                self.send(
                    &region,
                    ShardingBody::HostShard {
                        shard,
                        handoff_from: None,
                    },
                );
            } else if let Some(c) = self.coordinator.as_mut() {
                c.unacked_host.remove(&shard);
            }
        }
        self.coordinator_handoff_timeouts(now_ms);
    }
}
