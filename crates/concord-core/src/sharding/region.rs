//! The `ShardRegion` (Akka's `ShardRegion`, Pekko `ShardRegion.scala`; spec
//! `cluster-sharding-concepts.md`, Scenarios 1 and 2): registration with the coordinator,
//! the cache of shard homes, routing, the buffer of messages for shards whose home is not
//! known yet, graceful shutdown and the cluster-wide shard statistics query.
//!
//! Routing a message for shard S:
//! - S is hosted here → the shard takes it ([`super::shard`]);
//! - a home is cached for S → sent there directly;
//! - otherwise it is buffered (all buffers of the region together hold at most
//!   `buffer-size` messages) and the coordinator is asked `GetShardHome`, again every
//!   `retry-interval` until it answers; its `ShardHome` flushes the buffer in order.
//!
//! A message that arrives from another node for a shard not hosted here is not relayed on
//! this region's cache (two stale caches could bounce it): it is buffered and the
//! coordinator asked, whose answer is authoritative.
//!
//! When a cached home changes (a handoff completed), the region first sends
//! `BeginHandOffAck` to the previous home — behind everything it sent there — and only
//! then anything to the new home (see the handoff in the module docs of [`super`]).
//!
//! [`Region`] owns the region's state; each step borrows a [`RegionContext`]. It reaches
//! the coordinator by messages, and the shards hosted here only through a [`LocalShard`]
//! snapshot passed in and the step it returns ([`HomeStep`], [`HostStep`], a delivery for
//! the local shard), which the machine carries out (`region_shards.rs`).

use std::collections::{BTreeMap, VecDeque};

use crate::address::UniqueAddress;
use crate::member::MemberStatus;

use super::api::{DropReason, ShardingEvent};
use super::ids::ShardId;
use super::message::{Delivery, ShardingBody};
use super::region_context::{HomeStep, HostStep, LocalShard, RegionContext};
use super::region_membership::RegionMembership;
use super::region_queries::StatsQueries;
use super::timer::ShardingTimer;

/// The region's state (Akka's `ShardRegion` actor's fields).
#[derive(Debug, Default)]
pub(super) struct Region {
    /// What the region remembers of the membership (whether it hosts, who was removed).
    pub(super) membership: RegionMembership,
    /// Messages held in every buffer of this node's region and shards (unknown homes,
    /// handoffs, passivation, remembering), count; bounded by `buffer-size`.
    buffered: usize,
    /// The node whose coordinator acknowledged this region's registration.
    pub(super) coordinator: Option<UniqueAddress>,
    /// Where `Register` goes: the oldest member with the role.
    candidate: Option<UniqueAddress>,
    /// Current register back-off, ms.
    register_backoff_ms: u64,
    /// Shard → home, as far as this region knows.
    pub(super) homes: BTreeMap<ShardId, UniqueAddress>,
    /// Messages for shards whose home is not known, in arrival order.
    buffers: BTreeMap<ShardId, VecDeque<Delivery>>,
    /// Shard → the home this region acknowledged a change to (through the previous home).
    acked: BTreeMap<ShardId, UniqueAddress>,
    /// Shards this node handed off whose move the coordinator has not confirmed yet →
    /// their new home. Such a shard is not hosted here again: `HostShard` or `ShardHome`
    /// naming this node is answered with `ShardStopped { handed_to }` (a new coordinator
    /// then writes the move).
    pub(super) handed_off: BTreeMap<ShardId, UniqueAddress>,
    /// The node's coordinated shutdown asked to hand everything over.
    graceful: bool,
    graceful_done: bool,
    /// When `GracefulShutdownReq` was last sent, ms.
    graceful_sent_ms: u64,
    /// Cluster-wide statistics queries in flight (the machine starts and answers them
    /// through this field directly).
    pub(super) queries: StatsQueries,
}

impl Region {
    pub(super) fn new() -> Self {
        Region::default()
    }

    // ---- membership ----

