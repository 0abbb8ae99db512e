//! The coordinator's side of handoffs — rebalance rounds, graceful shutdown of a region,
//! and one [`Worker`] per moving shard (Akka's `ShardCoordinator` rebalance and
//! `RebalanceWorker`, reshaped for Concord's order-preserving handoff; the regions' side
//! is in [`super::handoff`]). Methods of [`Coordinator`].
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

use super::coordinator::Coordinator;
use super::coordinator_context::CoordinatorContext;
use super::coordinator_persistence::AfterWrite;
use super::coordinator_state::CoordinatorEvent;
use super::ids::ShardId;
use super::message::ShardingBody;
use super::rebalance_worker::{Worker, WorkerPhase};
use super::timer::ShardingTimer;

/// True if a rebalance round may run now (see the module docs).
fn rebalance_allowed(ctx: &CoordinatorContext<'_>) -> bool {
    let role = ctx.settings.role.as_deref();
    let relevant = || {
        ctx.view
            .members
            .values()
            .filter(move |m| role.is_none_or(|r| m.has_role(r)))
    };
    if !ctx.view.unreachable.is_empty() {
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

impl Coordinator {
    /// `rebalance-interval` passed (or the last round finished): run a round (Akka's
    /// `RebalanceTick`).
    pub(super) fn rebalance_tick(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64) {
        if !self.is_active() {
            return;
        }
        ctx.out.timers.set(
            ShardingTimer::Rebalance,
            now_ms + ctx.settings.rebalance_interval_ms,
        );
        if !rebalance_allowed(ctx) {
            return;
        }
        let in_progress: BTreeSet<ShardId> = self
            .workers
            .iter()
            .filter(|(_, w)| !w.graceful)
            .map(|(s, _)| s.clone())
            .collect();
        let entries = self.region_entries(ctx, &BTreeSet::new());
        if entries.len() < 2 {
            return;
        }
        let chosen = self.strategy.rebalance(&entries, &in_progress);
        let mut started = 0;
        for shard in chosen {
            let Some(owner) = self.state.home(&shard).cloned() else {
                continue;
            };
            if self.workers.contains_key(&shard) {
                continue;
            }
            if self.start_handoff(ctx, now_ms, shard, owner, false) {
                started += 1;
            }
        }
        if started > 0 {
            ctx.stats.rebalance_rounds += 1;
            tracing::info!(type_name = %ctx.settings.type_name, shards = started, "rebalance round");
            self.round_active = true;
        }
    }

    /// `GracefulShutdownReq` from `region`: hand all its shards over.
    pub(super) fn graceful_shutdown(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        region: &UniqueAddress,
    ) {
        let Some(shards) = self.state.regions().get(region).cloned() else {
            return;
        };
        if self.graceful.insert(region.clone()) {
            tracing::info!(type_name = %ctx.settings.type_name, region = %region, shards = shards.len(), "region shutting down; handing its shards over");
        }
        for shard in shards {
            if !self.workers.contains_key(&shard) {
                self.start_handoff(ctx, now_ms, shard, region.clone(), true);
            }
        }
    }

    /// Starts moving `shard` off `from`; false if it cannot start now.
    fn start_handoff(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        shard: ShardId,
        from: UniqueAddress,
        graceful: bool,
    ) -> bool {
        let exclude: BTreeSet<UniqueAddress> = [from.clone()].into();
        let entries = self.region_entries(ctx, &exclude);
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
        let deadline_ms = now_ms + ctx.settings.handoff_timeout_ms;
        let resend_ms = now_ms + ctx.settings.retry_interval_ms;
        let phase = match &to {
            Some(t) => {
                ctx.send(
                    t,
                    ShardingBody::HostShard {
                        shard: shard.clone(),
                        handoff_from: Some(from.clone()),
                    },
                );
                WorkerPhase::WaitingStarted
            }
            None => {
                ctx.send(
                    &from,
                    ShardingBody::HandOff {
                        shard: shard.clone(),
                        to: None,
                    },
                );
                WorkerPhase::WaitingStopped
            }
        };
        self.workers.insert(
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
        true
    }

    /// `ShardStarted` from a region: the new home of a handoff is ready.
    pub(super) fn handoff_started(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        shard: &ShardId,
    ) {
        let Some(w) = self.workers.get_mut(shard) else {
            return;
        };
        if w.phase != WorkerPhase::WaitingStarted || w.to.as_ref() != Some(from) {
            return;
        }
        w.phase = WorkerPhase::WaitingStopped;
        w.deadline_ms = now_ms + ctx.settings.handoff_timeout_ms;
        w.resend_ms = now_ms + ctx.settings.retry_interval_ms;
        let (old, to) = (w.from.clone(), w.to.clone());
        ctx.send(
            &old,
            ShardingBody::HandOff {
                shard: shard.clone(),
                to,
            },
        );
    }

    /// `ShardStopped` from the old home.
    pub(super) fn shard_stopped(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        shard: ShardId,
        handed_to: Option<UniqueAddress>,
    ) {
        let owner = self.state.home(&shard).cloned();
        if !self.workers.contains_key(&shard) {
            // A handoff the previous coordinator started: finish it.
            if owner.as_ref() != Some(from) {
                return;
            }
            self.workers.insert(
                shard.clone(),
                Worker {
                    from: from.clone(),
                    to: handed_to.clone(),
                    phase: WorkerPhase::WaitingStopped,
                    deadline_ms: now_ms + ctx.settings.handoff_timeout_ms,
                    resend_ms: now_ms + ctx.settings.retry_interval_ms,
                    graceful: self.graceful.contains(from),
                    deferred: BTreeSet::new(),
                },
            );
        }
        let Some(w) = self.workers.get_mut(&shard) else {
            return;
        };
        if w.from != *from || w.phase != WorkerPhase::WaitingStopped {
            return;
        }
        w.phase = WorkerPhase::Writing;
        let viable = handed_to.as_ref().is_some_and(|t| {
            w.to.as_ref() == Some(t)
                && self.state.regions().contains_key(t)
                && !self.terminating.contains(t)
        });
        match (viable, handed_to) {
            (true, Some(to)) => self.write(
                ctx,
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
                self.write(ctx, now_ms, events, AfterWrite::Deallocated(shard))
            }
        }
    }

    /// The move of `shard` is written: start the update transition.
    pub(super) fn handoff_flipped(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        shard: ShardId,
    ) {
        let Some(w) = self.workers.remove(&shard) else {
            return;
        };
        let Some(to) = self.state.home(&shard).cloned() else {
            return;
        };
        self.unacked_host.remove(&shard);
        let regions: Vec<UniqueAddress> = self
            .state
            .regions()
            .keys()
            .chain(self.state.proxies().iter())
            .filter(|r| !self.terminating.contains(*r))
            .cloned()
            .collect();
        let members: Vec<UniqueAddress> = regions
            .iter()
            .filter(|r| ctx.is_member(r))
            .cloned()
            .collect();
        for r in &members {
            ctx.send(
                r,
                ShardingBody::BeginHandOff {
                    shard: shard.clone(),
                    from: w.from.clone(),
                    to: to.clone(),
                    regions: members.clone(),
                },
            );
        }
        if !ctx.is_member(&w.from) {
            // The old home crashed during the handoff: the new home starts the shard when
            // told (it must not on its own; see `handoff_maybe_activate`).
            ctx.send(
                &to,
                ShardingBody::HostShard {
                    shard: shard.clone(),
                    handoff_from: None,
                },
            );
            self.unacked_host.insert(
                shard.clone(),
                (to.clone(), now_ms + ctx.settings.shard_start_timeout_ms),
            );
        }
        for r in w.deferred {
            if !members.contains(&r) {
                ctx.send(
                    &r,
                    ShardingBody::ShardHome {
                        shard: shard.clone(),
                        home: to.clone(),
                        previous: Some(w.from.clone()),
                    },
                );
            }
        }
        self.worker_done(ctx, now_ms, w.graceful);
    }

    /// A handoff ended without a new home: whoever asked gets a fresh allocation.
    pub(super) fn handoff_deallocated(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        shard: ShardId,
    ) {
        let Some(w) = self.workers.remove(&shard) else {
            return;
        };
        self.unacked_host.remove(&shard);
        for r in &w.deferred {
            self.get_shard_home(ctx, now_ms, r, shard.clone());
        }
        // With remember-entities the shard is allocated again at once.
        if ctx.settings.remember_entities {
            let me = ctx.self_node.clone();
            self.get_shard_home(ctx, now_ms, &me, shard.clone());
        }
        self.worker_done(ctx, now_ms, w.graceful);
    }

    /// A worker finished: when the round's last one did, run the next round at once
    /// (Akka's `RebalanceDone`).
    fn worker_done(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64, graceful: bool) {
        if graceful || !self.round_active {
            return;
        }
        if self.workers.values().all(|w| w.graceful) {
            self.round_active = false;
            ctx.out.timers.set(ShardingTimer::Rebalance, now_ms);
        }
    }

    /// Membership changed: workers whose new home is gone give up (before the old home
    /// stopped anything).
    pub(super) fn handoff_membership(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64) {
        let abandon: Vec<ShardId> = self
            .workers
            .iter()
            .filter(|(_, w)| {
                w.phase == WorkerPhase::WaitingStarted
                    && w.to.as_ref().is_some_and(|t| !ctx.is_member(t))
            })
            .map(|(s, _)| s.clone())
            .collect();
        for shard in abandon {
            self.abandon(ctx, now_ms, &shard);
        }
    }

    /// Gives up a worker that has not asked the old home to stop: the shard stays there.
    fn abandon(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64, shard: &ShardId) {
        let Some(w) = self.workers.remove(shard) else {
            return;
        };
        tracing::warn!(type_name = %ctx.settings.type_name, shard = %shard, "handoff abandoned: the new home did not get ready");
        for r in w.deferred {
            self.get_shard_home(ctx, now_ms, &r, shard.clone());
        }
        self.worker_done(ctx, now_ms, w.graceful);
    }

    /// `region` was written terminated: its workers end.
    pub(super) fn handoff_region_gone(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        region: &UniqueAddress,
    ) {
        let affected: Vec<(ShardId, Worker)> = self
            .workers
            .iter()
            .filter(|(_, w)| w.from == *region || w.to.as_ref() == Some(region))
            .map(|(s, w)| (s.clone(), w.clone()))
            .collect();
        for (shard, w) in affected {
            match (w.from == *region, &w.phase, &w.to) {
                // The old home crashed after it was told to hand off: its state went with
                // it, but the new home prepared the shard; it gets it.
                (true, WorkerPhase::WaitingStopped, Some(to)) if ctx.is_member(to) => {
                    if let Some(w) = self.workers.get_mut(&shard) {
                        w.phase = WorkerPhase::Writing;
                    }
                    self.write(
                        ctx,
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
                    self.workers.remove(&shard);
                    for r in w.deferred {
                        self.get_shard_home(ctx, now_ms, &r, shard.clone());
                    }
                    self.worker_done(ctx, now_ms, w.graceful);
                }
                (false, WorkerPhase::WaitingStarted, _) => self.abandon(ctx, now_ms, &shard),
                // The new home is gone while the old one stops: its `ShardStopped` leads to
                // a deallocation (the new home is no longer viable).
                (false, _, _) => {}
            }
        }
    }

    /// Once a second: requests sent again, workers past their deadline.
    pub(super) fn handoff_timeouts(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64) {
        let retry = ctx.settings.retry_interval_ms;
        let due: Vec<ShardId> = self
            .workers
            .iter()
            .filter(|(_, w)| {
                w.phase != WorkerPhase::Writing
                    && (w.resend_ms <= now_ms || w.deadline_ms <= now_ms)
            })
            .map(|(s, _)| s.clone())
            .collect();
        for shard in due {
            let Some(w) = self.workers.get_mut(&shard) else {
                continue;
            };
            match w.phase {
                WorkerPhase::WaitingStarted if w.deadline_ms <= now_ms => {
                    self.abandon(ctx, now_ms, &shard)
                }
                WorkerPhase::WaitingStarted => {
                    w.resend_ms = now_ms + retry;
                    let (to, from) = (w.to.clone(), w.from.clone());
                    if let Some(to) = to {
                        ctx.send(
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
                        w.deadline_ms = now_ms + ctx.settings.handoff_timeout_ms;
                        tracing::warn!(type_name = %ctx.settings.type_name, shard = %shard, "handoff not confirmed within handoff-timeout; asking again");
                    }
                    w.resend_ms = now_ms + retry;
                    let (from, to) = (w.from.clone(), w.to.clone());
                    ctx.send(&from, ShardingBody::HandOff { shard, to });
                }
                WorkerPhase::Writing => {}
            }
        }
    }
}
