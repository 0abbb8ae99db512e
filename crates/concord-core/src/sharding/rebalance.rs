//! The coordinator's side of handoffs — rebalance rounds, graceful shutdown of a region,
//! and one worker per moving shard (Akka's `RebalanceWorker`, reshaped for Concord's
//! order-preserving handoff; the regions' side is in [`super::handoff`]).
//!
//! A worker moving shard S from region A to region B:
//! 1. `HostShard { S, handoff_from: A }` to B; wait for `ShardStarted` (B holds S's
//!    messages). If B is gone or silent for `handoff-timeout`, the move is abandoned and S
//!    stays on A (which never stopped it).
//! 2. `HandOff { S, to: B }` to A; wait for `ShardStopped { handed_to: B }`. While A is a
//!    member the worker waits — re-sending `HandOff` every `handoff-timeout` — because S
//!    must not run anywhere else before A has stopped it (A force-stops entities after
//!    `handoff-timeout − 5 s`); if A is removed, S is deallocated by A's termination and
//!    B (which activates on its own when A is gone) gets S.
//! 3. Write S → B; then `BeginHandOff { S, from: A, to: B, regions }` to every region and
//!    proxy, and `ShardHome { S, B, previous: A }` to every region that asked meanwhile.
//!
//! Without a destination (the last region leaves) the worker only stops S on A
//! (`HandOff { to: None }`) and deallocates it.
//!
//! A **rebalance round** runs every `rebalance-interval` when no member is unreachable,
//! joining or weakly up and every region runs the same app-version (a rolling update
//! allocates new shards to the newest version and moves nothing): the strategy picks the
//! shards, each gets a worker with the least-loaded other region as destination. When a
//! round's workers are all done and the round moved something, the next round runs at
//! once instead of after the interval.

use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::member::MemberStatus;

use super::coordinator::{Worker, WorkerPhase};
use super::coordinator_persistence::AfterWrite;
use super::coordinator_state::CoordinatorEvent;
use super::{ClusterSharding, ShardId, ShardingBody, ShardingTimer};

impl ClusterSharding {
    /// True if a rebalance round may run now (see the module docs).
    fn coordinator_rebalance_allowed(&self) -> bool {
        let role = self.settings.role.as_deref();
        let relevant = || {
            self.view
                .members
                .values()
                .filter(move |m| role.is_none_or(|r| m.has_role(r)))
        };
        if !self.view.unreachable.is_empty() {
            return false;
        }
        if relevant().any(|m| matches!(m.status, MemberStatus::Joining | MemberStatus::WeaklyUp)) {
            return false;
        }
        let versions: BTreeSet<&str> = relevant()
            .filter(|m| m.status == MemberStatus::Up)
            .map(|m| m.app_version.as_str())
            .collect();
        versions.len() <= 1
    }

    /// `rebalance-interval` passed (or the last round finished): run a round.
    pub(super) fn coordinator_rebalance_tick(&mut self, now_ms: u64) {
        let Some(c) = self.coordinator.as_ref() else {
            return;
        };
        if !c.is_active() {
            return;
        }
        self.out.timers.set(
            ShardingTimer::Rebalance,
            now_ms + self.settings.rebalance_interval_ms,
        );
        if !self.coordinator_rebalance_allowed() {
            return;
        }
        let in_progress: BTreeSet<ShardId> = c
            .workers
            .iter()
            .filter(|(_, w)| !w.graceful)
            .map(|(s, _)| s.clone())
            .collect();
        let entries = self.coordinator_region_entries(&BTreeSet::new());
        if entries.len() < 2 {
            return;
        }
        let chosen = self.strategy.rebalance(&entries, &in_progress);
        let mut started = 0;
        for shard in chosen {
            let owner = self
                .coordinator
                .as_ref()
                .and_then(|c| c.state.home(&shard).cloned());
            let Some(owner) = owner else { continue };
            if self
                .coordinator
                .as_ref()
                .is_some_and(|c| c.workers.contains_key(&shard))
            {
                continue;
            }
            if self.coordinator_start_handoff(now_ms, shard, owner, false) {
                started += 1;
            }
        }
        if started > 0 {
            self.stats.rebalance_rounds += 1;
            tracing::info!(type_name = %self.settings.type_name, shards = started, "rebalance round");
            if let Some(c) = self.coordinator.as_mut() {
                c.round_active = true;
            }
        }
    }