    /// The membership changed: find the coordinator, forget homes on removed nodes.
    pub(super) fn membership_changed(&mut self, ctx: &mut RegionContext<'_>, now_ms: u64) {
        // The coordinator runs on the oldest member with the role.
        let candidate = ctx
            .view
            .oldest(ctx.settings.role.as_deref())
            .map(|m| m.unique_address.clone());
        if candidate != self.candidate {
            self.candidate = candidate.clone();
            if self.coordinator.is_some() && self.coordinator != candidate {
                self.coordinator = None;
            }
            if self.coordinator.is_none() {
                self.register_backoff_ms = 0;
                ctx.out.timers.set(ShardingTimer::Register, now_ms);
            }
        }
        if let Some(c) = self.coordinator.clone() {
            if !ctx.is_member(&c) {
                self.coordinator = None;
                ctx.out.timers.set(ShardingTimer::Register, now_ms);
            }
        }
        // Homes on nodes that are gone are forgotten; their shards are asked for again.
        self.homes.retain(|_, h| ctx.is_member(h));
        self.queries.membership_changed(ctx, now_ms);
    }

    // ---- the coordinator ----

    /// Sends `Register` to the coordinator's node (with back-off until acknowledged).
    pub(super) fn register(&mut self, ctx: &mut RegionContext<'_>, now_ms: u64) {
        if self.coordinator.is_some() {
            return;
        }
        let self_up = ctx.view.self_member().is_some_and(|m| {
            matches!(
                m.status,
                MemberStatus::Up
                    | MemberStatus::Leaving
                    | MemberStatus::PreparingForShutdown
                    | MemberStatus::ReadyForShutdown
            )
        });
        let retry = ctx.settings.retry_interval_ms;
        let base = (retry / 8).max(100);
        self.register_backoff_ms = if self.register_backoff_ms == 0 {
            base
        } else {
            (self.register_backoff_ms * 2).min(retry.max(base))
        };
        if let (true, Some(c)) = (self_up, self.candidate.clone()) {
            let proxy = !self.membership.hosting;
            ctx.send(&c, ShardingBody::Register { proxy });
        }
        ctx.out
            .timers
            .set(ShardingTimer::Register, now_ms + self.register_backoff_ms);
    }

    /// The coordinator on `from` accepted this region.
    pub(super) fn register_ack(
        &mut self,
        ctx: &mut RegionContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
    ) {
        if Some(from) != self.candidate.as_ref() && !ctx.is_member(from) {
            return;
        }
        let changed = self.coordinator.as_ref() != Some(from);
        self.coordinator = Some(from.clone());
        self.register_backoff_ms = 0;
        ctx.out.timers.cancel(&ShardingTimer::Register);
        if changed {
            tracing::debug!(type_name = %ctx.settings.type_name, coordinator = %from, "registered with the shard coordinator");
        }
        self.ask_shard_homes(ctx);
        if !self.buffers.is_empty() {
            ctx.out.timers.set(
                ShardingTimer::RetryShardHomes,
                now_ms + ctx.settings.retry_interval_ms,
            );
        }
        if self.graceful && !self.graceful_done {
            self.graceful_sent_ms = now_ms;
            self.send_to_coordinator(ctx, ShardingBody::GracefulShutdownReq);
        }
        // A new coordinator re-sends `HostShard` for every allocation; shards this region
        // is handing off answer it with `ShardStopped`.
    }

    /// Sends `body` to the coordinator this region is registered with (dropped if none:
    /// the protocol retries).
    pub(super) fn send_to_coordinator(&self, ctx: &mut RegionContext<'_>, body: ShardingBody) {
        if let Some(c) = &self.coordinator {
            ctx.send(c, body);
        }
    }

    /// Asks the coordinator for the home of every buffered shard.
    fn ask_shard_homes(&self, ctx: &mut RegionContext<'_>) {
        for shard in self.buffers.keys() {
            ctx.stats.shard_home_requests += 1;
            self.send_to_coordinator(
                ctx,
                ShardingBody::GetShardHome {
                    shard: shard.clone(),
                },
            );
        }
    }

    /// Asks again for the homes of buffered shards.
    pub(super) fn retry_shard_homes(&mut self, ctx: &mut RegionContext<'_>, now_ms: u64) {
        if self.buffers.is_empty() {
            return;
        }
        if self.coordinator.is_none() {
            ctx.out.timers.set_if_unset(ShardingTimer::Register, now_ms);
        } else {
            self.ask_shard_homes(ctx);
        }
        ctx.out.timers.set(
            ShardingTimer::RetryShardHomes,
            now_ms + ctx.settings.retry_interval_ms,
        );
    }

