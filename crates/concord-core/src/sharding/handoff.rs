//! The regions' side of the order-preserving handoff (module docs of [`super`]; the
//! *Handoff* section of the original cluster spec: migration transition with forwarding,
//! update transition with per-sender buffers opened by acknowledgements through the old
//! home).
//!
//! Old home N1: `HandOff { to: N2 }` → **HandingOff**: every entity is asked to stop
//! after the messages it has; messages waiting in a passivating entity's cell go to N2 at
//! once (they arrived before anything forwarded later); every new message for the shard is
//! forwarded to N2 in arrival order. Each stopped entity's state goes to N2
//! (`EntityHandOver`); when none is left, `HandOverDone` to N2 and `ShardStopped` to the
//! coordinator → **Forwarding** until every region's `BeginHandOffAck` has arrived (each is
//! forwarded to N2 as `HandOffAckForward`, behind that region's earlier messages) or
//! `handoff-timeout` passed. Entities that do not stop within
//! `handoff-timeout − 5 s` are killed (they hand nothing over).
//!
//! New home N2: `HostShard { handoff_from: N1 }` → **Receiving**: what N1 forwards is held
//! in order, direct messages are kept per origin; `HandOverDone` starts the handed-over
//! entities with their states and delivers the held messages; a direct sender's buffer
//! opens when its acknowledgement arrives through N1 (or at once for a region that is not
//! expected to acknowledge: one that registered after the handoff began). If N1 is removed
//! (crashed) everything opens; after `2 × handoff-timeout` without `HandOverDone` from a
//! live N1 the preparation is abandoned (the coordinator gave up on it).

use std::collections::BTreeSet;

use crate::address::UniqueAddress;

use super::api::{ShardingEvent, StopReason};
use super::hosted_shards::HostedShards;
use super::ids::ShardId;
use super::message::ShardingBody;
use super::remember::RememberState;
use super::shard::{EntityStatus, Phase, Shard};
use super::shard_context::ShardContext;

impl HostedShards {
    /// Old home: starts handing `shard` off to `to` (`None`: only stop it).
    pub(super) fn handoff_begin(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
        to: Option<UniqueAddress>,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        match &shard.phase {
            Phase::Active if shard.incoming.is_some() => {
                // Its own incoming handoff is still open: start once it completes.
                shard.pending_handoff = Some(to);
                return;
            }
            Phase::Active => {}
            Phase::Forwarding { to: t, .. } => {
                let t = t.clone();
                ctx.send_to_coordinator(ShardingBody::ShardStopped {
                    shard: shard_id.clone(),
                    handed_to: Some(t),
                });
                return;
            }
            // Already handing off, or not received yet: the coordinator asks again.
            Phase::HandingOff { .. } | Phase::Receiving { .. } => return,
        }
        tracing::debug!(type_name = %ctx.settings.type_name, shard = %shard_id, to = ?to.as_ref().map(|t| t.address.to_string()), "handing shard off");
        ctx.stats.handoffs_started += 1;
        shard.phase = Phase::HandingOff {
            to: to.clone(),
            since_ms: now_ms,
            killed: false,
        };
        let mut stops = Vec::new();
        let mut waiting = Vec::new();
        let mut never_started = Vec::new();
        for (e, cell) in shard.entities.iter_mut() {
            match std::mem::replace(&mut cell.status, EntityStatus::Stopping) {
                EntityStatus::Active => stops.push(e.clone()),
                EntityStatus::Passivating(buf) => waiting.extend(buf),
                EntityStatus::RememberingStart(buf) => {
                    waiting.extend(buf);
                    never_started.push(e.clone());
                }
                EntityStatus::Stopping => {}
            }
        }
        for e in &never_started {
            shard.entities.remove(e);
        }
        for e in &stops {
            if let Some(cell) = shard.entities.get_mut(e) {
                self.lru.remove(cell.lru);
                cell.lru = 0;
            }
        }
        ctx.release(waiting.len());
        for d in waiting {
            match &to {
                Some(t) => {
                    ctx.stats.forwarded += 1;
                    ctx.send_delivery(t, shard_id.clone(), d);
                }
                None => ctx.buffer(now_ms, shard_id.clone(), d),
            }
        }
        if to.is_none() {
            // Without a new home this region stops being the shard's home now.
            ctx.forget_home(shard_id);
        }
        for entity in stops {
            ctx.out.events.push_back(ShardingEvent::StopEntity {
                shard: shard_id.clone(),
                entity,
                reason: StopReason::HandOff,
            });
        }
        self.handoff_check_stopped(ctx, now_ms, shard_id);
    }

