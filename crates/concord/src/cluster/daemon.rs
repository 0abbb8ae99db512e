//! The membership driver task: owns the [`ClusterCore`], feeds it inbound messages,
//! commands and timer ticks, and carries its outputs out — messages to the transport,
//! quarantines and lease operations to the runtime, a new [`MembershipView`] and event
//! batches to subscribers, and the start of the coordinated shutdown when the core asks
//! for it. Protocol decisions all live in the core.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use concord_core::{
    Address, ClusterCore, ClusterMessage, CommandError, LeaseRequest, MemberStatus, ShutdownReason,
};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use super::codec::MembershipCodec;
use super::membership_record::{self, RecordFile};
use super::subscription::EventBatch;
use super::Shared;
use crate::clock::{sleep_until, Clock};
use crate::lease::Lease;
use crate::metrics;
use crate::remote::{Inbound, ProtocolSender, Transport, TransportEvent};

/// How long a graceful stop waits for queued messages to be written, at most (it goes on
/// as soon as every lane's queue is empty; a loaded machine may need more than a moment).
const DRAIN_ON_STOP: Duration = Duration::from_secs(2);

/// How long a stop waits for the listening socket to close, at most.
const LISTENER_CLOSE_LIMIT: Duration = Duration::from_secs(2);

type Reply = oneshot::Sender<Result<(), CommandError>>;

/// Requests from [`super::Cluster`] handles and the coordinated shutdown's tasks.
pub(crate) enum Command {
    Join(Address, Reply),
    JoinSeedNodes(Vec<Address>, Reply),
    Leave(Address, Reply),
    Down(Address, Reply),
    PrepareForFullShutdown(Reply),
    /// Replaces the island probe's extra targets (`ClusterCore::set_island_probe_targets`).
    IslandProbeTargets(Vec<Address>),
    /// The `cluster-exiting` phase is over (`ClusterCore::exiting_completed`).
    ExitingCompleted(oneshot::Sender<()>),
    /// The `cluster-shutdown` phase: stop, then close remoting.
    Shutdown(oneshot::Sender<()>),
    /// Abrupt stop (like a crash).
    Stop,
}

pub(crate) struct Daemon {
    pub(crate) core: ClusterCore,
    pub(crate) clock: Clock,
    pub(crate) sender: ProtocolSender<MembershipCodec>,
    pub(crate) transport: Transport,
    pub(crate) shared: Arc<Shared>,
    pub(crate) views: watch::Sender<Arc<concord_core::MembershipView>>,
    pub(crate) ended: watch::Sender<Option<ShutdownReason>>,
    pub(crate) lease: Option<Arc<dyn Lease>>,
    pub(crate) lease_results: (mpsc::UnboundedSender<bool>, mpsc::UnboundedReceiver<bool>),
    pub(crate) published: u64,
    /// When the membership metrics were last recorded, ms: the counters (gossip rounds,
    /// resolver decisions) move without membership changes, so they are recorded at least
    /// once a second too.
    pub(crate) metrics_recorded_ms: u64,
    pub(crate) node_label: String,
    /// When refusals were last logged, ms, and the counters then.
    pub(crate) refusals_logged: (u64, concord_core::CoreStats),
    /// Where the membership record is kept (`None`: `cluster.membership-record = off`).
    pub(crate) record_dir: Option<std::path::PathBuf>,
    /// The cluster identity the record was last written for (`Some(None)`: a cluster
    /// without identity); `None` until written.
    pub(crate) record_written: Option<Option<concord_core::ClusterIdentity>>,
}