    /// `GracefulShutdownReq` from `region`: hand all its shards over.
    pub(super) fn coordinator_graceful_shutdown(&mut self, now_ms: u64, region: &UniqueAddress) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        let Some(shards) = c.state.regions().get(region).cloned() else {
            return;
        };
        if c.graceful.insert(region.clone()) {
            tracing::info!(type_name = %self.settings.type_name, region = %region, shards = shards.len(), "region shutting down; handing its shards over");
        }
        for shard in shards {
            let moving = self
                .coordinator
                .as_ref()
                .is_some_and(|c| c.workers.contains_key(&shard));
            if !moving {
                self.coordinator_start_handoff(now_ms, shard, region.clone(), true);
            }
        }
    }

    /// Starts moving `shard` off `from`; false if it cannot start now.
    fn coordinator_start_handoff(
        &mut self,
        now_ms: u64,
        shard: ShardId,
        from: UniqueAddress,
        graceful: bool,
    ) -> bool {
        let exclude: BTreeSet<UniqueAddress> = [from.clone()].into();
        let entries = self.coordinator_region_entries(&exclude);
        let to = if entries.is_empty() {
            None
        } else {
            self.strategy
                .allocate_shard(&from, &shard, &entries)
                .filter(|t| entries.iter().any(|e| e.region == *t))
        };
        if to.is_none() && !graceful {
            return false;
        }
        let deadline_ms = now_ms + self.settings.handoff_timeout_ms;
        let resend_ms = now_ms + self.settings.retry_interval_ms;
        let phase = match &to {
            Some(t) => {
                self.send(
                    t,
                    ShardingBody::HostShard {
                        shard: shard.clone(),
                        handoff_from: Some(from.clone()),
                    },
                );
                WorkerPhase::WaitingStarted
            }
            None => {
                self.send(
                    &from,
                    ShardingBody::HandOff {
                        shard: shard.clone(),
                        to: None,
                    },
                );
                WorkerPhase::WaitingStopped
            }
        };
        if let Some(c) = self.coordinator.as_mut() {
            c.workers.insert(
                shard,
                Worker {
                    from,
                    to,
                    phase,
                    deadline_ms,
                    resend_ms,
                    graceful,
                    deferred: BTreeSet::new(),
                },
            );
        }
        true
    }

    /// `ShardStarted` from a region: the new home of a handoff is ready.
    pub(super) fn coordinator_handoff_started(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        shard: &ShardId,
    ) {
        let timeout = self.settings.handoff_timeout_ms;
        let Some(w) = self
            .coordinator
            .as_mut()
            .and_then(|c| c.workers.get_mut(shard))
        else {
            return;
        };
        if w.phase != WorkerPhase::WaitingStarted || w.to.as_ref() != Some(from) {
            return;
        }
        w.phase = WorkerPhase::WaitingStopped;
        w.deadline_ms = now_ms + timeout;
        w.resend_ms = now_ms + self.settings.retry_interval_ms;
        let (old, to) = (w.from.clone(), w.to.clone());
        self.send(
            &old,
            ShardingBody::HandOff {
                shard: shard.clone(),
                to,
            },
        );
    }

    /// `ShardStopped` from the old home.
    pub(super) fn coordinator_shard_stopped(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        shard: ShardId,
        handed_to: Option<UniqueAddress>,
    ) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        let owner = c.state.home(&shard).cloned();
        if !c.workers.contains_key(&shard) {
            // A handoff the previous coordinator started: finish it.
            if owner.as_ref() != Some(from) {
                return;
            }
            c.workers.insert(
                shard.clone(),
                Worker {
                    from: from.clone(),
                    to: handed_to.clone(),
                    phase: WorkerPhase::WaitingStopped,
                    deadline_ms: now_ms + self.settings.handoff_timeout_ms,
                    resend_ms: now_ms + self.settings.retry_interval_ms,
                    graceful: c.graceful.contains(from),
                    deferred: BTreeSet::new(),
                },
            );
        }
        let Some(w) = c.workers.get_mut(&shard) else {
            return;
        };
        if w.from != *from || w.phase != WorkerPhase::WaitingStopped {
            return;
        }
        w.phase = WorkerPhase::Writing;
        let viable = handed_to.as_ref().is_some_and(|t| {
            w.to.as_ref() == Some(t)
                && c.state.regions().contains_key(t)
                && !c.terminating.contains(t)
        });
        match (viable, handed_to) {
            (true, Some(to)) => self.coordinator_write(
                now_ms,
                vec![CoordinatorEvent::ShardHomeAllocated {
                    shard: shard.clone(),
                    region: to,
                }],
                AfterWrite::Flipped(shard),
            ),
            _ => {
                let events = if owner.is_some() {
                    vec![CoordinatorEvent::ShardHomeDeallocated {
                        shard: shard.clone(),
                    }]
                } else {
                    Vec::new()
                };
                self.coordinator_write(now_ms, events, AfterWrite::Deallocated(shard))
            }
        }
    }

    /// The move of `shard` is written: start the update transition.
    pub(super) fn coordinator_handoff_flipped(&mut self, now_ms: u64, shard: ShardId) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        let Some(w) = c.workers.remove(&shard) else {
            return;
        };
        let Some(to) = c.state.home(&shard).cloned() else {
            return;
        };
        c.unacked_host.remove(&shard);
        let regions: Vec<UniqueAddress> = c
            .state
            .regions()
            .keys()
            .chain(c.state.proxies().iter())
            .filter(|r| !c.terminating.contains(*r))
            .cloned()
            .collect();
        let members: Vec<UniqueAddress> = regions
            .iter()
            .filter(|r| self.is_member(r))
            .cloned()
            .collect();
        for r in &members {
            self.send(
                r,
                ShardingBody::BeginHandOff {
                    shard: shard.clone(),
                    from: w.from.clone(),
                    to: to.clone(),
                    regions: members.clone(),
                },
            );
        }
        if !self.is_member(&w.from) {
            // The old home crashed during the handoff: the new home starts the shard when
            // told (it must not on its own; see `handoff_maybe_activate`).
            self.send(
                &to,
                ShardingBody::HostShard {
                    shard: shard.clone(),
                    handoff_from: None,
                },
            );
            if let Some(c) = self.coordinator.as_mut() {
                c.unacked_host.insert(
                    shard.clone(),
                    (to.clone(), now_ms + self.settings.shard_start_timeout_ms),
                );
            }
        }
        for r in w.deferred {
            if !members.contains(&r) {
                self.send(
                    &r,
                    ShardingBody::ShardHome {
                        shard: shard.clone(),
                        home: to.clone(),
                        previous: Some(w.from.clone()),
                    },
                );
            }
        }
        self.coordinator_worker_done(now_ms, w.graceful);
    }

    /// A handoff ended without a new home: whoever asked gets a fresh allocation.
    pub(super) fn coordinator_handoff_deallocated(&mut self, now_ms: u64, shard: ShardId) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        let Some(w) = c.workers.remove(&shard) else {
            return;
        };
        c.unacked_host.remove(&shard);
        for r in &w.deferred {
            self.coordinator_get_shard_home(now_ms, r, shard.clone());
        }
        self.coordinator_allocate_remembered_after_move(now_ms, &shard);
        self.coordinator_worker_done(now_ms, w.graceful);
    }

    /// With remember-entities a shard deallocated by a handoff is allocated again at once.
    fn coordinator_allocate_remembered_after_move(&mut self, now_ms: u64, shard: &ShardId) {
        if self.settings.remember_entities {
            let me = self.self_node.clone();
            self.coordinator_get_shard_home(now_ms, &me, shard.clone());
        }
    }

    /// A worker finished: when the round's last one did, run the next round at once.
    fn coordinator_worker_done(&mut self, now_ms: u64, graceful: bool) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        if graceful || !c.round_active {
            return;
        }
        if c.workers.values().all(|w| w.graceful) {
            c.round_active = false;
            self.out.timers.set(ShardingTimer::Rebalance, now_ms);
        }
    }

    /// Membership changed: workers whose new home is gone give up (before the old home
    /// stopped anything).
    pub(super) fn coordinator_handoff_membership(&mut self, now_ms: u64) {
        let Some(c) = self.coordinator.as_ref() else {
            return;
        };
        let abandon: Vec<ShardId> = c
            .workers
            .iter()
            .filter(|(_, w)| {
                w.phase == WorkerPhase::WaitingStarted
                    && w.to.as_ref().is_some_and(|t| !self.is_member(t))
            })
            .map(|(s, _)| s.clone())
            .collect();
        for shard in abandon {
            self.coordinator_abandon(now_ms, &shard);
        }
    }

    /// Gives up a worker that has not asked the old home to stop: the shard stays there.
    fn coordinator_abandon(&mut self, now_ms: u64, shard: &ShardId) {
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        let Some(w) = c.workers.remove(shard) else {
            return;
        };
        tracing::warn!(type_name = %self.settings.type_name, shard = %shard, "handoff abandoned: the new home did not get ready");
        for r in w.deferred {
            self.coordinator_get_shard_home(now_ms, &r, shard.clone());
        }
        self.coordinator_worker_done(now_ms, w.graceful);
    }

    /// `region` was written terminated: its workers end.
    pub(super) fn coordinator_handoff_region_gone(&mut self, now_ms: u64, region: &UniqueAddress) {
        let Some(c) = self.coordinator.as_ref() else {
            return;
        };
        let affected: Vec<(ShardId, Worker)> = c
            .workers
            .iter()
            .filter(|(_, w)| w.from == *region || w.to.as_ref() == Some(region))
            .map(|(s, w)| (s.clone(), w.clone()))
            .collect();
        for (shard, w) in affected {
            match (w.from == *region, &w.phase, &w.to) {
                // The old home crashed after it was told to hand off: its state went with
                // it, but the new home prepared the shard; it gets it.
                (true, WorkerPhase::WaitingStopped, Some(to)) if self.is_member(to) => {
                    if let Some(w) = self
                        .coordinator
                        .as_mut()
                        .and_then(|c| c.workers.get_mut(&shard))
                    {
                        w.phase = WorkerPhase::Writing;
                    }
                    self.coordinator_write(
                        now_ms,
                        vec![CoordinatorEvent::ShardHomeAllocated {
                            shard: shard.clone(),
                            region: to.clone(),
                        }],
                        AfterWrite::Flipped(shard),
                    );
                }
                (true, WorkerPhase::Writing, _) => {}
                (true, _, _) => {
                    // Nothing was moved: the shard has no home now.
                    if let Some(c) = self.coordinator.as_mut() {
                        c.workers.remove(&shard);
                    }
                    for r in w.deferred {
                        self.coordinator_get_shard_home(now_ms, &r, shard.clone());
                    }
                    self.coordinator_worker_done(now_ms, w.graceful);
                }
                (false, WorkerPhase::WaitingStarted, _) => self.coordinator_abandon(now_ms, &shard),
                // The new home is gone while the old one stops: its `ShardStopped` leads to
                // a deallocation (the new home is no longer viable).
                (false, _, _) => {}
            }
        }
    }

    /// Once a second: requests sent again, workers past their deadline.
    pub(super) fn coordinator_handoff_timeouts(&mut self, now_ms: u64) {
        let retry = self.settings.retry_interval_ms;
        let Some(c) = self.coordinator.as_mut() else {
            return;
        };
        let due: Vec<ShardId> = c
            .workers
            .iter()
            .filter(|(_, w)| {
                w.phase != WorkerPhase::Writing
                    && (w.resend_ms <= now_ms || w.deadline_ms <= now_ms)
            })
            .map(|(s, _)| s.clone())
            .collect();
        for shard in due {
            let Some(w) = self
                .coordinator
                .as_mut()
                .and_then(|c| c.workers.get_mut(&shard))
            else {
                continue;
            };
            match w.phase {
                WorkerPhase::WaitingStarted if w.deadline_ms <= now_ms => {
                    self.coordinator_abandon(now_ms, &shard)
                }
                WorkerPhase::WaitingStarted => {
                    w.resend_ms = now_ms + retry;
                    let (to, from) = (w.to.clone(), w.from.clone());
                    if let Some(to) = to {
                        self.send(
                            &to,
                            ShardingBody::HostShard {
                                shard,
                                handoff_from: Some(from),
                            },
                        );
                    }
                }
                WorkerPhase::WaitingStopped => {
                    // The old home must stop the shard before it runs anywhere else: ask
                    // again (it answers at once if it already has). It force-stops its
                    // entities after `handoff-timeout − 5 s`; only its removal ends this
                    // otherwise.
                    if w.deadline_ms <= now_ms {
                        w.deadline_ms = now_ms + self.settings.handoff_timeout_ms;
                        tracing::warn!(type_name = %self.settings.type_name, shard = %shard, "handoff not confirmed within handoff-timeout; asking again");
                    }
                    w.resend_ms = now_ms + retry;
                    let (from, to) = (w.from.clone(), w.to.clone());
                    self.send(&from, ShardingBody::HandOff { shard, to });
                }
                WorkerPhase::Writing => {}
            }
        }
    }
}