    /// Old home: once every entity stopped, tells the new home and the coordinator.
    pub(super) fn handoff_check_stopped(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        let Phase::HandingOff { to, .. } = &shard.phase else {
            return;
        };
        if !shard.entities.is_empty() {
            return;
        }
        match to.clone() {
            Some(t) => {
                shard.phase = Phase::Forwarding {
                    to: t.clone(),
                    since_ms: now_ms,
                };
                // Until the coordinator has written the move, this node must not host the
                // shard again (a new coordinator may still think it is the home).
                ctx.handed_off(shard_id, t.clone());
                ctx.send(
                    &t,
                    ShardingBody::HandOverDone {
                        shard: shard_id.clone(),
                    },
                );
                ctx.send_to_coordinator(ShardingBody::ShardStopped {
                    shard: shard_id.clone(),
                    handed_to: Some(t),
                });
                self.handoff_check_forwarding_done(ctx, shard_id);
            }
            None => {
                self.shards.remove(shard_id);
                ctx.send_to_coordinator(ShardingBody::ShardStopped {
                    shard: shard_id.clone(),
                    handed_to: None,
                });
                ctx.check_graceful_done(self.shards.is_empty());
            }
        }
    }

    /// Old home: `region`'s acknowledgement of the new home arrived.
    pub(super) fn handoff_ack(
        &mut self,
        ctx: &mut ShardContext<'_>,
        _now_ms: u64,
        region: &UniqueAddress,
        shard_id: ShardId,
    ) {
        let target = match self.shards.get_mut(&shard_id) {
            Some(shard) => match &shard.phase {
                Phase::HandingOff { to: Some(t), .. } | Phase::Forwarding { to: t, .. } => {
                    let t = t.clone();
                    shard.outgoing.acked.insert(region.clone());
                    Some(t)
                }
                _ => None,
            },
            // Not forwarding any more (a late acknowledgement): pass it on to the home
            // this region knows, so a buffer there does not wait for the timeout.
            None => ctx.home_elsewhere(&shard_id),
        };
        if let Some(t) = target {
            ctx.send(
                &t,
                ShardingBody::HandOffAckForward {
                    shard: shard_id.clone(),
                    region: region.clone(),
                },
            );
        }
        self.handoff_check_forwarding_done(ctx, &shard_id);
    }

    /// Old home: forwarding ends once every expected region acknowledged.
    fn handoff_check_forwarding_done(&mut self, ctx: &mut ShardContext<'_>, shard_id: &ShardId) {
        let Some(shard) = self.shards.get(shard_id) else {
            return;
        };
        let done = shard.is_forwarding()
            && shard.outgoing.expected.as_ref().is_some_and(|e| {
                e.iter()
                    .all(|r| shard.outgoing.acked.contains(r) || !ctx.is_member(r))
            });
        if done {
            self.handoff_end_forwarding(ctx, shard_id);
        }
    }

    fn handoff_end_forwarding(&mut self, ctx: &mut ShardContext<'_>, shard_id: &ShardId) {
        if let Some(shard) = self.shards.remove(shard_id) {
            if let Phase::Forwarding { to, .. } = shard.phase {
                ctx.home_moved(shard_id, to);
            }
        }
        ctx.check_graceful_done(self.shards.is_empty());
    }

