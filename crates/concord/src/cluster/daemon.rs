//! The cluster daemon task: owns the [`ClusterCore`], feeds it inbound messages, commands
//! and timer ticks, and carries its outputs to the transport, subscribers and the
//! snapshot the management API reads. Protocol decisions all live in the core.

use std::sync::Arc;
use std::time::Duration;

use concord_core::{
    Address, ClusterCore, ClusterEvent, CommandError, CurrentClusterState, ShutdownReason,
    UniqueAddress,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tracing::{info, warn};

use super::ClusterSnapshot;
use crate::clock::Clock;
use crate::config::Config;
use crate::lease::Lease;
use crate::metrics;
use crate::remote::transport::{Inbound, Transport, TransportEvent};

/// Delay between a member's removal and its quarantine (Akka `quarantine-removed-node-after`).
const QUARANTINE_REMOVED_NODE_AFTER: Duration = Duration::from_secs(5);

type Reply = oneshot::Sender<Result<(), CommandError>>;

/// Requests from [`super::Cluster`] handles.
pub(crate) enum Command {
    Join(Address, Reply),
    JoinSeedNodes(Vec<Address>, Reply),
    Leave(Address, Reply),
    Down(Address, Reply),
    PrepareForFullShutdown(Reply),
    Subscribe(oneshot::Sender<(CurrentClusterState, broadcast::Receiver<ClusterEvent>)>),
    Stop,
}

pub(crate) struct Daemon {
    core: ClusterCore,
    clock: Clock,
    transport: Transport,
    events: broadcast::Sender<ClusterEvent>,
    snapshot: watch::Sender<Arc<ClusterSnapshot>>,
    terminated: watch::Sender<Option<ShutdownReason>>,
    published_changes: Option<u64>,
    node_label: String,
    lease: Option<Arc<dyn Lease>>,
    lease_results: (mpsc::UnboundedSender<bool>, mpsc::UnboundedReceiver<bool>),
}

impl Daemon {
    pub(crate) fn new(
        config: &Config,
        self_unique_address: UniqueAddress,
        transport: Transport,
        snapshot: watch::Sender<Arc<ClusterSnapshot>>,
        terminated: watch::Sender<Option<ShutdownReason>>,
        lease: Option<Arc<dyn Lease>>,
    ) -> Self {
        let clock = Clock::new();
        let roles = config.cluster.roles.iter().cloned().collect();
        let seed = self_unique_address.uid ^ rand::random::<u64>();
        let core = ClusterCore::new(
            self_unique_address,
            roles,
            config.cluster.app_version.clone(),
            config.cluster_settings(),
            clock.now_ms(),
            seed,
        );
        let (events, _) = broadcast::channel(1024);
        let node_label = core.self_address().to_string();
        Daemon {
            core,
            clock,
            transport,
            events,
            snapshot,
            terminated,
            published_changes: None,
            node_label,
            lease,
            lease_results: mpsc::unbounded_channel(),
        }
    }

    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut inbound: mpsc::Receiver<Inbound>,
        mut transport_events: mpsc::UnboundedReceiver<TransportEvent>,
    ) {
        info!(
            uid = self.core.self_unique_address().uid,
            "cluster node started"
        );
        self.flush();
        loop {
            let deadline = self.core.poll_timeout().map(|t| self.clock.instant_at(t));
            tokio::select! {
                biased;
                cmd = commands.recv() => match cmd {
                    Some(Command::Stop) | None => {
                        self.finish(ShutdownReason::Stopped).await;
                        return;
                    }
                    Some(c) => self.handle_command(c),
                },
                msg = inbound.recv() => match msg {
                    Some(m) => {
                        metrics::message_received(&self.node_label, &m);
                        let now = self.clock.now_ms();
                        self.core.handle_message(now, &m.from, m.message);
                    }
                    None => {
                        self.finish(ShutdownReason::Stopped).await;
                        return;
                    }
                },
                Some(TransportEvent::QuarantinedBy(peer)) = transport_events.recv() => {
                    self.core.handle_quarantined_by_peer(&peer);
                }
                Some(granted) = self.lease_results.1.recv() => {
                    info!(granted, "lease acquisition result");
                    self.core.handle_lease_result(granted);
                }
                _ = sleep_until(deadline) => {
                    let now = self.clock.now_ms();
                    self.core.handle_timeout(now);
                }
            }
            self.flush();
            if let Some(reason) = self.core.shutdown_reason() {
                self.finish(reason).await;
                return;
            }
        }
    }

    fn handle_command(&mut self, c: Command) {
        let now = self.clock.now_ms();
        let (result, reply) = match c {
            Command::Join(a, r) => (self.core.join(now, &a), r),
            Command::JoinSeedNodes(s, r) => (self.core.join_seed_nodes(now, &s), r),
            Command::Leave(a, r) => (self.core.leave(now, &a), r),
            Command::Down(a, r) => (self.core.down(now, &a), r),
            Command::PrepareForFullShutdown(r) => {
                (self.core.prepare_for_full_cluster_shutdown(now), r)
            }
            Command::Subscribe(r) => {
                // Drain pending events first so the snapshot and the stream do not overlap.
                self.flush();
                let _ = r.send((self.core.current_cluster_state(), self.events.subscribe()));
                return;
            }
            Command::Stop => return,
        };
        let _ = reply.send(result);
    }

    /// Carries the core's outputs out: messages to the transport, events to subscribers
    /// (and quarantine of removed incarnations), a fresh snapshot when the state changed.
    fn flush(&mut self) {
        while let Some(t) = self.core.poll_transmit() {
            metrics::message_sent(&self.node_label, &t);
            self.transport.send(t);
        }
        while let Some(delay_ms) = self.core.poll_lease_request() {
            let tx = self.lease_results.0.clone();
            match self.lease.clone() {
                Some(lease) => {
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                        let granted = match lease.acquire().await {
                            Ok(g) => g,
                            Err(e) => {
                                warn!(error = %e, "lease acquisition failed");
                                false
                            }
                        };
                        let _ = tx.send(granted);
                    });
                }
                None => {
                    let _ = tx.send(false);
                }
            }
        }
        let mut changed = false;
        while let Some(e) = self.core.poll_event() {
            changed = true;
            if let ClusterEvent::MemberRemoved { member, .. } = &e {
                if member.unique_address != *self.core.self_unique_address() {
                    // Akka's quarantine-removed-node-after: give the removed node time to
                    // receive the gossip that tells it so, then refuse it for good.
                    let transport = self.transport.clone();
                    let node = member.unique_address.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(QUARANTINE_REMOVED_NODE_AFTER).await;
                        transport.quarantine(&node);
                    });
                }
            }
            let _ = self.events.send(e);
        }
        let version = self.core.state_changes();
        if changed || self.published_changes != Some(version) {
            self.published_changes = Some(version);
            let snap = ClusterSnapshot {
                state: self.core.current_cluster_state(),
                self_member: self.core.is_initialized().then(|| self.core.self_member()),
                stats: self.core.stats(),
            };
            metrics::record_state(&snap, self.core.self_unique_address());
            self.snapshot.send_replace(Arc::new(snap));
        }
    }

    async fn finish(&mut self, reason: ShutdownReason) {
        match reason {
            ShutdownReason::Stopped => warn!("cluster node stopped without leaving"),
            r => info!(reason = ?r, "cluster node shutting down"),
        }
        self.flush();
        if reason != ShutdownReason::Stopped {
            // Let the last gossip reach the peers.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        self.transport.shutdown();
        let _ = self.terminated.send(Some(reason));
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
