//! Where the [`Region`] meets the shards hosted on this node ([`HostedShards`]):
//! [`ClusterSharding`] lends the region a [`RegionContext`] for each step
//! ([`ClusterSharding::with_region`]) and the shards a [`ShardContext`]
//! ([`ClusterSharding::with_shards`]), tells the region what it needs of a local shard
//! ([`LocalShard`]), and carries out the step it returns on the shards (deliver to the
//! local shard, create it, confirm it as home). The region never touches the shards, and
//! the shards reach the region only through their context's few operations (Akka's
//! `ShardRegion` and its `Shard` children talk by messages).

use std::collections::BTreeSet;

use crate::address::UniqueAddress;

use super::hosted_shards::HostedShards;
use super::ids::ShardId;
use super::message::{Delivery, ShardingBody};
use super::region::Region;
use super::region_context::{HomeStep, HostStep, LocalShard, RegionContext};
use super::shard_context::ShardContext;
use super::ClusterSharding;

impl ClusterSharding {
    /// The region and the context it borrows from the rest of the machine.
    fn region_parts(&mut self) -> (&mut Region, RegionContext<'_>) {
        (
            &mut self.region,
            RegionContext {
                settings: &self.settings,
                self_node: &self.self_node,
                view: &self.view,
                out: &mut self.out,
                loopback: &mut self.loopback,
                stats: &mut self.stats,
            },
        )
    }

