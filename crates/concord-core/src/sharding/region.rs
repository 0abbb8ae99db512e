//! The `ShardRegion` part of [`ClusterSharding`]: registration with the coordinator,
//! the cache of shard homes, routing (Scenarios 1 and 2 of the spec), the buffer of
//! messages for shards whose home is not known yet, graceful shutdown and the
//! cluster-wide shard statistics query.
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

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::address::UniqueAddress;
use crate::member::MemberStatus;

use super::{
    ClusterSharding, Delivery, DropReason, ShardId, ShardingBody, ShardingEvent, ShardingTimer,
};

/// Most cluster-wide statistics queries in flight; more are answered at once, empty.
const MAX_QUERIES: usize = 64;

/// One `GET /cluster/shards` query collecting every region's answer.
#[derive(Debug)]
pub(super) struct StatsQuery {
    deadline_ms: u64,
    waiting: BTreeSet<UniqueAddress>,
    regions: Vec<(UniqueAddress, Vec<(ShardId, u32)>)>,
}

/// The region's state.
#[derive(Debug, Default)]
pub(super) struct Region {
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
    pub(super) graceful: bool,
    graceful_done: bool,
    /// When `GracefulShutdownReq` was last sent, ms.
    graceful_sent_ms: u64,
    queries: BTreeMap<u64, StatsQuery>,
}

impl Region {
    pub(super) fn new() -> Self {
        Region::default()
    }
}

impl ClusterSharding {
    /// The membership changed: find the coordinator, forget homes on removed nodes, stop
    /// everything if this node is down.
    pub(super) fn region_membership(&mut self, now_ms: u64) {
        let self_status = self.view.self_member().map(|m| m.status);
        let _ = self_status;
        if self.self_down() {
            self.stop_all_entities(now_ms);
        }
        // The coordinator runs on the oldest member with the role.
        let candidate = self
            .view
            .oldest(self.settings.role.as_deref())
            .map(|m| m.unique_address.clone());
        if candidate != self.region.candidate {
            self.region.candidate = candidate.clone();
            if self.region.coordinator.is_some() && self.region.coordinator != candidate {
                self.region.coordinator = None;
            }
            if self.region.coordinator.is_none() {
                self.region.register_backoff_ms = 0;
                self.out.timers.set(ShardingTimer::Register, now_ms);
            }
        }
        if let Some(c) = self.region.coordinator.clone() {
            if !self.is_member(&c) {
                self.region.coordinator = None;
                self.out.timers.set(ShardingTimer::Register, now_ms);
            }
        }
        // Homes on nodes that are gone are forgotten; their shards are asked for again.
        let gone: Vec<ShardId> = self
            .region
            .homes
            .iter()
            .filter(|(_, h)| !self.is_member(h))
            .map(|(s, _)| s.clone())
            .collect();
        for s in gone {
            self.region.homes.remove(&s);
        }
        let members: Vec<UniqueAddress> = self.view.members.keys().cloned().collect();
        for q in self.region.queries.values_mut() {
            q.waiting.retain(|n| members.contains(n));
        }
        self.region_finish_queries(now_ms);
        self.handoff_membership(now_ms);
    }

    /// Sends `Register` to the coordinator's node (with back-off until acknowledged).
    pub(super) fn region_register(&mut self, now_ms: u64) {
        if self.region.coordinator.is_some() {
            return;
        }
        let self_up = self.view.self_member().is_some_and(|m| {
            matches!(
                m.status,
                MemberStatus::Up
                    | MemberStatus::Leaving
                    | MemberStatus::PreparingForShutdown
                    | MemberStatus::ReadyForShutdown
            )
        });
        let base = (self.settings.retry_interval_ms / 8).max(100);
        self.region.register_backoff_ms = if self.region.register_backoff_ms == 0 {
            base
        } else {
            (self.region.register_backoff_ms * 2).min(self.settings.retry_interval_ms.max(base))
        };
        if let (true, Some(c)) = (self_up, self.region.candidate.clone()) {
            let proxy = !self.hosting;
            self.send(&c, ShardingBody::Register { proxy });
        }
        self.out.timers.set(
            ShardingTimer::Register,
            now_ms + self.region.register_backoff_ms,
        );
    }

