//! [`Shared`]: what the [`super::Cluster`] handles and the membership host's effects share.

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use concord_core::{MembershipView, ShutdownReason, UniqueAddress};
use tokio::sync::{broadcast, mpsc, watch};

use super::command::Command;
use super::island_report::IslandReport;
use super::subscription::EventBatch;
use crate::coordinated_shutdown::CoordinatedShutdown;

/// What the handle and the membership host's effects share.
pub(crate) struct Shared {
    pub(crate) self_unique_address: UniqueAddress,
    pub(crate) commands: mpsc::Sender<Command>,
    pub(crate) views: watch::Receiver<Arc<MembershipView>>,
    pub(crate) batches: broadcast::Sender<Arc<EventBatch>>,
    pub(crate) ended: watch::Receiver<Option<ShutdownReason>>,
    pub(crate) shutdown: CoordinatedShutdown,
    pub(crate) remoting_addr: SocketAddr,
    pub(crate) max_heartbeat_rtt_ms: AtomicU64,
    /// The latest heartbeat round trip, ms (the dashboard's latency line).
    pub(crate) last_heartbeat_rtt_ms: AtomicU64,
    /// The core's counters as of its last output.
    pub(crate) core_stats: std::sync::Mutex<concord_core::CoreStats>,
    /// This node's cluster identity and the other clusters found, as of the core's last
    /// output.
    pub(crate) islands: std::sync::Mutex<IslandReport>,
    /// The split brain resolver decisions this node carried out, latest last (at most
    /// [`concord_core::cluster_core::SBR_DECISIONS_KEPT`]), as of the core's last output.
    pub(crate) sbr_decisions: std::sync::Mutex<Vec<concord_core::SbrDecisionRecord>>,
}
