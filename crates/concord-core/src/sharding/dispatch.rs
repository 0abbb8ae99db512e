//! How inputs reach the parts of [`ClusterSharding`]: messages from peers (and those this
//! node sends itself) routed to the region, its shards or the coordinator by type, and the
//! outputs of the embedded coordinator singleton and replicator turned into transmits and
//! coordinator steps until nothing is left. The coordinator is reached only here, through
//! [`ClusterSharding::with_coordinator`], which lends it a [`CoordinatorContext`]; the
//! region's own steps go through [`ClusterSharding::with_region`] likewise.

use crate::address::UniqueAddress;
use crate::ddata::replicator::ReplicatorEvent;
use crate::protocol::{ProtocolMachine, Transmit};
use crate::singleton::{SingletonEvent, SingletonMessage};

use super::api::ShardingEvent;
use super::coordinator::Coordinator;
use super::coordinator_context::CoordinatorContext;
use super::ddata_requests::DdataPurpose;
use super::message::{Delivery, ShardingBody, ShardingMessage};
use super::ClusterSharding;

impl ClusterSharding {
    /// The coordinator's slot and the context it borrows from the rest of the machine.
    fn coordinator_parts(&mut self) -> (&mut Option<Coordinator>, CoordinatorContext<'_>) {
        (
            &mut self.coordinator,
            CoordinatorContext {
                settings: &self.settings,
                self_node: &self.self_node,
                view: &self.view,
                out: &mut self.out,
                loopback: &mut self.loopback,
                replicator: &mut self.replicator,
                ddata: &mut self.ddata,
                stats: &mut self.stats,
            },
        )
    }