    /// `BeginHandOff` names the regions that acknowledge: the old home counts them (and
    /// forgets that the move was unconfirmed), the new home is confirmed and opens the
    /// buffers of the others.
    pub(super) fn handoff_expected(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
        from: &UniqueAddress,
        to: &UniqueAddress,
        regions: &BTreeSet<UniqueAddress>,
    ) {
        if from == ctx.self_node {
            ctx.handoff_written(shard_id);
        }
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        if matches!(&shard.phase, Phase::Forwarding { to: t, .. } | Phase::HandingOff { to: Some(t), .. } if t == to)
        {
            shard.outgoing.expected = Some(regions.clone());
            self.handoff_check_forwarding_done(ctx, shard_id);
            return;
        }
        if let Some(inc) = shard.incoming.as_mut() {
            if inc.from == *from && to == ctx.self_node {
                inc.expected = Some(regions.clone());
                self.handoff_confirmed(ctx, now_ms, shard_id);
                self.handoff_open_buffers(ctx, now_ms, shard_id);
            }
        }
    }

    /// New home: the state of one handed-over entity.
    pub(super) fn handoff_entity_state(
        &mut self,
        ctx: &mut ShardContext<'_>,
        from: &UniqueAddress,
        shard_id: &ShardId,
        entity: String,
        state: Vec<u8>,
    ) {
        let ok = self.shards.get(shard_id).is_some_and(|s| {
            matches!(s.phase, Phase::Receiving { .. })
                && s.incoming.as_ref().is_some_and(|i| i.from == *from)
        }) && entity.len() <= super::ids::MAX_ENTITY_ID_BYTES;
        if !ok || !ctx.hold() {
            ctx.stats.invalid_messages += u64::from(!ok);
            ctx.stats.dropped_buffer_full += u64::from(ok);
            return;
        }
        if let Some(Shard {
            phase: Phase::Receiving { states, .. },
            ..
        }) = self.shards.get_mut(shard_id)
        {
            states.push((entity, state));
        }
    }

    /// New home: `HandOverDone` from the old home.
    pub(super) fn handoff_done_received(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        shard_id: &ShardId,
    ) {
        let from_old_home = self
            .shards
            .get(shard_id)
            .and_then(|s| s.incoming.as_ref())
            .is_some_and(|i| i.from == *from);
        match self.shards.get_mut(shard_id).map(|s| &mut s.phase) {
            Some(Phase::Receiving { done, .. }) if from_old_home => *done = true,
            _ => {
                ctx.stats.invalid_messages += 1;
                return;
            }
        }
        self.handoff_maybe_activate(ctx, now_ms, shard_id);
    }

    /// New home: the coordinator has written this node as the shard's home.
    pub(super) fn handoff_confirmed(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
    ) {
        if let Some(Phase::Receiving { confirmed, .. }) =
            self.shards.get_mut(shard_id).map(|s| &mut s.phase)
        {
            *confirmed = true;
            self.handoff_maybe_activate(ctx, now_ms, shard_id);
        }
    }

    /// New home: activates once confirmed and the old home is done (or gone).
    fn handoff_maybe_activate(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
    ) {
        let ready = self.shards.get(shard_id).is_some_and(|s| match &s.phase {
            Phase::Receiving {
                done, confirmed, ..
            } => {
                *confirmed && (*done || s.incoming.as_ref().is_some_and(|i| !ctx.in_view(&i.from)))
            }
            _ => false,
        });
        if ready {
            self.handoff_activate(ctx, now_ms, shard_id);
        }
    }

