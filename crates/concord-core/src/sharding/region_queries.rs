//! The region's cluster-wide shard statistics queries (Akka's `GetClusterShardingStats`,
//! answered by `ClusterShardingStats`; Pekko `ShardRegion.scala`): every region with the
//! role is asked for its shards and their entity counts (`GetShardRegionStats`); the
//! answers are collected until all have come or `shard-region-query-timeout` has passed.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::member::MemberStatus;

use super::api::ShardingEvent;
use super::ids::ShardId;
use super::message::ShardingBody;
use super::region_context::RegionContext;

/// Most cluster-wide statistics queries in flight; more are answered at once, empty.
const MAX_QUERIES: usize = 64;

/// One `GET /cluster/shards` query collecting every region's answer.
#[derive(Debug)]
struct StatsQuery {
    /// When it is answered with what has come, ms.
    deadline_ms: u64,
    /// Regions whose answer is awaited.
    waiting: BTreeSet<UniqueAddress>,
    /// The answers with shards: region → (shard, entities).
    regions: Vec<(UniqueAddress, Vec<(ShardId, u32)>)>,
}

/// The queries in flight, by request id.
#[derive(Debug, Default)]
pub(super) struct StatsQueries {
    queries: BTreeMap<u64, StatsQuery>,
}

impl StatsQueries {
    /// Starts query `request`: asks every region with the role.
    pub(super) fn start(&mut self, ctx: &mut RegionContext<'_>, now_ms: u64, request: u64) {
        if self.queries.len() >= MAX_QUERIES || self.queries.contains_key(&request) {
            ctx.out
                .events
                .push_back(ShardingEvent::ClusterShardingStats {
                    request,
                    regions: Vec::new(),
                });
            return;
        }
        let role = ctx.settings.role.clone();
        let regions: BTreeSet<UniqueAddress> = ctx
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
            ctx.send(r, ShardingBody::GetShardRegionStats { request });
        }
        self.queries.insert(
            request,
            StatsQuery {
                deadline_ms: now_ms + ctx.settings.shard_region_query_timeout_ms,
                waiting: regions,
                regions: Vec::new(),
            },
        );
        self.finish(ctx, now_ms);
    }

    /// A region's answer to query `request`.
    pub(super) fn answer(
        &mut self,
        ctx: &mut RegionContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        request: u64,
        shards: Vec<(ShardId, u32)>,
    ) {
        if let Some(q) = self.queries.get_mut(&request) {
            if q.waiting.remove(from) && !shards.is_empty() {
                q.regions.push((from.clone(), shards));
            }
        }
        self.finish(ctx, now_ms);
    }

    /// The membership changed: regions that left are no longer awaited.
    pub(super) fn membership_changed(&mut self, ctx: &mut RegionContext<'_>, now_ms: u64) {
        for q in self.queries.values_mut() {
            q.waiting.retain(|n| ctx.view.members.contains_key(n));
        }
        self.finish(ctx, now_ms);
    }

    /// Answers the queries that are complete or timed out.
    pub(super) fn finish(&mut self, ctx: &mut RegionContext<'_>, now_ms: u64) {
        let done: Vec<u64> = self
            .queries
            .iter()
            .filter(|(_, q)| q.waiting.is_empty() || q.deadline_ms <= now_ms)
            .map(|(r, _)| *r)
            .collect();
        for request in done {
            if let Some(mut q) = self.queries.remove(&request) {
                q.regions.sort_by(|a, b| a.0.cmp(&b.0));
                ctx.out
                    .events
                    .push_back(ShardingEvent::ClusterShardingStats {
                        request,
                        regions: q.regions,
                    });
            }
        }
    }
}