    /// The coordinator on `from` accepted this region.
    pub(super) fn region_register_ack(&mut self, now_ms: u64, from: &UniqueAddress) {
        if Some(from) != self.region.candidate.as_ref() && !self.is_member(from) {
            return;
        }
        let changed = self.region.coordinator.as_ref() != Some(from);
        self.region.coordinator = Some(from.clone());
        self.region.register_backoff_ms = 0;
        self.out.timers.cancel(&ShardingTimer::Register);
        if changed {
            tracing::debug!(type_name = %self.settings.type_name, coordinator = %from, "registered with the shard coordinator");
        }
        let shards: Vec<ShardId> = self.region.buffers.keys().cloned().collect();
        for shard in shards {
            self.stats.shard_home_requests += 1;
            self.send_to_coordinator(ShardingBody::GetShardHome { shard });
        }
        if !self.region.buffers.is_empty() {
            self.out.timers.set(
                ShardingTimer::RetryShardHomes,
                now_ms + self.settings.retry_interval_ms,
            );
        }
        if self.region.graceful && !self.region.graceful_done {
            self.region.graceful_sent_ms = now_ms;
            self.send_to_coordinator(ShardingBody::GracefulShutdownReq);
        }
        // A new coordinator re-sends `HostShard` for every allocation; shards this region
        // is handing off answer it with `ShardStopped`.
    }