    /// Runs `step` on the coordinator if one runs here (nothing otherwise).
    pub(super) fn with_coordinator(
        &mut self,
        step: impl FnOnce(&mut Coordinator, &mut CoordinatorContext<'_>),
    ) {
        let (slot, mut ctx) = self.coordinator_parts();
        if let Some(c) = slot.as_mut() {
            step(c, &mut ctx);
        }
    }

    /// Runs the loopback queue and the embedded machines' outputs until nothing is left.
    pub(super) fn settle(&mut self, now_ms: u64) {
        loop {
            let mut progressed = false;
            while let Some(body) = self.loopback.pop_front() {
                progressed = true;
                let me = self.self_node.clone();
                self.dispatch(now_ms, &me, body);
            }
            while let Some(t) = self.singleton.poll_transmit() {
                progressed = true;
                let SingletonMessage { body, .. } = t.message;
                self.out.transmits.push_back(Transmit {
                    to: t.to,
                    to_uid: t.to_uid,
                    lane: t.lane,
                    message: ShardingMessage {
                        type_name: self.settings.type_name.clone(),
                        body: ShardingBody::Singleton(body),
                    },
                });
            }
            while let Some(e) = self.singleton.poll_event() {
                progressed = true;
                self.on_singleton_event(now_ms, e);
            }
            while let Some(t) = self.replicator.poll_transmit() {
                progressed = true;
                self.out.transmits.push_back(t.map(|m| ShardingMessage {
                    type_name: self.settings.type_name.clone(),
                    body: ShardingBody::Replicator(m),
                }));
            }
            while let Some(e) = self.replicator.poll_event() {
                progressed = true;
                self.on_replicator_event(now_ms, e);
            }
            if !progressed {
                break;
            }
        }
    }

    pub(super) fn on_singleton_event(&mut self, now_ms: u64, e: SingletonEvent) {
        match e {
            SingletonEvent::StartInstance { .. } => {
                tracing::info!(type_name = %self.settings.type_name, "shard coordinator starting");
                let strategy = match self.coordinator.take() {
                    Some(old) => Some(old.into_strategy()),
                    None => self.strategy.take(),
                };
                // The strategy is always in one of the two places.
                let Some(strategy) = strategy else {
                    return;
                };
                let (slot, mut ctx) = self.coordinator_parts();
                *slot = Some(Coordinator::start(&mut ctx, now_ms, strategy));
            }
            SingletonEvent::StopInstance => {
                if let Some(old) = self.coordinator.take() {
                    self.strategy = Some(old.into_strategy());
                    tracing::info!(type_name = %self.settings.type_name, "shard coordinator stopped");
                }
                Coordinator::cancel_timers(&mut self.out);
                self.singleton.instance_terminated(now_ms);
            }
            SingletonEvent::AcquireLease => self.singleton.lease_result(now_ms, true),
            SingletonEvent::ExitingDone => self.out.events.push_back(ShardingEvent::ExitingDone),
            SingletonEvent::Stuck => {
                tracing::warn!(type_name = %self.settings.type_name, "shard coordinator hand-over did not complete; starting over")
            }
            SingletonEvent::ReleaseLease
            | SingletonEvent::Deliver { .. }
            | SingletonEvent::Reply { .. }
            | SingletonEvent::Dropped { .. } => {}
        }
    }

    pub(super) fn on_replicator_event(&mut self, now_ms: u64, e: ReplicatorEvent) {
        match e {
            ReplicatorEvent::Store { key, envelope } => self
                .out
                .events
                .push_back(ShardingEvent::Store { key, envelope }),
            ReplicatorEvent::GetResponse {
                request, result, ..
            } => match self.ddata.close(request.0) {
                Some(DdataPurpose::CoordinatorLoad) => {
                    self.with_coordinator(|c, ctx| c.state_read(ctx, now_ms, result))
                }
                Some(DdataPurpose::AllShardsLoad) => {
                    self.with_coordinator(|c, ctx| c.all_shards_read(ctx, now_ms, result))
                }
                Some(DdataPurpose::RememberLoad(shard)) => {
                    self.with_shards(|s, ctx| s.remember_ddata_loaded(ctx, now_ms, &shard, result))
                }
                _ => {}
            },
            ReplicatorEvent::UpdateResponse {
                request, result, ..
            } => match self.ddata.close(request.0) {
                Some(DdataPurpose::CoordinatorWrite) => {
                    self.with_coordinator(|c, ctx| c.written(ctx, now_ms, result))
                }
                Some(DdataPurpose::AllShardsWrite) => {}
                Some(DdataPurpose::RememberWrite(shard)) => {
                    if !matches!(result, crate::ddata::UpdateResult::Success) {
                        self.stats.write_timeouts += 1;
                    }
                    self.with_shards(|s, ctx| s.remember_write_done(ctx, now_ms, &shard))
                }
                _ => {}
            },
            ReplicatorEvent::DeleteResponse { .. }
            | ReplicatorEvent::Changed { .. }
            | ReplicatorEvent::Deleted { .. } => {}
        }
    }

    /// Routes one message (from a peer, or looped back from this node).
    pub(super) fn dispatch(&mut self, now_ms: u64, from: &UniqueAddress, body: ShardingBody) {
        match body {
            ShardingBody::Replicator(m) => self.replicator.handle_message(now_ms, from, m),
            ShardingBody::Singleton(b) => self.singleton.handle_message(
                now_ms,
                from,
                SingletonMessage {
                    name: self.settings.coordinator_singleton_name(),
                    body: b,
                },
            ),
            b if b.is_for_coordinator() => {
                self.with_coordinator(|c, ctx| c.handle_message(ctx, now_ms, from, b))
            }
            ShardingBody::RegisterAck => {
                self.with_region(|r, ctx| r.register_ack(ctx, now_ms, from))
            }
            ShardingBody::ShardHomes { homes } => {
                if Some(from) == self.region.coordinator.as_ref() {
                    for (shard, home) in homes {
                        self.region_shard_home(now_ms, shard, home, None);
                    }
                }
            }
            ShardingBody::ShardHome {
                shard,
                home,
                previous,
            } => self.region_shard_home(now_ms, shard, home, previous),
            ShardingBody::HostShard {
                shard,
                handoff_from,
            } => self.region_host_shard(now_ms, from, shard, handoff_from),
            ShardingBody::BeginHandOff {
                shard,
                from: old,
                to,
                regions,
            } => self.region_begin_handoff(now_ms, shard, old, to, regions),
            ShardingBody::HandOff { shard, to } => self.region_handoff(now_ms, from, shard, to),
            ShardingBody::Deliver {
                shard,
                entity,
                payload,
                origin,
                ask,
            } => {
                let origin = origin.unwrap_or_else(|| from.clone());
                self.region_receive(
                    now_ms,
                    from,
                    shard,
                    Delivery {
                        entity,
                        payload,
                        origin,
                        ask,
                    },
                )
            }
            ShardingBody::Reply { ask, result } => self
                .out
                .events
                .push_back(ShardingEvent::Reply { ask, result }),
            ShardingBody::EntityHandOver {
                shard,
                entity,
                state,
            } => {
                self.with_shards(|s, ctx| s.handoff_entity_state(ctx, from, &shard, entity, state))
            }
            ShardingBody::HandOverDone { shard } => {
                self.with_shards(|s, ctx| s.handoff_done_received(ctx, now_ms, from, &shard))
            }
            ShardingBody::HandOffAckForward { shard, region } => self
                .with_shards(|s, ctx| s.handoff_ack_forwarded(ctx, now_ms, from, &shard, region)),
            ShardingBody::BeginHandOffAck { shard } => {
                self.with_shards(|s, ctx| s.handoff_ack(ctx, now_ms, from, shard))
            }
            ShardingBody::GetShardRegionStats { request } => {
                let shards = self.local_shards();
                self.send(from, ShardingBody::ShardRegionStats { request, shards });
            }
            ShardingBody::ShardRegionStats { request, shards } => {
                self.with_region(|r, ctx| r.queries.answer(ctx, now_ms, from, request, shards))
            }
            // The remaining variants are the coordinator's (handled above).
            _ => self.stats.invalid_messages += 1,
        }
    }
}
