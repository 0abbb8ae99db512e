//! Where the [`Region`] meets the shards hosted on this node: [`ClusterSharding`] lends the
//! region a [`RegionContext`] for each step ([`ClusterSharding::with_region`]), tells it
//! what it needs of a local shard ([`LocalShard`]), and carries out the step it returns on
//! the shards (deliver to the local shard, create it, confirm it as home). The region never
//! touches the shards itself (Akka's `ShardRegion` and its `Shard` children talk by
//! messages). The shard and handoff code reach the region through the few methods at the
//! end (buffer slots, sends, the coordinator).

use std::collections::BTreeSet;

use crate::address::UniqueAddress;

use super::region::Region;
use super::region_context::{HomeStep, HostStep, LocalShard, RegionContext};
use super::{ClusterSharding, Delivery, DropReason, ShardId, ShardingBody};

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

    /// What the region is told of `shard`'s life here.
    fn local_shard(&self, shard: &ShardId) -> LocalShard {
        match self.shards.get(shard) {
            None => LocalShard::Absent,
            Some(s) => match s.handed_to() {
                None => LocalShard::Hosted,
                Some(Some(to)) if s.is_forwarding() => LocalShard::Forwarding(to.clone()),
                Some(_) => LocalShard::HandingOff,
            },
        }
    }

    // ---- region steps that involve the local shards ----

    /// The membership changed: stop everything if this node is down, update the region,
    /// end the handoffs whose peer is gone.
    pub(super) fn region_membership(&mut self, now_ms: u64) {
        if self.self_down() {
            self.stop_all_entities(now_ms);
        }
        self.with_region(|r, ctx| r.membership_changed(ctx, now_ms));
        self.handoff_membership(now_ms);
    }

    /// Routes a message accepted by this region (a local `tell`).
    pub(super) fn region_route(&mut self, now_ms: u64, shard: ShardId, d: Delivery) {
        let hosted = self.shards.contains_key(&shard);
        if let Some((shard, d)) = self.with_region(|r, ctx| r.route(ctx, now_ms, shard, d, hosted))
        {
            let me = self.self_node.clone();
            self.shard_receive(now_ms, &me, &shard, d);
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
        let hosted = self.shards.contains_key(&shard);
        if let Some((shard, d)) =
            self.with_region(|r, ctx| r.receive(ctx, now_ms, from, shard, d, hosted))
        {
            self.shard_receive(now_ms, from, &shard, d);
        }
    }

    /// Sends the messages buffered for `shard` where they go now (the shard hosted here,
    /// or its known home), in order.
    pub(super) fn region_flush_buffer(&mut self, now_ms: u64, shard: &ShardId) {
        let hosted = self.shards.contains_key(shard);
        let Some((buf, home)) = self.with_region(|r, ctx| r.take_buffer(ctx, shard, hosted)) else {
            return;
        };
        for d in buf {
            if self.shards.contains_key(shard) {
                let from = self.self_node.clone();
                self.shard_receive(now_ms, &from, shard, d);
            } else if let Some(h) = &home {
                self.send_delivery(h, shard.clone(), d);
            }
        }
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
            HomeStep::Confirm => self.handoff_confirmed(now_ms, &shard),
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
        match self.with_region(|r, ctx| r.host_shard(ctx, from, &shard, handoff_from, local, count))
        {
            HostStep::Ignore => return,
            HostStep::Create(handoff_from) => {
                self.shard_create(now_ms, shard.clone(), handoff_from)
            }
            HostStep::Confirm => self.handoff_confirmed(now_ms, &shard),
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
        self.handoff_expected(now_ms, &shard, &from, &to, &regions);
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
        if !self.shards.contains_key(&shard) {
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
        self.handoff_begin(now_ms, &shard, to);
    }

    /// Coordinated shutdown asks this region to hand everything over.
    pub(super) fn region_graceful_shutdown(&mut self, now_ms: u64) {
        let hosted = self.shards.len();
        self.with_region(|r, ctx| r.graceful_shutdown(ctx, now_ms, hosted));
    }

    /// The graceful shutdown is done when nothing is hosted, handed off or buffered.
    pub(super) fn region_check_graceful_done(&mut self) {
        let no_shards = self.shards.is_empty();
        self.with_region(|r, ctx| r.check_graceful_done(ctx, no_shards));
    }

    /// Once a second: graceful-shutdown retries, query timeouts.
    pub(super) fn region_housekeeping(&mut self, now_ms: u64) {
        let no_shards = self.shards.is_empty();
        self.with_region(|r, ctx| r.housekeeping(ctx, now_ms, no_shards));
    }

    // ---- what the shards use of the region ----

    /// Sends a delivery to `home` (origin left out when it is this node).
    pub(super) fn send_delivery(&mut self, home: &UniqueAddress, shard: ShardId, d: Delivery) {
        self.with_region(|_, ctx| Region::send_delivery(ctx, home, shard, d));
    }

    /// Room for one more buffered message? Counts it if so; drops `d` if not.
    pub(super) fn take_buffer_slot(&mut self, d: Delivery) -> Option<Delivery> {
        self.with_region(|r, ctx| r.take_buffer_slot(ctx, d))
    }

    /// Buffers `d` in the region until the home of `shard` is known.
    pub(super) fn region_buffer(&mut self, now_ms: u64, shard: ShardId, d: Delivery) {
        self.with_region(|r, ctx| r.buffer(ctx, now_ms, shard, d));
    }

    /// Drops `d`, telling whoever waits for an answer.
    pub(super) fn drop_delivery(&mut self, d: Delivery, reason: DropReason) {
        self.with_region(|_, ctx| Region::drop_delivery(ctx, d, reason));
    }

    /// Sends `body` to the coordinator this region is registered with (dropped if none).
    pub(super) fn send_to_coordinator(&mut self, body: ShardingBody) {
        self.with_region(|r, ctx| r.send_to_coordinator(ctx, body));
    }

    /// True once `node` has been out of the membership for at least `removal-margin`.
    pub(super) fn gone_for_good(&self, node: &UniqueAddress, now_ms: u64) -> bool {
        let margin = self.settings.removal_margin_ms;
        self.region
            .membership
            .gone_for_good(&self.view, margin, node, now_ms)
    }

    /// True once this node is Down or removed: nothing starts here any more.
    pub(super) fn self_down(&self) -> bool {
        self.region.membership.self_down(&self.view)
    }
}