    /// Routes a message accepted by this region (a local `tell`).
    pub(super) fn region_route(&mut self, now_ms: u64, shard: ShardId, d: Delivery) {
        if self.shards.contains_key(&shard) {
            let me = self.self_node.clone();
            self.shard_receive(now_ms, &me, &shard, d);
            return;
        }
        match self.region.homes.get(&shard) {
            Some(home) if *home != self.self_node => {
                let home = home.clone();
                self.send_delivery(&home, shard, d);
            }
            _ => self.region_buffer(now_ms, shard, d),
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
        if d.entity.len() > super::MAX_ENTITY_ID_BYTES || shard.len() > super::MAX_SHARD_ID_BYTES {
            self.stats.invalid_messages += 1;
            self.drop_delivery(d, DropReason::InvalidId);
            return;
        }
        if self.shards.contains_key(&shard) {
            self.shard_receive(now_ms, from, &shard, d);
        } else if *from == self.self_node {
            self.region_route(now_ms, shard, d);
        } else {
            // Not hosted here: the sender's cache (or ours) is stale; ask the coordinator.
            if self.region.homes.get(&shard) == Some(&self.self_node) {
                self.region.homes.remove(&shard);
            }
            self.region_buffer(now_ms, shard, d);
        }
    }

    /// Sends a delivery to `home` (origin left out when it is this node).
    pub(super) fn send_delivery(&mut self, home: &UniqueAddress, shard: ShardId, d: Delivery) {
        let origin = (d.origin != self.self_node).then_some(d.origin);
        self.send(
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

    /// Room for one more buffered message? Counts it if so; drops `d` if not.
    pub(super) fn take_buffer_slot(&mut self, d: Delivery) -> Option<Delivery> {
        if self.buffered >= self.settings.buffer_size {
            self.stats.dropped_buffer_full += 1;
            self.drop_delivery(d, DropReason::BufferFull);
            return None;
        }
        self.buffered += 1;
        Some(d)
    }

    /// Buffers `d` until the home of `shard` is known.
    pub(super) fn region_buffer(&mut self, now_ms: u64, shard: ShardId, d: Delivery) {
        let Some(d) = self.take_buffer_slot(d) else {
            return;
        };
        let buf = self.region.buffers.entry(shard.clone()).or_default();
        let first = buf.is_empty();
        buf.push_back(d);
        if first {
            if self.region.coordinator.is_some() {
                self.stats.shard_home_requests += 1;
                self.send_to_coordinator(ShardingBody::GetShardHome { shard });
                self.out.timers.set_if_unset(
                    ShardingTimer::RetryShardHomes,
                    now_ms + self.settings.retry_interval_ms,
                );
            } else {
                self.out
                    .timers
                    .set_if_unset(ShardingTimer::Register, now_ms);
            }
        }
    }

    /// Drops `d`, telling whoever waits for an answer.
    pub(super) fn drop_delivery(&mut self, d: Delivery, reason: DropReason) {
        if reason != DropReason::BufferFull {
            self.stats.dropped_other += 1;
        }
        if d.origin == self.self_node {
            self.out
                .events
                .push_back(ShardingEvent::Dropped { ask: d.ask, reason });
        } else if let Some(ask) = d.ask {
            let why = format!("dropped by {}: {}", self.self_node.address, reason.as_str());
            self.send(
                &d.origin,
                ShardingBody::Reply {
                    ask,
                    result: Err(why),
                },
            );
        }
    }

    /// Asks again for the homes of buffered shards.
    pub(super) fn region_retry_shard_homes(&mut self, now_ms: u64) {
        if self.region.buffers.is_empty() {
            return;
        }
        if self.region.coordinator.is_none() {
            self.out
                .timers
                .set_if_unset(ShardingTimer::Register, now_ms);
        } else {
            let shards: Vec<ShardId> = self.region.buffers.keys().cloned().collect();
            for shard in shards {
                self.stats.shard_home_requests += 1;
                self.send_to_coordinator(ShardingBody::GetShardHome { shard });
            }
        }
        self.out.timers.set(
            ShardingTimer::RetryShardHomes,
            now_ms + self.settings.retry_interval_ms,
        );
    }

    /// The home of `shard` is `home` (`previous`: where it was before a handoff).
    pub(super) fn region_shard_home(
        &mut self,
        now_ms: u64,
        shard: ShardId,
        home: UniqueAddress,
        previous: Option<UniqueAddress>,
    ) {
        if !self.is_member(&home)
            || shard.len() > super::MAX_SHARD_ID_BYTES
            || (self.region.homes.len() >= super::MAX_SHARDS
                && !self.region.homes.contains_key(&shard))
        {
            self.stats.invalid_messages += 1;
            return;
        }
        let old = self.region.homes.get(&shard).cloned();
        let via = previous.or(old).filter(|p| *p != home);
        if let Some(p) = via {
            if self.is_member(&p) && self.region.acked.get(&shard) != Some(&home) {
                self.region.acked.insert(shard.clone(), home.clone());
                self.send(
                    &p,
                    ShardingBody::BeginHandOffAck {
                        shard: shard.clone(),
                    },
                );
            }
        }
        let hosted_here = self
            .shards
            .get(&shard)
            .is_some_and(|s| s.handed_to().is_none());
        if home != self.self_node || hosted_here {
            // Hosted here again, not handing off (handed back by a later move): an older
            // handoff from here that was never confirmed is over.
            self.region.handed_off.remove(&shard);
        } else if self.region_handed_off_to(&shard).is_some() {
            self.region_report_handed_off(&shard);
            return;
        }
        self.region.homes.insert(shard.clone(), home.clone());
        if home == self.self_node && self.hosting {
            if self.shards.contains_key(&shard) {
                self.handoff_confirmed(now_ms, &shard);
            } else {
                self.shard_create(now_ms, shard.clone(), None);
            }
        }
        self.region_flush_buffer(now_ms, &shard);
    }

    /// The live new home of a shard this node handed off, while the move is unconfirmed.
    fn region_handed_off_to(&mut self, shard: &ShardId) -> Option<UniqueAddress> {
        let to = self.region.handed_off.get(shard)?.clone();
        if self.is_member(&to) {
            Some(to)
        } else {
            // The new home is gone: the shard may be hosted anywhere (here too) again.
            self.region.handed_off.remove(shard);
            None
        }
    }

    /// Tells the coordinator where a shard it thinks is here went.
    fn region_report_handed_off(&mut self, shard: &ShardId) {
        if let Some(to) = self.region.handed_off.get(shard).cloned() {
            self.send_to_coordinator(ShardingBody::ShardStopped {
                shard: shard.clone(),
                handed_to: Some(to),
            });
        }
    }

    /// Sends the messages buffered for `shard` where they go now (the shard hosted here,
    /// or its known home), in order.
    pub(super) fn region_flush_buffer(&mut self, now_ms: u64, shard: &ShardId) {
        let home = self.region.homes.get(shard).cloned();
        if !self.shards.contains_key(shard) && home.as_ref().is_none_or(|h| *h == self.self_node) {
            return;
        }
        let Some(buf) = self.region.buffers.remove(shard) else {
            return;
        };
        self.buffered = self.buffered.saturating_sub(buf.len());
        for d in buf {
            if self.shards.contains_key(shard) {
                let from = self.self_node.clone();
                self.shard_receive(now_ms, &from, shard, d);
            } else if let Some(h) = &home {
                self.send_delivery(h, shard.clone(), d);
            }
        }
    }

    /// `HostShard` from the coordinator.
    pub(super) fn region_host_shard(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        shard: ShardId,
        handoff_from: Option<UniqueAddress>,
    ) {
        if !self.hosting
            || shard.len() > super::MAX_SHARD_ID_BYTES
            || (self.shards.len() >= super::MAX_SHARDS && !self.shards.contains_key(&shard))
        {
            self.stats.invalid_messages += 1;
            return;
        }
        let handed_to = if handoff_from.is_none() && !self.shards.contains_key(&shard) {
            self.region_handed_off_to(&shard)
        } else {
            None
        };
        if let Some(to) = handed_to {
            self.send(
                from,
                ShardingBody::ShardStopped {
                    shard,
                    handed_to: Some(to),
                },
            );
            return;
        }
        match self.shards.get(&shard) {
            None => {
                // The coordinator moves the shard here (again): whatever older handoff from
                // here it never confirmed, it has moved on since (found by the simulator,
                // seed 2574: a stale entry made this node report the shard it had just
                // received as handed to its previous home, and the coordinator wrote that).
                self.region.handed_off.remove(&shard);
                let handoff_from =
                    handoff_from.filter(|p| *p != self.self_node && self.is_member(p));
                self.shard_create(now_ms, shard.clone(), handoff_from);
                self.send(from, ShardingBody::ShardStarted { shard });
            }
            Some(s) => match s.handed_to() {
                // Handing off (a new coordinator asks again): report where it went.
                Some(Some(to)) if s.is_forwarding() => {
                    let to = to.clone();
                    self.send(
                        from,
                        ShardingBody::ShardStopped {
                            shard,
                            handed_to: Some(to),
                        },
                    );
                }
                Some(_) => {}
                None => {
                    if handoff_from.is_none() {
                        self.handoff_confirmed(now_ms, &shard);
                    }
                    self.send(from, ShardingBody::ShardStarted { shard });
                }
            },
        }
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
        if self.region.graceful {
            return;
        }
        self.region.graceful = true;
        self.region.graceful_sent_ms = now_ms;
        tracing::info!(type_name = %self.settings.type_name, shards = self.shards.len(), "handing all shards over (graceful shutdown)");
        self.send_to_coordinator(ShardingBody::GracefulShutdownReq);
        self.region_check_graceful_done();
    }

    /// Done when nothing is hosted, handed off or buffered any more.
    pub(super) fn region_check_graceful_done(&mut self) {
        if self.region.graceful
            && !self.region.graceful_done
            && self.shards.is_empty()
            && self.region.buffers.is_empty()
        {
            self.region.graceful_done = true;
            tracing::info!(type_name = %self.settings.type_name, "every shard handed over");
            self.send_to_coordinator(ShardingBody::RegionStopped);
            self.out
                .events
                .push_back(ShardingEvent::GracefulShutdownDone);
        }
    }

    /// Once a second: graceful-shutdown retries, query timeouts.
    pub(super) fn region_housekeeping(&mut self, now_ms: u64) {
        if self.region.graceful && !self.region.graceful_done {
            if now_ms >= self.region.graceful_sent_ms + self.settings.retry_interval_ms {
                self.region.graceful_sent_ms = now_ms;
                self.send_to_coordinator(ShardingBody::GracefulShutdownReq);
            }
            self.region_check_graceful_done();
        }
        self.region_finish_queries(now_ms);
    }

    /// Starts a cluster-wide statistics query.
    pub(super) fn region_query_stats(&mut self, now_ms: u64, request: u64) {
        if self.region.queries.len() >= MAX_QUERIES || self.region.queries.contains_key(&request) {
            self.out
                .events
                .push_back(ShardingEvent::ClusterShardingStats {
                    request,
                    regions: Vec::new(),
                });
            return;
        }
        let role = self.settings.role.clone();
        let regions: BTreeSet<UniqueAddress> = self
            .view
            .members
            .values()
            .filter(|m| {
                matches!(
                    m.status,
                    MemberStatus::Up
                        | MemberStatus::Leaving
                        | MemberStatus::Exiting
                        | MemberStatus::WeaklyUp
                        | MemberStatus::PreparingForShutdown
                        | MemberStatus::ReadyForShutdown
                )
            })
            .filter(|m| role.as_deref().is_none_or(|r| m.has_role(r)))
            .map(|m| m.unique_address.clone())
            .collect();
        for r in &regions {
            self.send(r, ShardingBody::GetShardRegionStats { request });
        }
        self.region.queries.insert(
            request,
            StatsQuery {
                deadline_ms: now_ms + self.settings.shard_region_query_timeout_ms,
                waiting: regions,
                regions: Vec::new(),
            },
        );
        self.region_finish_queries(now_ms);
    }

    /// A region's answer to a statistics query.
    pub(super) fn region_stats_answer(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        request: u64,
        shards: Vec<(ShardId, u32)>,
    ) {
        if let Some(q) = self.region.queries.get_mut(&request) {
            if q.waiting.remove(from) && !shards.is_empty() {
                q.regions.push((from.clone(), shards));
            }
        }
        self.region_finish_queries(now_ms);
    }

    /// Answers the queries that are complete or timed out.
    fn region_finish_queries(&mut self, now_ms: u64) {
        let done: Vec<u64> = self
            .region
            .queries
            .iter()
            .filter(|(_, q)| q.waiting.is_empty() || q.deadline_ms <= now_ms)
            .map(|(r, _)| *r)
            .collect();
        for request in done {
            if let Some(mut q) = self.region.queries.remove(&request) {
                q.regions.sort_by(|a, b| a.0.cmp(&b.0));
                self.out
                    .events
                    .push_back(ShardingEvent::ClusterShardingStats {
                        request,
                        regions: q.regions,
                    });
            }
        }
    }
}