    // ---- routing and buffering ----

    /// Routes a message accepted by this region (a local `tell`, `hosted`: the shard is
    /// hosted here); returns it when the local shard takes it.
    pub(super) fn route(
        &mut self,
        ctx: &mut RegionContext<'_>,
        now_ms: u64,
        shard: ShardId,
        d: Delivery,
        hosted: bool,
    ) -> Option<(ShardId, Delivery)> {
        if hosted {
            return Some((shard, d));
        }
        match self.homes.get(&shard) {
            Some(home) if home != ctx.self_node => {
                let home = home.clone();
                Self::send_delivery(ctx, &home, shard, d);
            }
            _ => self.buffer(ctx, now_ms, shard, d),
        }
        None
    }

    /// A `Deliver` from `from` (another node, or this one; `hosted`: the shard is hosted
    /// here); returns it when the local shard takes it.
    pub(super) fn receive(
        &mut self,
        ctx: &mut RegionContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        shard: ShardId,
        d: Delivery,
        hosted: bool,
    ) -> Option<(ShardId, Delivery)> {
        if d.entity.len() > super::ids::MAX_ENTITY_ID_BYTES
            || shard.len() > super::ids::MAX_SHARD_ID_BYTES
        {
            ctx.stats.invalid_messages += 1;
            Self::drop_delivery(ctx, d, DropReason::InvalidId);
            return None;
        }
        if hosted {
            return Some((shard, d));
        }
        if from == ctx.self_node {
            return self.route(ctx, now_ms, shard, d, false);
        }
        // Not hosted here: the sender's cache (or ours) is stale; ask the coordinator.
        if self.homes.get(&shard) == Some(ctx.self_node) {
            self.homes.remove(&shard);
        }
        self.buffer(ctx, now_ms, shard, d);
        None
    }

    /// Sends a delivery to `home` (origin left out when it is this node).
    pub(super) fn send_delivery(
        ctx: &mut RegionContext<'_>,
        home: &UniqueAddress,
        shard: ShardId,
        d: Delivery,
    ) {
        let origin = (d.origin != *ctx.self_node).then_some(d.origin);
        ctx.send(
            home,
            ShardingBody::Deliver {
                shard,
                entity: d.entity,
                payload: d.payload,
                origin,
                ask: d.ask,
            },
        );
    }

    /// Room for one more buffered message (in the region or a shard)? Counts it if so;
    /// drops `d` if not.
    pub(super) fn take_buffer_slot(
        &mut self,
        ctx: &mut RegionContext<'_>,
        d: Delivery,
    ) -> Option<Delivery> {
        if self.buffered >= ctx.settings.buffer_size {
            ctx.stats.dropped_buffer_full += 1;
            Self::drop_delivery(ctx, d, DropReason::BufferFull);
            return None;
        }
        self.buffered += 1;
        Some(d)
    }

    /// Counts one more held item if there is room under `buffer_size`; false if full.
    pub(super) fn hold(&mut self, buffer_size: usize) -> bool {
        if self.buffered >= buffer_size {
            return false;
        }
        self.buffered += 1;
        true
    }

    /// `n` held messages left their buffers.
    pub(super) fn release(&mut self, n: usize) {
        self.buffered = self.buffered.saturating_sub(n);
    }

    /// Messages in the buffers of the region and its shards, count.
    pub(super) fn buffered(&self) -> usize {
        self.buffered
    }

    /// Buffers `d` until the home of `shard` is known.
    pub(super) fn buffer(
        &mut self,
        ctx: &mut RegionContext<'_>,
        now_ms: u64,
        shard: ShardId,
        d: Delivery,
    ) {
        let Some(d) = self.take_buffer_slot(ctx, d) else {
            return;
        };
        let buf = self.buffers.entry(shard.clone()).or_default();
        let first = buf.is_empty();
        buf.push_back(d);
        if first {
            if self.coordinator.is_some() {
                ctx.stats.shard_home_requests += 1;
                self.send_to_coordinator(ctx, ShardingBody::GetShardHome { shard });
                ctx.out.timers.set_if_unset(
                    ShardingTimer::RetryShardHomes,
                    now_ms + ctx.settings.retry_interval_ms,
                );
            } else {
                ctx.out.timers.set_if_unset(ShardingTimer::Register, now_ms);
            }
        }
    }

