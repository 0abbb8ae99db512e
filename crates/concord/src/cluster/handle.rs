//! The handle an application holds ([`Cluster`]) and what it shares with the membership
//! layer's host (the daemon).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use concord_core::{Address, CommandError, MembershipView, ShutdownReason, UniqueAddress};
use futures_channel::oneshot;
use tokio::sync::watch;

use super::island_report::IslandReport;
use super::shared::Shared;
use crate::coordinated_shutdown::CoordinatedShutdown;

pub(crate) use super::command::Command;
pub use super::subscription::{EventBatch, Subscription, SubscriptionItem};

/// Errors of [`Cluster`] operations.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The command was refused; nothing changed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The node's membership has shut down.
    #[error("the cluster node has shut down")]
    Terminated,
}

/// Handle to this node's membership. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    pub(super) shared: Arc<Shared>,
}

impl Cluster {
    /// This node's address.
    pub fn self_address(&self) -> &Address {
        &self.shared.self_unique_address.address
    }

    /// This node's unique address (address + uid of this incarnation).
    pub fn self_unique_address(&self) -> &UniqueAddress {
        &self.shared.self_unique_address
    }

    /// The bound remoting socket.
    pub fn remoting_addr(&self) -> SocketAddr {
        self.shared.remoting_addr
    }

