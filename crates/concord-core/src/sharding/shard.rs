//! One shard hosted on this node (Akka's `Shard`): its phase, its entities' cells and the
//! bookkeeping of a handoff on either side. The shards hosted here, their entities and
//! their methods are in [`super::hosted_shards`] and `shard_entities`.
//!
//! A shard is in one of four phases: **Receiving** (a new home waiting for the old one's
//! entity states), **Active**, **HandingOff** (an old home stopping its entities and
//! forwarding new messages) and **Forwarding** (an old home after the stop, until every
//! region has acknowledged the new home). The handoff itself is in [`super::handoff`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::address::UniqueAddress;

use super::ids::EntityId;
use super::message::Delivery;
use super::remember::RememberState;

/// Where a shard is in its life on this node.
#[derive(Debug)]
pub(super) enum Phase {
    /// New home of a handoff: holding what the old home forwards until it is both done
    /// (`HandOverDone`, or gone) and confirmed by the coordinator (which has written the
    /// move: `BeginHandOff`, `HostShard` or `ShardHome` naming this node).
    Receiving {
        /// Messages forwarded by the old home, in order.
        held: VecDeque<Delivery>,
        /// Handed-over entity states.
        states: Vec<(EntityId, Vec<u8>)>,
        /// `HandOverDone` arrived.
        done: bool,
        /// The coordinator has written this node as the home.
        confirmed: bool,
    },
    /// Serving its entities.
    Active,
    /// Old home: its entities are stopping; new messages go to `to` (or back to the
    /// region when there is no new home).
    HandingOff {
        to: Option<UniqueAddress>,
        since_ms: u64,
        killed: bool,
    },
    /// Old home after the stop: forwarding to `to` until every region acknowledged.
    Forwarding { to: UniqueAddress, since_ms: u64 },
}

/// The new home's side of a handoff: the per-sender buffers of the update transition.
#[derive(Debug)]
pub(super) struct Incoming {
    /// The old home.
    pub(super) from: UniqueAddress,
    /// Regions whose acknowledgements are awaited (known from `BeginHandOff`).
    pub(super) expected: Option<BTreeSet<UniqueAddress>>,
    /// Regions whose acknowledgements arrived through the old home.
    pub(super) acked: BTreeSet<UniqueAddress>,
    /// Messages sent here directly, per origin, until its acknowledgement arrives.
    pub(super) closed: BTreeMap<UniqueAddress, VecDeque<Delivery>>,
    /// When the buffers open regardless, ms.
    pub(super) deadline_ms: u64,
}

impl Incoming {
    /// True if messages from `origin` may be delivered now.
    pub(super) fn is_open(&self, origin: &UniqueAddress) -> bool {
        self.acked.contains(origin) || self.expected.as_ref().is_some_and(|e| !e.contains(origin))
    }

    /// True once every expected region has acknowledged.
    pub(super) fn is_complete(&self) -> bool {
        self.expected
            .as_ref()
            .is_some_and(|e| e.iter().all(|r| self.acked.contains(r)))
    }
}

/// The old home's side: which regions acknowledged the new home.
#[derive(Debug, Default)]
pub(super) struct Outgoing {
    pub(super) expected: Option<BTreeSet<UniqueAddress>>,
    pub(super) acked: BTreeSet<UniqueAddress>,
}

/// An entity's status in its shard.
#[derive(Debug)]
pub(super) enum EntityStatus {
    /// Running.
    Active,
    /// Stopping after passivation; messages wait here for its next incarnation.
    Passivating(VecDeque<Delivery>),
    /// Its start is being recorded (remember-entities); messages wait here.
    RememberingStart(VecDeque<Delivery>),
    /// Stopping for good (handoff, shutdown).
    Stopping,
}

/// One entity's cell.
#[derive(Debug)]
pub(super) struct EntityCell {
    pub(super) status: EntityStatus,
    pub(super) last_used_ms: u64,
    /// Position in the LRU (with an active-entity limit).
    pub(super) lru: u64,
}

/// One shard hosted on this node.
#[derive(Debug)]
pub(super) struct Shard {
    pub(super) phase: Phase,
    pub(super) entities: BTreeMap<EntityId, EntityCell>,
    pub(super) incoming: Option<Incoming>,
    pub(super) outgoing: Outgoing,
    /// A `HandOff` that arrived while this shard's own incoming handoff was still open.
    pub(super) pending_handoff: Option<Option<UniqueAddress>>,
    pub(super) remember: RememberState,
}

impl Shard {
    /// Hosted here: active, or handing its entities off (not receiving yet, not only
    /// forwarding).
    pub(super) fn is_hosting(&self) -> bool {
        matches!(self.phase, Phase::Active | Phase::HandingOff { .. })
    }

    /// Handing off or forwarding, or waiting for acknowledgements as the new home.
    pub(super) fn in_handoff(&self) -> bool {
        !matches!(self.phase, Phase::Active) || self.incoming.is_some()
    }

    /// Forwarding after the stop.
    pub(super) fn is_forwarding(&self) -> bool {
        matches!(self.phase, Phase::Forwarding { .. })
    }

    /// `Some(to)` while handing off or forwarding.
    pub(super) fn handed_to(&self) -> Option<Option<&UniqueAddress>> {
        match &self.phase {
            Phase::HandingOff { to, .. } => Some(to.as_ref()),
            Phase::Forwarding { to, .. } => Some(Some(to)),
            _ => None,
        }
    }

    /// Entities (any status), count.
    pub(super) fn entity_count(&self) -> usize {
        self.entities.len()
    }

    /// Entities that are started and not stopped.
    pub(super) fn live_entities(&self) -> impl Iterator<Item = &EntityId> {
        self.entities
            .iter()
            .filter(|(_, c)| !matches!(c.status, EntityStatus::RememberingStart(_)))
            .map(|(e, _)| e)
    }
}
