//! [`SimNode`]: one simulated node — its membership layer, its other protocol layers, and
//! what the simulator keeps about it (crashed, paused, quarantined incarnations, the
//! coordinated shutdown, its pending timer).

use std::collections::BTreeSet;

use concord_core::{ClusterCore, ShutdownReason, UniqueAddress};

use crate::hosted::HostedMachine;
use crate::membership::SimMembership;

/// One simulated node (the current incarnation at its address).
pub struct SimNode {
    /// The membership layer: [`ClusterCore`] on its real host and effects.
    pub membership: SimMembership,
    /// The other protocol machines of this node, routed by protocol id.
    pub machines: Vec<Box<dyn HostedMachine>>,
    /// Incarnations this node refuses (the membership layer's quarantines).
    pub quarantined: BTreeSet<UniqueAddress>,
    /// False once crashed (messages to it are lost, its timers stop).
    pub alive: bool,
    /// Paused (like SIGSTOP) until this time, ms.
    pub paused_until: Option<u64>,
    /// The reason of this node's coordinated shutdown once the core asked to start it
    /// (through the membership layer's effects, as in the tokio runtime).
    pub coordinated_shutdown: Option<ShutdownReason>,
    /// The time of this node's timer event in the queue, ms: one pending timer per node, so
    /// the queue does not fill with stale timers (one per delivered message otherwise).
    pub(crate) timer_at: Option<u64>,
}

impl SimNode {
    /// The membership machine.
    pub fn core(&self) -> &ClusterCore {
        self.membership.core()
    }

    /// Alive and not shut down by the protocol.
    pub fn is_running(&self) -> bool {
        self.alive && self.core().shutdown_reason().is_none()
    }

    /// One line describing this node's view, for tracing a failing seed: whether it runs,
    /// each member as `host:status:up-number`, and how many members it sees unreachable.
    pub fn membership_line(&self) -> String {
        let members: Vec<String> = self
            .core()
            .latest_gossip()
            .members
            .values()
            .map(|m| {
                format!(
                    "{}:{:?}:{}",
                    m.unique_address.address.host, m.status, m.up_number
                )
            })
            .collect();
        format!(
            "run={} {:?} unreachable={}",
            self.is_running(),
            members,
            self.core().membership_state().unreachable_members().len()
        )
    }

    /// The earliest deadline of all its machines, ms.
    pub(crate) fn next_timeout(&self) -> Option<u64> {
        self.machines
            .iter()
            .filter_map(|m| m.next_timeout())
            .chain(self.membership.host.next_timeout())
            .min()
    }
}