    async fn command<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .commands
            .send(make(tx))
            .await
            .map_err(|_| ClusterError::Terminated)?;
        rx.await.map_err(|_| ClusterError::Terminated)
    }

    /// Joins the cluster of the node at `address` (own address: form a new cluster).
    pub async fn join(&self, address: Address) -> Result<(), ClusterError> {
        Ok(self.command(|r| Command::Join(address, r)).await??)
    }

    /// Joins via seed nodes (InitJoin to all, Join the first that answers).
    pub async fn join_seed_nodes(&self, seeds: Vec<Address>) -> Result<(), ClusterError> {
        Ok(self.command(|r| Command::JoinSeedNodes(seeds, r)).await??)
    }

    /// Graceful leave of the member at `address` (this node or another). A leaving node
    /// runs its coordinated shutdown once it is Exiting, then stops.
    pub async fn leave(&self, address: Address) -> Result<(), ClusterError> {
        Ok(self.command(|r| Command::Leave(address, r)).await??)
    }

    /// Marks the member at `address` Down.
    pub async fn down(&self, address: Address) -> Result<(), ClusterError> {
        Ok(self.command(|r| Command::Down(address, r)).await??)
    }

    /// Starts a full cluster shutdown (Up → PreparingForShutdown → ReadyForShutdown).
    pub async fn prepare_for_full_cluster_shutdown(&self) -> Result<(), ClusterError> {
        Ok(self.command(Command::PrepareForFullShutdown).await??)
    }

    /// Replaces the addresses, beyond the seed nodes, that the island probe sends InitJoin
    /// to every 5 s (`concord_core::cluster_core::ISLAND_PROBE_INTERVAL_MS`): where a member of another
    /// cluster of this system name may run. Cluster Bootstrap's island watch hands over
    /// the seed nodes its contact points report. This node's address, members of its
    /// cluster and other system names are dropped; at most 16 are kept
    /// (`concord_core::cluster_core::MAX_ISLAND_PROBE_TARGETS`). See docs/MEMBERSHIP.md,
    /// "Island clusters".
    pub async fn set_island_probe_targets(
        &self,
        targets: Vec<Address>,
    ) -> Result<(), ClusterError> {
        self.shared
            .commands
            .send(Command::IslandProbeTargets(targets))
            .await
            .map_err(|_| ClusterError::Terminated)
    }

    /// Reports the exiting tasks done (the `cluster-exiting-done` phase).
    pub(crate) async fn exiting_completed(&self) -> Result<(), ClusterError> {
        self.command(Command::ExitingCompleted).await
    }

    /// Stops the daemon and closes remoting (the `cluster-shutdown` phase).
    pub(crate) async fn shutdown_daemon(&self) -> Result<(), ClusterError> {
        self.command(Command::Shutdown).await
    }

    /// The membership view: a `watch` whose value is replaced atomically after every
    /// change (members with status, roles, up-number and app-version; reachability; leader
    /// and role leaders; `oldest(role)`; convergence).
    pub fn membership(&self) -> watch::Receiver<Arc<MembershipView>> {
        self.shared.views.clone()
    }

    /// The current view.
    pub fn view(&self) -> Arc<MembershipView> {
        self.shared.views.borrow().clone()
    }

    /// Subscribes to membership events: the current view first, then every event; a
    /// subscriber that lags gets a fresh view instead of a gap (see [`Subscription`]).
    pub fn subscribe(&self) -> Subscription {
        Subscription::new(&self.shared.batches, self.shared.views.clone())
    }

    /// Why the membership protocol ended on this node (removed, downed, ...), once it has.
    pub fn membership_ended(&self) -> Option<ShutdownReason> {
        *self.shared.ended.borrow()
    }

    /// Waits until the membership protocol has ended on this node.
    pub async fn wait_membership_ended(&self) -> ShutdownReason {
        let mut rx = self.shared.ended.clone();
        loop {
            if let Some(r) = *rx.borrow_and_update() {
                return r;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().unwrap_or(ShutdownReason::Stopped);
            }
        }
    }

    /// The node's coordinated shutdown.
    pub fn coordinated_shutdown(&self) -> &CoordinatedShutdown {
        &self.shared.shutdown
    }

    /// Why the node is shutting down (or shut down), once its coordinated shutdown started.
    pub fn shutdown_reason(&self) -> Option<ShutdownReason> {
        self.shared.shutdown.reason()
    }

    /// Waits until the node has shut down (every coordinated-shutdown phase ran).
    pub async fn terminated(&self) -> ShutdownReason {
        self.shared.shutdown.completed().await
    }

    /// The membership machine's counters (gossip, messages refused from non-members,
    /// implausible vector clocks, throttled join requests, ...), as of its last output.
    pub fn core_stats(&self) -> concord_core::CoreStats {
        *self
            .shared
            .core_stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The split brain resolver decisions this node carried out, oldest first (the latest
    /// [`concord_core::cluster_core::SBR_DECISIONS_KEPT`]), as of the membership machine's last output.
    pub fn recent_sbr_decisions(&self) -> Vec<concord_core::SbrDecisionRecord> {
        self.shared
            .sbr_decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// This node's cluster identity and the other clusters of its system name it found
    /// (island clusters), as of the membership machine's last output.
    pub fn island_report(&self) -> IslandReport {
        self.shared
            .islands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The largest heartbeat round trip (control lane) seen since the start or the last
    /// [`Cluster::take_max_heartbeat_rtt_ms`], ms.
    pub fn max_heartbeat_rtt_ms(&self) -> u64 {
        self.shared.max_heartbeat_rtt_ms.load(Ordering::Relaxed)
    }

    /// The latest heartbeat round trip (control lane), ms; 0 before the first.
    pub fn last_heartbeat_rtt_ms(&self) -> u64 {
        self.shared.last_heartbeat_rtt_ms.load(Ordering::Relaxed)
    }

    /// Like [`Cluster::max_heartbeat_rtt_ms`], and starts over from 0.
    pub fn take_max_heartbeat_rtt_ms(&self) -> u64 {
        self.shared.max_heartbeat_rtt_ms.swap(0, Ordering::Relaxed)
    }

    /// Stops the node at once without leaving (like a crash, for tests).
    pub async fn stop(&self) {
        if self.shared.commands.send(Command::Stop).await.is_err() {
            // The daemon is gone already.
            self.shared.shutdown.abort(ShutdownReason::Stopped);
        }
        self.shared.shutdown.completed().await;
    }
}