    /// Drops `d`, telling whoever waits for an answer.
    pub(super) fn drop_delivery(ctx: &mut RegionContext<'_>, d: Delivery, reason: DropReason) {
        if reason != DropReason::BufferFull {
            ctx.stats.dropped_other += 1;
        }
        if d.origin == *ctx.self_node {
            ctx.out
                .events
                .push_back(ShardingEvent::Dropped { ask: d.ask, reason });
        } else if let Some(ask) = d.ask {
            let why = format!("dropped by {}: {}", ctx.self_node.address, reason.as_str());
            ctx.send(
                &d.origin,
                ShardingBody::Reply {
                    ask,
                    result: Err(why),
                },
            );
        }
    }

    /// Takes the messages buffered for `shard` once they can go somewhere (`hosted`: the
    /// shard is hosted here; else its known home elsewhere), with that home.
    pub(super) fn take_buffer(
        &mut self,
        ctx: &RegionContext<'_>,
        shard: &ShardId,
        hosted: bool,
    ) -> Option<(VecDeque<Delivery>, Option<UniqueAddress>)> {
        let home = self.homes.get(shard).cloned();
        if !hosted && home.as_ref().is_none_or(|h| h == ctx.self_node) {
            return None;
        }
        let buf = self.buffers.remove(shard)?;
        self.release(buf.len());
        Some((buf, home))
    }

    // ---- homes from the coordinator ----

    /// The home of `shard` is `home` (`previous`: where it was before a handoff; `local`:
    /// the shard's life here).
    pub(super) fn shard_home(
        &mut self,
        ctx: &mut RegionContext<'_>,
        shard: &ShardId,
        home: UniqueAddress,
        previous: Option<UniqueAddress>,
        local: &LocalShard,
    ) -> HomeStep {
        if !ctx.is_member(&home)
            || shard.len() > super::ids::MAX_SHARD_ID_BYTES
            || (self.homes.len() >= super::ids::MAX_SHARDS && !self.homes.contains_key(shard))
        {
            ctx.stats.invalid_messages += 1;
            return HomeStep::Ignore;
        }
        let old = self.homes.get(shard).cloned();
        let via = previous.or(old).filter(|p| *p != home);
        if let Some(p) = via {
            if ctx.is_member(&p) && self.acked.get(shard) != Some(&home) {
                self.acked.insert(shard.clone(), home.clone());
                ctx.send(
                    &p,
                    ShardingBody::BeginHandOffAck {
                        shard: shard.clone(),
                    },
                );
            }
        }
        if home != *ctx.self_node || *local == LocalShard::Hosted {
            // Hosted here again, not handing off (handed back by a later move): an older
            // handoff from here that was never confirmed is over.
            self.handed_off.remove(shard);
        } else if self.handed_off_to(ctx, shard).is_some() {
            self.report_handed_off(ctx, shard);
            return HomeStep::Ignore;
        }
        let here = home == *ctx.self_node;
        self.homes.insert(shard.clone(), home);
        match (here && self.membership.hosting, local) {
            (false, _) => HomeStep::Flush,
            (true, LocalShard::Absent) => HomeStep::Create,
            (true, _) => HomeStep::Confirm,
        }
    }

    /// The live new home of a shard this node handed off, while the move is unconfirmed.
    fn handed_off_to(&mut self, ctx: &RegionContext<'_>, shard: &ShardId) -> Option<UniqueAddress> {
        let to = self.handed_off.get(shard)?.clone();
        if ctx.is_member(&to) {
            Some(to)
        } else {
            // The new home is gone: the shard may be hosted anywhere (here too) again.
            self.handed_off.remove(shard);
            None
        }
    }

    /// Tells the coordinator where a shard it thinks is here went.
    fn report_handed_off(&self, ctx: &mut RegionContext<'_>, shard: &ShardId) {
        if let Some(to) = self.handed_off.get(shard).cloned() {
            self.send_to_coordinator(
                ctx,
                ShardingBody::ShardStopped {
                    shard: shard.clone(),
                    handed_to: Some(to),
                },
            );
        }
    }