    /// New home: the shard becomes active — handed-over entities start with their
    /// states, then the held messages are delivered, then the open buffers.
    fn handoff_activate(&mut self, ctx: &mut ShardContext<'_>, now_ms: u64, shard_id: &ShardId) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        let Phase::Receiving { held, states, .. } =
            std::mem::replace(&mut shard.phase, Phase::Active)
        else {
            return;
        };
        // The update transition gets its own `handoff-timeout` from now.
        if let Some(inc) = shard.incoming.as_mut() {
            inc.deadline_ms = now_ms + ctx.settings.handoff_timeout_ms;
        }
        ctx.release(held.len() + states.len());
        ctx.home_is_here_unless_known(shard_id);
        for (entity, state) in states {
            self.start_entity(ctx, now_ms, shard_id, entity, Some(state));
        }
        for d in held {
            self.deliver_entity(ctx, now_ms, shard_id, d);
        }
        self.handoff_open_buffers(ctx, now_ms, shard_id);
        RememberState::shard_started(ctx, now_ms, shard_id);
    }

    /// New home: `region`'s acknowledgement, forwarded by the old home.
    pub(super) fn handoff_ack_forwarded(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        shard_id: &ShardId,
        region: UniqueAddress,
    ) {
        let Some(inc) = self
            .shards
            .get_mut(shard_id)
            .and_then(|s| s.incoming.as_mut())
        else {
            return;
        };
        if inc.from != *from {
            ctx.stats.invalid_messages += 1;
            return;
        }
        inc.acked.insert(region);
        self.handoff_open_buffers(ctx, now_ms, shard_id);
    }

    /// New home: delivers the buffers that may open, and ends the update transition when
    /// every expected region acknowledged.
    fn handoff_open_buffers(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        if !matches!(shard.phase, Phase::Active) {
            return;
        }
        let Some(inc) = shard.incoming.as_mut() else {
            return;
        };
        let open: Vec<UniqueAddress> = inc
            .closed
            .keys()
            .filter(|o| inc.is_open(o))
            .cloned()
            .collect();
        let mut release = Vec::new();
        for o in open {
            if let Some(buf) = inc.closed.remove(&o) {
                release.extend(buf);
            }
        }
        let complete = inc.is_complete();
        ctx.release(release.len());
        for d in release {
            self.deliver_entity(ctx, now_ms, shard_id, d);
        }
        if complete {
            self.handoff_incoming_done(ctx, now_ms, shard_id);
        }
    }

    /// New home: the update transition is over (every buffer open).
    fn handoff_incoming_done(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        let Some(inc) = shard.incoming.take() else {
            return;
        };
        let rest: Vec<_> = inc.closed.into_values().flatten().collect();
        let pending = shard.pending_handoff.take();
        ctx.stats.handoffs_completed += 1;
        ctx.release(rest.len());
        for d in rest {
            self.deliver_entity(ctx, now_ms, shard_id, d);
        }
        if let Some(to) = pending {
            self.handoff_begin(ctx, now_ms, shard_id, to);
        }
    }

    /// Membership changed: handoffs whose peer is gone end.
    pub(super) fn handoff_membership(&mut self, ctx: &mut ShardContext<'_>, now_ms: u64) {
        let ids: Vec<ShardId> = self.shards.keys().cloned().collect();
        for id in ids {
            // New home whose old home is gone (crashed, or left without finishing): once
            // the removal margin has passed, nothing more comes from it.
            let old_home = self
                .shards
                .get(&id)
                .and_then(|s| s.incoming.as_ref())
                .map(|i| i.from.clone());
            if old_home.is_some_and(|f| ctx.gone_for_good(&f, now_ms)) {
                self.handoff_old_home_gone(ctx, now_ms, &id);
            }
            let Some(shard) = self.shards.get_mut(&id) else {
                continue;
            };
            match &shard.phase {
                Phase::HandingOff { to: Some(t), .. } if !ctx.in_view(t) => {
                    // The new home crashed: stop without handing over.
                    if let Phase::HandingOff { to, .. } = &mut shard.phase {
                        *to = None;
                    }
                    ctx.forget_home(&id);
                    self.handoff_check_stopped(ctx, now_ms, &id);
                }
                Phase::Forwarding { to, .. } if !ctx.in_view(to) => {
                    ctx.forget_home(&id);
                    self.shards.remove(&id);
                    ctx.check_graceful_done(self.shards.is_empty());
                }
                Phase::Forwarding { .. } => self.handoff_check_forwarding_done(ctx, &id),
                _ => {}
            }
        }
    }