impl Daemon {
    pub(crate) async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut inbound: mpsc::Receiver<Inbound<ClusterMessage>>,
        mut transport_events: mpsc::UnboundedReceiver<TransportEvent>,
    ) {
        info!(
            uid = self.core.self_unique_address().uid,
            "cluster node started"
        );
        self.flush();
        loop {
            let deadline = self
                .core
                .poll_timeout()
                .map(|t| tokio::time::Instant::from_std(self.clock.instant_at(t)));
            tokio::select! {
                biased;
                cmd = commands.recv() => match cmd {
                    Some(Command::Stop) | None => {
                        self.stop().await;
                        return;
                    }
                    Some(Command::Shutdown(reply)) => {
                        self.shutdown().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(c) => self.handle_command(c),
                },
                msg = inbound.recv() => match msg {
                    Some(m) => self.handle_inbound(m),
                    None => {
                        self.stop().await;
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
        }
    }

    fn handle_inbound(&mut self, batch: Inbound<ClusterMessage>) {
        let now = self.clock.now_ms();
        for (message, bytes) in batch.messages {
            metrics::message_received(&self.node_label, message.kind(), bytes);
            if let ClusterMessage::HeartbeatRsp {
                creation_time_ms, ..
            } = &message
            {
                let rtt = now.saturating_sub(*creation_time_ms);
                self.shared
                    .max_heartbeat_rtt_ms
                    .fetch_max(rtt, Ordering::Relaxed);
                metrics::heartbeat_rtt(&self.node_label, rtt);
            }
            self.core.handle_message(now, &batch.from, message);
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
            Command::IslandProbeTargets(t) => {
                self.core.set_island_probe_targets(t);
                return;
            }
            Command::ExitingCompleted(r) => {
                self.core.exiting_completed(now);
                let _ = r.send(());
                return;
            }
            Command::Shutdown(_) | Command::Stop => return,
        };
        let _ = reply.send(result);
    }

    /// Carries the core's outputs out.
    fn flush(&mut self) {
        while let Some(t) = self.core.poll_transmit() {
            let kind = t.message.kind();
            let gossip = t.message.is_gossip();
            let bytes = self.sender.send(&t);
            metrics::message_sent(&self.node_label, kind, bytes, gossip);
        }
        while let Some(node) = self.core.poll_quarantine() {
            self.transport.quarantine(&node);
        }
        while let Some(r) = self.core.poll_lease_request() {
            self.lease_request(r);
        }
        let mut events = Vec::new();
        while let Some(e) = self.core.poll_event() {
            events.push(e);
        }
        // When the coordinated shutdown starts is the core's decision (the simulator takes
        // the same one): Exiting, Downed, or the core's own shutdown.
        while let Some(reason) = self.core.poll_coordinated_shutdown() {
            self.shared.shutdown.run(reason);
        }
        if let Some(reason) = self.core.shutdown_reason() {
            self.ended.send_if_modified(|e| {
                let changed = e.is_none();
                e.get_or_insert(reason);
                changed
            });
        }
        let version = self.core.state_changes();
        let now = self.clock.now_ms();
        self.publish_stats(now);
        let changed = !events.is_empty() || version != self.published;
        if changed || now.saturating_sub(self.metrics_recorded_ms) >= 1000 {
            self.metrics_recorded_ms = now;
            if !changed {
                let view = self.views.borrow().clone();
                metrics::record_membership(&self.node_label, &view, &self.core.stats());
            }
        }
        if changed {
            self.write_membership_record();
            self.published = version;
            let view = Arc::new(self.core.membership_view());
            metrics::record_membership(&self.node_label, &view, &self.core.stats());
            // The view first, then the batch: see `Subscription::new`.
            self.views.send_replace(view.clone());
            if !events.is_empty() {
                let _ = self
                    .shared
                    .batches
                    .send(Arc::new(EventBatch { view, events }));
            }
        }
    }

    /// Writes the membership record once this node is Up or WeaklyUp in a cluster, and again
    /// when the cluster's identity changes (in a blocking task: temp file, fsync, rename).
    fn write_membership_record(&mut self) {
        let Some(dir) = self.record_dir.clone() else {
            return;
        };
        let up = self.core.is_initialized()
            && self.core.shutdown_reason().is_none()
            && matches!(
                self.core.self_member().status,
                MemberStatus::Up | MemberStatus::WeaklyUp
            );
        let identity = self.core.cluster_identity();
        if !up || self.record_written == Some(identity) {
            return;
        }
        self.record_written = Some(identity);
        let record = RecordFile::new(self.core.self_unique_address(), identity);
        tokio::task::spawn_blocking(move || match membership_record::write(&dir, &record) {
            Ok(()) => info!(
                file = %membership_record::path(&dir).display(),
                cluster = record.cluster_id.as_deref().unwrap_or("unknown"),
                "membership record written"
            ),
            Err(e) => warn!(
                dir = %dir.display(), error = %e,
                "cannot write the membership record; after a restart this node may form a new cluster on seed-node-timeout"
            ),
        });
    }

    /// Shares the core's counters and logs, at most once per 10 s, how many messages it
    /// refused since the last line (strangers' gossip, implausible clocks, join floods).
    fn publish_stats(&mut self, now: u64) {
        let stats = self.core.stats();
        let refused = |s: &concord_core::CoreStats| {
            (
                s.refused_non_member,
                s.implausible_clocks,
                s.join_requests_throttled,
            )
        };
        let (a, b, c) = refused(&stats);
        let (a0, b0, c0) = refused(&self.refusals_logged.1);
        if (a, b, c) != (a0, b0, c0) && now.saturating_sub(self.refusals_logged.0) >= 10_000 {
            warn!(
                from_non_members = a - a0,
                implausible_clocks = b - b0,
                join_requests_throttled = c - c0,
                "refused membership messages since the last report"
            );
            self.refusals_logged = (now, stats);
        }
        *self
            .shared
            .core_stats
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = stats;
        let report = super::IslandReport {
            identity: self.core.cluster_identity(),
            other_clusters: self.core.other_clusters().cloned().collect(),
        };
        let mut islands = self
            .shared
            .islands
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if *islands != report {
            metrics::record_other_clusters(&self.node_label, report.other_clusters.len());
            *islands = report;
        }
    }

    fn lease_request(&mut self, r: LeaseRequest) {
        let Some(lease) = self.lease.clone() else {
            if r == LeaseRequest::Acquire {
                let _ = self.lease_results.0.send(false);
            }
            return;
        };
        let tx = self.lease_results.0.clone();
        match r {
            LeaseRequest::Acquire => {
                tokio::spawn(async move {
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
            LeaseRequest::Release => {
                tokio::spawn(async move {
                    match lease.release().await {
                        Ok(_) => info!("lease released"),
                        Err(e) => warn!(error = %e, "lease release failed"),
                    }
                });
            }
            _ => {}
        }
    }

    /// The `cluster-shutdown` phase: the last outputs go out, then remoting closes.
    async fn shutdown(&mut self) {
        self.flush();
        let reason = self
            .core
            .shutdown_reason()
            .or(self.shared.shutdown.reason())
            .unwrap_or(ShutdownReason::Requested);
        info!(?reason, "membership stopped; closing remoting");
        self.transport.drain(DRAIN_ON_STOP).await;
        self.transport.shutdown();
        self.transport.listener_closed(LISTENER_CLOSE_LIMIT).await;
        self.ended.send_if_modified(|e| {
            let changed = e.is_none();
            e.get_or_insert(reason);
            changed
        });
    }

    async fn stop(&mut self) {
        warn!("cluster node stopped without leaving");
        self.transport.shutdown();
        self.transport.listener_closed(LISTENER_CLOSE_LIMIT).await;
        self.ended.send_if_modified(|e| {
            let changed = e.is_none();
            e.get_or_insert(ShutdownReason::Stopped);
            changed
        });
        self.shared.shutdown.abort(ShutdownReason::Stopped);
    }
}
