//! The regions the `ShardCoordinator` knows (Akka's `ShardCoordinator`: `Register` /
//! `RegisterProxy`, watching regions, `regionTerminated` / `regionProxyTerminated`,
//! `RegionStopped`; Pekko `ShardCoordinator.scala`): a region or proxy registers (written,
//! then `RegisterAck` with the known homes in batches of [`SHARD_HOMES_BATCH`]); one whose
//! node leaves the membership is written terminated after `removal-margin` (proxies at
//! once), which ends its handoffs and deallocates its shards. Methods of [`Coordinator`].

use crate::address::UniqueAddress;
use crate::member::MemberStatus;

use super::coordinator::Coordinator;
use super::coordinator_context::CoordinatorContext;
use super::coordinator_persistence::AfterWrite;
use super::coordinator_state::CoordinatorEvent;
use super::ids::{ShardId, SHARD_HOMES_BATCH};
use super::message::ShardingBody;
use super::timer::ShardingTimer;

impl Coordinator {
    /// `Register` (or `RegisterProxy`): written, then acknowledged.
    pub(super) fn register(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        proxy: bool,
    ) {
        let ok_status = ctx.view.member(from).is_some_and(|m| {
            matches!(
                m.status,
                MemberStatus::Up
                    | MemberStatus::Leaving
                    | MemberStatus::Exiting
                    | MemberStatus::PreparingForShutdown
                    | MemberStatus::ReadyForShutdown
            )
        });
        if !ok_status || self.terminating.contains(from) {
            return;
        }
        let registered = if proxy {
            self.state.proxies().contains(from)
        } else {
            self.state.regions().contains_key(from)
        };
        if registered {
            self.ack_registration(ctx, from);
        } else if self.registering.insert(from.clone()) {
            let event = if proxy {
                CoordinatorEvent::RegionProxyRegistered(from.clone())
            } else {
                CoordinatorEvent::RegionRegistered(from.clone())
            };
            self.write(ctx, now_ms, vec![event], AfterWrite::Ack(from.clone()));
        }
    }

    /// `RegisterAck` and the known homes (left out: shards being handed off).
    pub(super) fn ack_registration(&self, ctx: &mut CoordinatorContext<'_>, to: &UniqueAddress) {
        let homes: Vec<(ShardId, UniqueAddress)> = self
            .state
            .shards()
            .filter(|(s, _)| !self.workers.contains_key(*s))
            .map(|(s, r)| (s.clone(), r.clone()))
            .collect();
        ctx.send(to, ShardingBody::RegisterAck);
        for batch in homes.chunks(SHARD_HOMES_BATCH) {
            ctx.send(
                to,
                ShardingBody::ShardHomes {
                    homes: batch.to_vec(),
                },
            );
        }
    }

    /// A region's node left the membership: its shards are re-allocated after the
    /// removal margin.
    pub(super) fn membership_changed(&mut self, ctx: &mut CoordinatorContext<'_>, now_ms: u64) {
        if !self.active {
            return;
        }
        let gone: Vec<UniqueAddress> = self
            .state
            .regions()
            .keys()
            .chain(self.state.proxies().iter())
            .filter(|r| !ctx.view.members.contains_key(*r) && !self.terminating.contains(*r))
            .cloned()
            .collect();
        for r in gone {
            self.schedule_termination(ctx, now_ms, r);
        }
        self.handoff_membership(ctx, now_ms);
    }

    /// Watches a region that is gone: [`Self::region_terminated`] after its margin.
    pub(super) fn schedule_termination(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        region: UniqueAddress,
    ) {
        if !self.terminating.insert(region.clone()) {
            return;
        }
        let margin = if self.state.proxies().contains(&region) {
            0
        } else {
            ctx.settings.removal_margin_ms
        };
        tracing::info!(type_name = %ctx.settings.type_name, region = %region, margin_ms = margin, "shard region removed; its shards are re-allocated after the removal margin");
        ctx.out
            .timers
            .set(ShardingTimer::RegionTerminated(region), now_ms + margin);
    }

    /// The removal margin of `region` passed: write it terminated (Akka's
    /// `regionTerminated` / `regionProxyTerminated`).
    pub(super) fn region_terminated(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        region: UniqueAddress,
    ) {
        let event = if self.state.regions().contains_key(&region) {
            CoordinatorEvent::RegionTerminated(region.clone())
        } else if self.state.proxies().contains(&region) {
            CoordinatorEvent::RegionProxyTerminated(region.clone())
        } else {
            return;
        };
        self.write(ctx, now_ms, vec![event], AfterWrite::Terminated(region));
    }

    /// `RegionStopped`: the region is gone at once (no margin).
    pub(super) fn region_stopped(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
    ) {
        if !self.state.is_registered(from) || !self.terminating.insert(from.clone()) {
            return;
        }
        self.region_terminated(ctx, now_ms, from.clone());
    }

    pub(super) fn after_terminated(
        &mut self,
        ctx: &mut CoordinatorContext<'_>,
        now_ms: u64,
        region: UniqueAddress,
    ) {
        self.terminating.remove(&region);
        self.graceful.remove(&region);
        self.handoff_region_gone(ctx, now_ms, &region);
        self.allocate_shard_homes_for_remember_entities(ctx, now_ms);
    }
}
