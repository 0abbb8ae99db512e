//! What the shards hosted on this node ([`super::hosted_shards::HostedShards`]) borrow from
//! [`super::ClusterSharding`] for one step (Akka's `Shard` actors and their parent
//! `ShardRegion`; spec `cluster-sharding-concepts.md`): the settings, this node, the
//! membership view, the shared outputs and loopback queue, the counters, the machine's
//! replicator with its open requests (remember-entities writes through it, as Akka's
//! `DDataRememberEntitiesShardStore` does), and the few operations of the region a shard
//! needs — sends, the region's bounded buffer, and the region's record of where a shard
//! lives. A shard never touches the region's state except through these operations.

use std::collections::VecDeque;

use crate::address::UniqueAddress;
use crate::ddata::Replicator;
use crate::membership_view::MembershipView;

use super::api::{DropReason, ShardingStats};
use super::ddata_requests::DdataRequests;
use super::ids::ShardId;
use super::message::{Delivery, ShardingBody};
use super::outbox::ShardingOutputs;
use super::region::Region;
use super::region_context::RegionContext;
use super::settings::ShardingSettings;

/// The machine's parts a shard step may use; built by the machine
/// (`ClusterSharding::shard_parts`) for each step.
pub(super) struct ShardContext<'a> {
    /// The sharding settings of the entity type.
    pub(super) settings: &'a ShardingSettings,
    /// This node.
    pub(super) self_node: &'a UniqueAddress,
    /// The membership as this node sees it.
    pub(super) view: &'a MembershipView,
    /// Transmits, events and timers for the host.
    pub(super) out: &'a mut ShardingOutputs,
    /// Messages to this node itself, handled after the current step.
    pub(super) loopback: &'a mut VecDeque<ShardingBody>,
    /// The machine's counters.
    pub(super) stats: &'a mut ShardingStats,
    /// The machine's replicator (the `shard-<type>-<shard>` keys of remembered entities).
    pub(super) replicator: &'a mut Replicator,
    /// Open replicator requests, to route their answers back to the shard.
    pub(super) ddata: &'a mut DdataRequests,
    /// This node's region; reached only through the methods below.
    region: &'a mut Region,
}