    /// `HostShard` from the coordinator on `from` (`local`: the shard's life here,
    /// `local_count`: shards hosted here).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn host_shard(
        &mut self,
        ctx: &mut RegionContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        shard: &ShardId,
        handoff_from: Option<UniqueAddress>,
        local: LocalShard,
        local_count: usize,
    ) -> HostStep {
        let absent = local == LocalShard::Absent;
        if !self.membership.hosting
            || shard.len() > super::ids::MAX_SHARD_ID_BYTES
            || (local_count >= super::ids::MAX_SHARDS && absent)
        {
            ctx.stats.invalid_messages += 1;
            return HostStep::Ignore;
        }
        let handed_to = if handoff_from.is_none() && absent {
            self.handed_off_to(ctx, shard)
        } else {
            None
        };
        if let Some(to) = handed_to {
            let body = ShardingBody::ShardStopped {
                shard: shard.clone(),
                handed_to: Some(to),
            };
            ctx.send(from, body);
            return HostStep::Ignore;
        }
        match local {
            LocalShard::Absent => {
                // The coordinator moves the shard here (again): whatever older handoff from
                // here it never confirmed, it has moved on since (found by the simulator,
                // seed 2574: a stale entry made this node report the shard it had just
                // received as handed to its previous home, and the coordinator wrote that).
                self.handed_off.remove(shard);
                // A previous home that was removed less than `removal-margin` ago may still
                // run the shard's entities (it left while cut off, or was downed and has not
                // noticed yet): the shard is prepared as the new home of a handoff from it,
                // and becomes active only when the coordinator confirms the move, which it
                // writes once that margin has passed (found by the simulator, seed 5842: a
                // node removed while Exiting and cut off still ran an entity its old home's
                // successor started 2.5 s after the removal).
                let margin = ctx.settings.removal_margin_ms;
                HostStep::Create(handoff_from.filter(|p| {
                    p != ctx.self_node
                        && !self.membership.gone_for_good(ctx.view, margin, p, now_ms)
                }))
            }
            // Handing off (a new coordinator asks again): report where it went.
            LocalShard::Forwarding(to) => {
                let body = ShardingBody::ShardStopped {
                    shard: shard.clone(),
                    handed_to: Some(to),
                };
                ctx.send(from, body);
                HostStep::Ignore
            }
            LocalShard::HandingOff => HostStep::Ignore,
            LocalShard::Hosted if handoff_from.is_none() => HostStep::Confirm,
            LocalShard::Hosted => HostStep::Started,
        }
    }

    // ---- graceful shutdown and housekeeping ----

    /// Coordinated shutdown asks this region to hand everything over (`hosted`: shards
    /// hosted here, count).
    pub(super) fn graceful_shutdown(
        &mut self,
        ctx: &mut RegionContext<'_>,
        now_ms: u64,
        hosted: usize,
    ) {
        if self.graceful {
            return;
        }
        self.graceful = true;
        self.graceful_sent_ms = now_ms;
        tracing::info!(type_name = %ctx.settings.type_name, shards = hosted, "handing all shards over (graceful shutdown)");
        self.send_to_coordinator(ctx, ShardingBody::GracefulShutdownReq);
        self.check_graceful_done(ctx, hosted == 0);
    }

    /// Done when nothing is hosted (`no_shards`), handed off or buffered any more.
    pub(super) fn check_graceful_done(&mut self, ctx: &mut RegionContext<'_>, no_shards: bool) {
        if self.graceful && !self.graceful_done && no_shards && self.buffers.is_empty() {
            self.graceful_done = true;
            tracing::info!(type_name = %ctx.settings.type_name, "every shard handed over");
            self.send_to_coordinator(ctx, ShardingBody::RegionStopped);
            ctx.out
                .events
                .push_back(ShardingEvent::GracefulShutdownDone);
        }
    }

    /// Once a second: graceful-shutdown retries, query timeouts (`no_shards`: nothing is
    /// hosted here).
    pub(super) fn housekeeping(
        &mut self,
        ctx: &mut RegionContext<'_>,
        now_ms: u64,
        no_shards: bool,
    ) {
        if self.graceful && !self.graceful_done {
            if now_ms >= self.graceful_sent_ms + ctx.settings.retry_interval_ms {
                self.graceful_sent_ms = now_ms;
                self.send_to_coordinator(ctx, ShardingBody::GracefulShutdownReq);
            }
            self.check_graceful_done(ctx, no_shards);
        }
        self.queries.finish(ctx, now_ms);
    }
}
