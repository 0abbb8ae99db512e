//! The state every part of the transport shares: the association table (one queue per
//! lane per peer), quarantined incarnations, limits, counters and the shutdown signal. The
//! [`super::transport::Transport`] handle, the lane writers ([`super::association`]), the
//! handshakes and the inbound readers all hold it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use concord_core::{Address, Lane, UniqueAddress};
use tokio::sync::{mpsc, watch};

use super::faults::FaultTable;
use super::inbound_limits::InboundLimits;
use super::log_limit::LogLimiter;
use super::outbound_lane::LaneQueue;
use super::registry::ProtocolRegistry;
use super::settings::TransportSettings;
use super::stats::TransportStats;

/// Something the transport tells the membership daemon (which hands it to its host as a
/// completion).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportEvent {
    /// A peer refused our handshake because this incarnation is quarantined.
    QuarantinedBy(Address),
}

pub(crate) type Lanes = [Option<Arc<LaneQueue>>; 3];

pub(crate) struct Inner {
    pub(crate) self_address: UniqueAddress,
    pub(crate) settings: TransportSettings,
    pub(crate) registry: ProtocolRegistry,
    pub(crate) faults: FaultTable,
    pub(crate) events: mpsc::UnboundedSender<TransportEvent>,
    pub(crate) associations: Mutex<HashMap<Address, Lanes>>,
    pub(super) quarantined: RwLock<HashSet<UniqueAddress>>,
    pub(crate) stats: TransportStats,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(super) shut_down: AtomicBool,
    /// True while the accept loop holds the listening socket (see
    /// [`super::transport::Transport::listener_closed`]).
    pub(crate) listening: watch::Sender<bool>,
    pub(crate) log: LogLimiter,
    pub(crate) inbound: InboundLimits,
}

impl Inner {
    pub(crate) fn is_quarantined(&self, node: &UniqueAddress) -> bool {
        self.quarantined
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(node)
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Relaxed)
    }

    /// Called by a lane's writer that has been idle: true (and the queue is closed and
    /// forgotten) unless frames arrived or a sender holds a handle on the queue
    /// ([`Transport::outbound_lane`]).
    pub(crate) fn retire_lane(&self, to: &Address, lane: Lane, queue: &Arc<LaneQueue>) -> bool {
        let mut map = self.associations.lock().unwrap_or_else(|p| p.into_inner());
        // The map's and the writer's references; more means a handle is held.
        if Arc::strong_count(queue) > 2 || !queue.close_if_empty() {
            return false;
        }
        if let Some(lanes) = map.get_mut(to) {
            if lanes[lane.index()]
                .as_ref()
                .is_some_and(|q| Arc::ptr_eq(q, queue))
            {
                lanes[lane.index()] = None;
            }
            if lanes.iter().all(Option::is_none) {
                map.remove(to);
            }
        }
        true
    }
}
