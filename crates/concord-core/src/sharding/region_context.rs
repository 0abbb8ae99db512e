//! The [`super::region::Region`]'s interface with the rest of [`super::ClusterSharding`]:
//! what it borrows for one step (the settings, this node, the membership view, the shared
//! outputs — and the loopback queue, for messages to this node's own coordinator or
//! shards — and the counters), what it is told of a shard hosted here ([`LocalShard`]),
//! and what it hands back for the machine to do with such a shard ([`HomeStep`],
//! [`HostStep`]). The region owns everything else it uses; it reaches the coordinator only
//! through messages, and the shards hosted here only through this interface (Akka's
//! `ShardRegion` talks to its `Shard` children by messages, too).

use std::collections::VecDeque;

use crate::address::UniqueAddress;
use crate::membership_view::MembershipView;

use super::api::ShardingStats;
use super::message::ShardingBody;
use super::outbox::{self, ShardingOutputs};
use super::settings::ShardingSettings;

/// The machine's parts a region step may use; built by the machine for each step.
pub(super) struct RegionContext<'a> {
    /// The sharding settings of the entity type.
    pub(super) settings: &'a ShardingSettings,
    /// This node (the region's).
    pub(super) self_node: &'a UniqueAddress,
    /// The membership as this node sees it.
    pub(super) view: &'a MembershipView,
    /// Transmits, events and timers for the host.
    pub(super) out: &'a mut ShardingOutputs,
    /// Messages to this node itself, handled after the current step.
    pub(super) loopback: &'a mut VecDeque<ShardingBody>,
    /// The machine's counters.
    pub(super) stats: &'a mut ShardingStats,
}

impl RegionContext<'_> {
    /// Sends `body` to `to` (a region, or the coordinator, on that node).
    pub(super) fn send(&mut self, to: &UniqueAddress, body: ShardingBody) {
        outbox::send(
            self.out,
            self.loopback,
            &self.settings.type_name,
            self.self_node,
            to,
            body,
        );
    }

    /// True if `node` is a member the region can talk to (in the view, not Removed).
    pub(super) fn is_member(&self, node: &UniqueAddress) -> bool {
        self.view.is_member(node)
    }
}

/// What the region knows of a shard's life on this node (the shard is not the region's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum LocalShard {
    /// Not hosted here.
    Absent,
    /// Hosted here, not handing off (active, or receiving as a handoff's new home).
    Hosted,
    /// Handing off here, its entities still stopping.
    HandingOff,
    /// Handed off to the node, forwarding what arrives until every region acknowledged.
    Forwarding(UniqueAddress),
}

/// What the machine does after the region took a `ShardHome` naming a home.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum HomeStep {
    /// Nothing more (the message was refused, or answered).
    Ignore,
    /// Flush the shard's buffer to its home.
    Flush,
    /// The shard hosted here is confirmed as home, then the buffer flushed.
    Confirm,
    /// The shard starts here, then the buffer is flushed.
    Create,
}

/// What the machine does after the region took a `HostShard`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum HostStep {
    /// Nothing more (refused, or already answered).
    Ignore,
    /// Create the shard (receiving from the given old home, if any), then `ShardStarted`.
    Create(Option<UniqueAddress>),
    /// The shard hosted here is confirmed as home, then `ShardStarted`.
    Confirm,
    /// Answer `ShardStarted` only.
    Started,
}