impl<'a> ShardContext<'a> {
    /// The context over the machine's parts.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        settings: &'a ShardingSettings,
        self_node: &'a UniqueAddress,
        view: &'a MembershipView,
        out: &'a mut ShardingOutputs,
        loopback: &'a mut VecDeque<ShardingBody>,
        stats: &'a mut ShardingStats,
        replicator: &'a mut Replicator,
        ddata: &'a mut DdataRequests,
        region: &'a mut Region,
    ) -> Self {
        ShardContext {
            settings,
            self_node,
            view,
            out,
            loopback,
            stats,
            replicator,
            ddata,
            region,
        }
    }

    /// Runs one region operation with the region's context.
    fn with_region<R>(&mut self, step: impl FnOnce(&mut Region, &mut RegionContext<'_>) -> R) -> R {
        let mut ctx = RegionContext {
            settings: self.settings,
            self_node: self.self_node,
            view: self.view,
            out: &mut *self.out,
            loopback: &mut *self.loopback,
            stats: &mut *self.stats,
        };
        step(self.region, &mut ctx)
    }

    // ---- sends ----

    /// Sends `body` to `to` (handled locally, after the current input, if it is this node).
    pub(super) fn send(&mut self, to: &UniqueAddress, body: ShardingBody) {
        self.with_region(|_, ctx| ctx.send(to, body));
    }

    /// Sends a delivery to `home` (origin left out when it is this node).
    pub(super) fn send_delivery(&mut self, home: &UniqueAddress, shard: ShardId, d: Delivery) {
        self.with_region(|_, ctx| Region::send_delivery(ctx, home, shard, d));
    }

    /// Sends `body` to the coordinator this region is registered with (dropped if none).
    pub(super) fn send_to_coordinator(&mut self, body: ShardingBody) {
        self.with_region(|r, ctx| r.send_to_coordinator(ctx, body));
    }

    /// Drops `d`, telling whoever waits for an answer.
    pub(super) fn drop_delivery(&mut self, d: Delivery, reason: DropReason) {
        self.with_region(|_, ctx| Region::drop_delivery(ctx, d, reason));
    }

    // ---- the region's bounded buffer (`buffer-size` for every message held here) ----

    /// Room for one more held message? Counts it if so; drops `d` if not.
    pub(super) fn take_buffer_slot(&mut self, d: Delivery) -> Option<Delivery> {
        self.with_region(|r, ctx| r.take_buffer_slot(ctx, d))
    }

    /// Room for one more held item (a handed-over state)? Counts it if so.
    pub(super) fn hold(&mut self) -> bool {
        self.region.hold(self.settings.buffer_size)
    }

    /// `n` held items left the shard (delivered, forwarded or given back).
    pub(super) fn release(&mut self, n: usize) {
        self.region.release(n);
    }

    /// Gives `d` back to the region, which buffers it until the home of `shard` is known.
    pub(super) fn buffer(&mut self, now_ms: u64, shard: ShardId, d: Delivery) {
        self.with_region(|r, ctx| r.buffer(ctx, now_ms, shard, d));
    }

    // ---- membership as the region remembers it ----

    /// True if `node` is a member this node can talk sharding with (in the view, not
    /// Removed).
    pub(super) fn is_member(&self, node: &UniqueAddress) -> bool {
        self.view.is_member(node)
    }

    /// True if `node` is in the view at all (any status).
    pub(super) fn in_view(&self, node: &UniqueAddress) -> bool {
        self.view.members.contains_key(node)
    }

    /// True once `node` has been out of the membership for at least `removal-margin`.
    pub(super) fn gone_for_good(&self, node: &UniqueAddress, now_ms: u64) -> bool {
        let margin = self.settings.removal_margin_ms;
        self.region
            .membership
            .gone_for_good(self.view, margin, node, now_ms)
    }

    /// True once this node is Down or removed: nothing starts here any more.
    pub(super) fn self_down(&self) -> bool {
        self.region.membership.self_down(self.view)
    }

    // ---- the region's record of homes ----

    /// This node is `shard`'s home (it became active here).
    pub(super) fn home_is_here(&mut self, shard: &ShardId) {
        self.region
            .homes
            .insert(shard.clone(), self.self_node.clone());
    }

    /// This node is `shard`'s home unless the region knows another one already.
    pub(super) fn home_is_here_unless_known(&mut self, shard: &ShardId) {
        self.region
            .homes
            .entry(shard.clone())
            .or_insert_with(|| self.self_node.clone());
    }

    /// The region forgets `shard`'s home (it has none known now).
    pub(super) fn forget_home(&mut self, shard: &ShardId) {
        self.region.homes.remove(shard);
    }

    /// The region forgets `shard`'s home if that is this node.
    pub(super) fn forget_home_if_here(&mut self, shard: &ShardId) {
        if self.region.homes.get(shard) == Some(self.self_node) {
            self.region.homes.remove(shard);
        }
    }

    /// `shard` moved from this node to `to`: the region's home follows, if it was here.
    pub(super) fn home_moved(&mut self, shard: &ShardId, to: UniqueAddress) {
        if self.region.homes.get(shard) == Some(self.self_node) {
            self.region.homes.insert(shard.clone(), to);
        }
    }

    /// `shard`'s home as the region knows it, when that is another node.
    pub(super) fn home_elsewhere(&self, shard: &ShardId) -> Option<UniqueAddress> {
        self.region
            .homes
            .get(shard)
            .filter(|h| *h != self.self_node)
            .cloned()
    }

    /// `shard` was handed off to `to`: until the coordinator has written the move, this
    /// node must not host it again.
    pub(super) fn handed_off(&mut self, shard: &ShardId, to: UniqueAddress) {
        self.region.handed_off.insert(shard.clone(), to);
    }

    /// The coordinator has written the move of `shard` away from this node.
    pub(super) fn handoff_written(&mut self, shard: &ShardId) {
        self.region.handed_off.remove(shard);
    }

    /// The region's graceful shutdown is done once nothing is hosted (`no_shards`), handed
    /// off or buffered.
    pub(super) fn check_graceful_done(&mut self, no_shards: bool) {
        self.with_region(|r, ctx| r.check_graceful_done(ctx, no_shards));
    }
}