    /// Once a second: force-stops, and the timeouts of both sides.
    pub(super) fn handoff_housekeeping(&mut self, ctx: &mut ShardContext<'_>, now_ms: u64) {
        let force_ms = ctx.settings.handoff_force_stop_ms();
        let timeout = ctx.settings.handoff_timeout_ms;
        let ids: Vec<ShardId> = self.shards.keys().cloned().collect();
        for id in ids {
            let Some(shard) = self.shards.get_mut(&id) else {
                continue;
            };
            match &mut shard.phase {
                Phase::HandingOff {
                    since_ms, killed, ..
                } if !*killed && now_ms >= *since_ms + force_ms => {
                    *killed = true;
                    tracing::warn!(type_name = %ctx.settings.type_name, shard = %id, entities = shard.entities.len(), "entities did not stop for the handoff in time; killing them");
                    for e in shard.entities.keys() {
                        ctx.out.events.push_back(ShardingEvent::KillEntity {
                            shard: id.clone(),
                            entity: e.clone(),
                        });
                    }
                }
                Phase::Forwarding { since_ms, .. } if now_ms >= *since_ms + timeout => {
                    self.handoff_end_forwarding(ctx, &id);
                    continue;
                }
                _ => {}
            }
            let Some(shard) = self.shards.get(&id) else {
                continue;
            };
            if let Some(inc) = &shard.incoming {
                if matches!(shard.phase, Phase::Active) && ctx.gone_for_good(&inc.from, now_ms) {
                    self.handoff_old_home_gone(ctx, now_ms, &id);
                    continue;
                }
                if now_ms >= inc.deadline_ms {
                    if matches!(shard.phase, Phase::Receiving { .. }) {
                        // The old home never finished: the coordinator gave up on this
                        // handoff. Give back what was held.
                        tracing::warn!(type_name = %ctx.settings.type_name, shard = %id, "handoff preparation abandoned");
                        self.handoff_abandon(ctx, now_ms, &id);
                    } else {
                        tracing::warn!(type_name = %ctx.settings.type_name, shard = %id, "handoff acknowledgements missing; opening every buffer");
                        self.handoff_incoming_done(ctx, now_ms, &id);
                    }
                }
            }
        }
    }

    /// New home: the old home is gone for good. An active shard opens every buffer (no
    /// acknowledgement can come through the old home any more). A shard still receiving
    /// waits: only the coordinator may make it the home now (its `HostShard` once it has
    /// written the move), or it gives up after `2 × handoff-timeout` — starting on its own
    /// could run the shard twice if the coordinator meanwhile placed it elsewhere.
    fn handoff_old_home_gone(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard_id: &ShardId,
    ) {
        let active = self
            .shards
            .get(shard_id)
            .is_some_and(|s| matches!(s.phase, Phase::Active));
        if active {
            self.handoff_incoming_done(ctx, now_ms, shard_id);
        }
    }

    /// New home: gives up a preparation; what it held goes back through the region.
    fn handoff_abandon(&mut self, ctx: &mut ShardContext<'_>, now_ms: u64, shard_id: &ShardId) {
        let Some(shard) = self.shards.remove(shard_id) else {
            return;
        };
        let mut back = Vec::new();
        if let Phase::Receiving { held, states, .. } = shard.phase {
            ctx.release(states.len());
            back.extend(held);
        }
        if let Some(inc) = shard.incoming {
            back.extend(inc.closed.into_values().flatten());
        }
        ctx.release(back.len());
        ctx.forget_home_if_here(shard_id);
        for d in back {
            ctx.buffer(now_ms, shard_id.clone(), d);
        }
    }
}
