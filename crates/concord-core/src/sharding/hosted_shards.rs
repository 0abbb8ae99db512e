//! The shards hosted on this node (Akka's `Shard` children of a `ShardRegion`): each
//! [`Shard`] with its entities, and the active-entity LRU they share
//! ([`RecencyList`], for `active-entity-limit`). [`HostedShards`] owns them and their
//! methods; for each step it borrows a [`ShardContext`] from the machine. This file holds
//! their creation, the routing of a message that reaches a shard in each phase, and the
//! queries; entities are in `shard_entities`, the handoff in `handoff`, remember-entities
//! in `shard_remember`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::address::UniqueAddress;

use super::ids::{EntityId, ShardId};
use super::message::Delivery;
use super::recency_list::RecencyList;
use super::region_context::LocalShard;
use super::remember::RememberState;
use super::shard::{Incoming, Outgoing, Phase, Shard};
use super::shard_context::ShardContext;

/// The shards hosted here and their active-entity LRU.
#[derive(Debug, Default)]
pub(super) struct HostedShards {
    /// Every shard with a life here (receiving, active, handing off, forwarding), by id.
    pub(super) shards: BTreeMap<ShardId, Shard>,
    /// Active-entity LRU over all of them (only with an active-entity limit).
    pub(super) lru: RecencyList,
}

impl HostedShards {
    // ---- queries ----

    /// True if `shard` has a life here (any phase).
    pub(super) fn contains(&self, shard: &ShardId) -> bool {
        self.shards.contains_key(shard)
    }

    /// Shards with a life here, count.
    pub(super) fn len(&self) -> usize {
        self.shards.len()
    }

    /// True if no shard has a life here.
    pub(super) fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// Entities of every shard here (any status), count.
    pub(super) fn entity_count(&self) -> usize {
        self.shards.values().map(|s| s.entity_count()).sum()
    }

    /// What the region is told of `shard`'s life here.
    pub(super) fn local_shard(&self, shard: &ShardId) -> LocalShard {
        match self.shards.get(shard) {
            None => LocalShard::Absent,
            Some(s) => match s.handed_to() {
                None => LocalShard::Hosted,
                Some(Some(to)) if s.is_forwarding() => LocalShard::Forwarding(to.clone()),
                Some(_) => LocalShard::HandingOff,
            },
        }
    }

    /// The shards hosted here (active, receiving or handing off) with their numbers of
    /// entities, sorted by shard id.
    pub(super) fn local_shards(&self) -> Vec<(ShardId, u32)> {
        let mut v: Vec<(ShardId, u32)> = self
            .shards
            .iter()
            .filter(|(_, s)| s.is_hosting())
            .map(|(id, s)| {
                (
                    id.clone(),
                    u32::try_from(s.entity_count()).unwrap_or(u32::MAX),
                )
            })
            .collect();
        v.sort();
        v
    }

    /// The entities alive here (started, not yet stopped) as (shard, entity), sorted.
    pub(super) fn local_entities(&self) -> Vec<(ShardId, EntityId)> {
        let mut v: Vec<(ShardId, EntityId)> = self
            .shards
            .iter()
            .flat_map(|(sid, s)| s.live_entities().map(move |e| (sid.clone(), e.clone())))
            .collect();
        v.sort();
        v
    }

    /// Handoffs in progress here (as old or new home), count.
    pub(super) fn handoffs_in_progress(&self) -> usize {
        self.shards.values().filter(|s| s.in_handoff()).count()
    }

    // ---- creation and routing ----

    /// Hosts `shard` here: active at once, or receiving from `handoff_from`; then the
    /// region's buffer for it is flushed (by the caller).
    pub(super) fn create(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        shard: ShardId,
        handoff_from: Option<UniqueAddress>,
    ) {
        let (phase, incoming) = match handoff_from {
            Some(from) => (
                Phase::Receiving {
                    held: VecDeque::new(),
                    states: Vec::new(),
                    done: false,
                    confirmed: false,
                },
                Some(Incoming {
                    from,
                    expected: None,
                    acked: BTreeSet::new(),
                    closed: BTreeMap::new(),
                    deadline_ms: now_ms + 2 * ctx.settings.handoff_timeout_ms,
                }),
            ),
            None => (Phase::Active, None),
        };
        let active = matches!(phase, Phase::Active);
        self.shards.insert(
            shard.clone(),
            Shard {
                phase,
                entities: BTreeMap::new(),
                incoming,
                outgoing: Outgoing::default(),
                pending_handoff: None,
                remember: RememberState::default(),
            },
        );
        if active {
            ctx.home_is_here(&shard);
            RememberState::shard_started(ctx, now_ms, &shard);
        }
    }

    /// A message for a shard hosted here, from `from` (this node for local sends).
    pub(super) fn receive(
        &mut self,
        ctx: &mut ShardContext<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        shard_id: &ShardId,
        d: Delivery,
    ) {
        let Some(shard) = self.shards.get_mut(shard_id) else {
            return;
        };
        let from_previous = shard.incoming.as_ref().is_some_and(|i| i.from == *from);
        match &mut shard.phase {
            Phase::Receiving { held, .. } if from_previous => {
                if let Some(d) = ctx.take_buffer_slot(d) {
                    held.push_back(d);
                }
            }
            Phase::Receiving { .. } => Self::close(ctx, shard, d),
            Phase::Active => match &shard.incoming {
                Some(inc) if !from_previous && !inc.is_open(&d.origin) => {
                    Self::close(ctx, shard, d)
                }
                _ => self.deliver_entity(ctx, now_ms, shard_id, d),
            },
            Phase::HandingOff { to: Some(t), .. } | Phase::Forwarding { to: t, .. } => {
                let to = t.clone();
                ctx.stats.forwarded += 1;
                ctx.send_delivery(&to, shard_id.clone(), d);
            }
            Phase::HandingOff { to: None, .. } => ctx.buffer(now_ms, shard_id.clone(), d),
        }
    }

    /// New home: `d` was sent here directly before its sender acknowledged the new home;
    /// it waits in the sender's buffer.
    fn close(ctx: &mut ShardContext<'_>, shard: &mut Shard, d: Delivery) {
        ctx.stats.held_for_order += 1;
        if let Some(d) = ctx.take_buffer_slot(d) {
            if let Some(inc) = shard.incoming.as_mut() {
                inc.closed.entry(d.origin.clone()).or_default().push_back(d);
            }
        }
    }
}
