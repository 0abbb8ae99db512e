//! What the [`super::coordinator::Coordinator`] borrows from [`super::ClusterSharding`] for
//! one step: the settings, this node, the membership view, the shared outputs (and the
//! loopback queue, for messages to a region on this node), the machine's replicator (where
//! the coordinator persists its state, as Akka's `DDataShardCoordinator` does through the
//! sharding replicator) with its open requests, and the counters. The coordinator owns
//! everything else it uses; it reaches regions and shards only through messages.

use std::collections::VecDeque;

use crate::address::UniqueAddress;
use crate::ddata::Replicator;
use crate::membership_view::MembershipView;

use super::api::ShardingStats;
use super::ddata_requests::DdataRequests;
use super::message::ShardingBody;
use super::outbox::{self, ShardingOutputs};
use super::settings::ShardingSettings;

/// The machine's parts a coordinator step may use; built by the machine for each input.
pub(super) struct CoordinatorContext<'a> {
    /// The sharding settings of the entity type.
    pub(super) settings: &'a ShardingSettings,
    /// This node (where the coordinator singleton runs).
    pub(super) self_node: &'a UniqueAddress,
    /// The membership as this node sees it.
    pub(super) view: &'a MembershipView,
    /// Transmits, events and timers for the host.
    pub(super) out: &'a mut ShardingOutputs,
    /// Messages to this node's own region, handled after the current step.
    pub(super) loopback: &'a mut VecDeque<ShardingBody>,
    /// The machine's replicator (the coordinator's state and remembered shards).
    pub(super) replicator: &'a mut Replicator,
    /// Open replicator requests, to route their answers.
    pub(super) ddata: &'a mut DdataRequests,
    /// The machine's counters.
    pub(super) stats: &'a mut ShardingStats,
}

impl CoordinatorContext<'_> {
    /// Sends `body` to the region (or proxy) on `to`.
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

    /// True if `node` is a member the coordinator can talk to (in the view, not Removed).
    pub(super) fn is_member(&self, node: &UniqueAddress) -> bool {
        self.view.is_member(node)
    }
}