    /// Runs one step of the region with its context.
    pub(super) fn with_region<R>(
        &mut self,
        step: impl FnOnce(&mut Region, &mut RegionContext<'_>) -> R,
    ) -> R {
        let (region, mut ctx) = self.region_parts();
        step(region, &mut ctx)
    }

    /// The shards hosted here and the context a shard step borrows from the machine.
    fn shard_parts(&mut self) -> (&mut HostedShards, ShardContext<'_>) {
        (
            &mut self.shards,
            ShardContext::new(
                &self.settings,
                &self.self_node,
                &self.view,
                &mut self.out,
                &mut self.loopback,
                &mut self.stats,
                &mut self.replicator,
                &mut self.ddata,
                &mut self.region,
            ),
        )
    }

    /// Runs one step of the hosted shards with their context.
    pub(super) fn with_shards<R>(
        &mut self,
        step: impl FnOnce(&mut HostedShards, &mut ShardContext<'_>) -> R,
    ) -> R {
        let (shards, mut ctx) = self.shard_parts();
        step(shards, &mut ctx)
    }

    /// What the region is told of `shard`'s life here.
    fn local_shard(&self, shard: &ShardId) -> LocalShard {
        self.shards.local_shard(shard)
    }

    // ---- region steps that involve the local shards ----

    /// The membership changed: stop everything if this node is down, update the region,
    /// end the handoffs whose peer is gone.
    pub(super) fn region_membership(&mut self, now_ms: u64) {
        self.with_shards(|s, ctx| {
            if ctx.self_down() {
                s.stop_all_entities(ctx);
            }
        });
        self.with_region(|r, ctx| r.membership_changed(ctx, now_ms));
        self.with_shards(|s, ctx| s.handoff_membership(ctx, now_ms));
    }

    /// Routes a message accepted by this region (a local `tell`).
    pub(super) fn region_route(&mut self, now_ms: u64, shard: ShardId, d: Delivery) {
        let hosted = self.shards.contains(&shard);
        if let Some((shard, d)) = self.with_region(|r, ctx| r.route(ctx, now_ms, shard, d, hosted))
        {
            self.with_shards(|s, ctx| {
                let me = ctx.self_node.clone();
                s.receive(ctx, now_ms, &me, &shard, d)
            });
        }
    }

    /// A `Deliver` from `from` (another node, or this one).
    pub(super) fn region_receive(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        shard: ShardId,
        d: Delivery,
    ) {
        let hosted = self.shards.contains(&shard);
        if let Some((shard, d)) =
            self.with_region(|r, ctx| r.receive(ctx, now_ms, from, shard, d, hosted))
        {
            self.with_shards(|s, ctx| s.receive(ctx, now_ms, from, &shard, d));
        }
    }

    /// Sends the messages buffered for `shard` where they go now (the shard hosted here,
    /// or its known home), in order.
    pub(super) fn region_flush_buffer(&mut self, now_ms: u64, shard: &ShardId) {
        let hosted = self.shards.contains(shard);
        let Some((buf, home)) = self.with_region(|r, ctx| r.take_buffer(ctx, shard, hosted)) else {
            return;
        };
        self.with_shards(|s, ctx| {
            for d in buf {
                if s.contains(shard) {
                    let from = ctx.self_node.clone();
                    s.receive(ctx, now_ms, &from, shard, d);
                } else if let Some(h) = &home {
                    ctx.send_delivery(h, shard.clone(), d);
                }
            }
        });
    }

    /// The home of `shard` is `home` (`previous`: where it was before a handoff).
    pub(super) fn region_shard_home(
        &mut self,
        now_ms: u64,
        shard: ShardId,
        home: UniqueAddress,
        previous: Option<UniqueAddress>,
    ) {
        let local = self.local_shard(&shard);
        match self.with_region(|r, ctx| r.shard_home(ctx, &shard, home, previous, &local)) {
            HomeStep::Ignore => return,
            HomeStep::Flush => {}
            HomeStep::Confirm => {
                self.with_shards(|s, ctx| s.handoff_confirmed(ctx, now_ms, &shard))
            }
            HomeStep::Create => self.shard_create(now_ms, shard.clone(), None),
        }
        self.region_flush_buffer(now_ms, &shard);
    }

    /// `HostShard` from the coordinator.
    pub(super) fn region_host_shard(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        shard: ShardId,
        handoff_from: Option<UniqueAddress>,
    ) {
        let local = self.local_shard(&shard);
        let count = self.shards.len();
        match self.with_region(|r, ctx| {
            r.host_shard(ctx, now_ms, from, &shard, handoff_from, local, count)
        }) {
            HostStep::Ignore => return,
            HostStep::Create(handoff_from) => {
                self.shard_create(now_ms, shard.clone(), handoff_from)
            }
            HostStep::Confirm => {
                self.with_shards(|s, ctx| s.handoff_confirmed(ctx, now_ms, &shard))
            }
            HostStep::Started => {}
        }
        self.send(from, ShardingBody::ShardStarted { shard });
    }

    /// `BeginHandOff` from the coordinator: the update transition of a handoff.
    pub(super) fn region_begin_handoff(
        &mut self,
        now_ms: u64,
        shard: ShardId,
        from: UniqueAddress,
        to: UniqueAddress,
        regions: Vec<UniqueAddress>,
    ) {
        let regions: BTreeSet<UniqueAddress> = regions.into_iter().collect();
        self.with_shards(|s, ctx| s.handoff_expected(ctx, now_ms, &shard, &from, &to, &regions));
        self.region_shard_home(now_ms, shard, to, Some(from));
    }

    /// `HandOff` from the coordinator.
    pub(super) fn region_handoff(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        shard: ShardId,
        to: Option<UniqueAddress>,
    ) {
        if !self.shards.contains(&shard) {
            self.send(
                from,
                ShardingBody::ShardStopped {
                    shard,
                    handed_to: None,
                },
            );
            return;
        }
        let to = to.filter(|t| self.is_member(t) && *t != self.self_node);
        self.with_shards(|s, ctx| s.handoff_begin(ctx, now_ms, &shard, to));
    }

    /// Coordinated shutdown asks this region to hand everything over.
    pub(super) fn region_graceful_shutdown(&mut self, now_ms: u64) {
        let hosted = self.shards.len();
        self.with_region(|r, ctx| r.graceful_shutdown(ctx, now_ms, hosted));
    }

    /// Once a second: graceful-shutdown retries, query timeouts.
    pub(super) fn region_housekeeping(&mut self, now_ms: u64) {
        let no_shards = self.shards.is_empty();
        self.with_region(|r, ctx| r.housekeeping(ctx, now_ms, no_shards));
    }

    /// Hosts `shard` here (active, or receiving from `handoff_from`), then flushes the
    /// region's buffer for it.
    pub(super) fn shard_create(
        &mut self,
        now_ms: u64,
        shard: ShardId,
        handoff_from: Option<UniqueAddress>,
    ) {
        self.with_shards(|s, ctx| s.create(ctx, now_ms, shard.clone(), handoff_from));
        self.region_flush_buffer(now_ms, &shard);
    }
}
