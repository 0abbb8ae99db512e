//! [`MembershipEffects`]: the membership layer's part of its [`crate::host::LayerHost`].
//! The machine is the sans-IO [`ClusterCore`]; the effects turn [`Command`]s into its
//! operations, feed it lease results and the transport's quarantine reports
//! ([`MembershipCompletion`]), and after each turn ([`LayerEffects::flushed`]) carry out
//! what it asked for besides transmits: quarantines to the transport, lease requests, the
//! start of the coordinated shutdown, the end of membership, the new [`MembershipView`]
//! and the turn's event batch to subscribers, the membership record file and the metrics.
//! Protocol decisions all live in the core.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use concord_core::{
    ClusterCore, ClusterEvent, ClusterIdentity, ClusterMessage, CoreStats, LeaseRequest,
    MemberStatus, MembershipView, ShutdownReason,
};
use tokio::sync::watch;
use tracing::{info, warn};

use super::command::{Command, Exit, MembershipCompletion};
use super::island_report::IslandReport;
use super::membership_record::{self, RecordFile};
use super::shared::Shared;
use super::subscription::EventBatch;
use crate::clock::Clock;
use crate::host::{Effects, LayerEffects};
use crate::lease::Lease;
use crate::metrics;
use crate::remote::Transport;

/// The membership layer's effects; see the module docs.
pub(crate) struct MembershipEffects {
    /// The node's remoting: quarantines go here, and the runner closes it at the end.
    pub(super) transport: Transport,
    pub(super) shared: Arc<Shared>,
    views: watch::Sender<Arc<MembershipView>>,
    ended: watch::Sender<Option<ShutdownReason>>,
    lease: Option<Arc<dyn Lease>>,
    /// The clock, for heartbeat round trips (ms) as messages arrive.
    clock: Clock,
    /// The core's `state_changes` as of the last publication.
    published: u64,
    /// The turn's events, published as one batch at the end of the turn.
    events: Vec<ClusterEvent>,
    /// When the membership metrics were last recorded, ms: the counters (gossip rounds,
    /// resolver decisions) move without membership changes, so they are recorded at least
    /// once a second too (at the end of a turn).
    metrics_recorded_ms: u64,
    node_label: String,
    /// When refusals were last logged, ms, and the counters then.
    refusals_logged: (u64, CoreStats),
    /// Where the membership record is kept (`None`: `cluster.membership-record = off`).
    record_dir: Option<std::path::PathBuf>,
    /// The cluster identity the record was last written for (`Some(None)`: a cluster
    /// without identity); `None` until written.
    record_written: Option<Option<ClusterIdentity>>,
    /// How the host was asked to end (`None`: it has not been, or a queue closed).
    pub(super) exit: Option<Exit>,
}

impl MembershipEffects {
    /// Effects publishing to `views` and `ended` and sharing `shared` with the handles;
    /// `record_dir` is where the membership record is kept (`None`: off).
    pub(crate) fn new(
        transport: Transport,
        shared: Arc<Shared>,
        views: watch::Sender<Arc<MembershipView>>,
        ended: watch::Sender<Option<ShutdownReason>>,
        lease: Option<Arc<dyn Lease>>,
        clock: Clock,
        record_dir: Option<std::path::PathBuf>,
    ) -> Self {
        let node_label = shared.self_unique_address.address.to_string();
        MembershipEffects {
            transport,
            shared,
            views,
            ended,
            lease,
            clock,
            published: 0,
            events: Vec::new(),
            metrics_recorded_ms: 0,
            node_label,
            refusals_logged: (0, CoreStats::default()),
            record_dir,
            record_written: None,
            exit: None,
        }
    }

    /// The label of this node in metrics (its address).
    pub(crate) fn node_label(&self) -> &str {
        &self.node_label
    }

    /// Records why membership ended on this node, unless it was recorded before.
    pub(super) fn set_ended(&self, reason: ShutdownReason) {
        self.ended.send_if_modified(|e| {
            let changed = e.is_none();
            e.get_or_insert(reason);
            changed
        });
    }

    /// Writes the membership record once this node is Up or WeaklyUp in a cluster, and again
    /// when the cluster's identity changes (in a blocking task: temp file, fsync, rename).
    fn write_membership_record(&mut self, fx: &Effects<'_, Self>) {
        let Some(dir) = self.record_dir.clone() else {
            return;
        };
        let core = &*fx.machine;
        let up = core.is_initialized()
            && core.shutdown_reason().is_none()
            && matches!(
                core.self_member().status,
                MemberStatus::Up | MemberStatus::WeaklyUp
            );
        let identity = core.cluster_identity();
        if !up || self.record_written == Some(identity) {
            return;
        }
        self.record_written = Some(identity);
        let record = RecordFile::new(core.self_unique_address(), identity);
        fx.spawn_blocking(Box::new(move || {
            match membership_record::write(&dir, &record) {
                Ok(()) => info!(
                    file = %membership_record::path(&dir).display(),
                    cluster = record.cluster_id.as_deref().unwrap_or("unknown"),
                    "membership record written"
                ),
                Err(e) => warn!(
                    dir = %dir.display(), error = %e,
                    "cannot write the membership record; after a restart this node may form a new cluster on seed-node-timeout"
                ),
            }
        }));
    }

    /// Shares the core's counters and logs, at most once per 10 s, how many messages it
    /// refused since the last line (strangers' gossip, implausible clocks, join floods).
    fn publish_stats(&mut self, core: &ClusterCore, now: u64) {
        let stats = core.stats();
        let refused = |s: &CoreStats| {
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
        let report = IslandReport {
            identity: core.cluster_identity(),
            other_clusters: core.other_clusters().cloned().collect(),
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

    /// Starts a lease acquisition or release; the acquisition's outcome comes back as
    /// [`MembershipCompletion::LeaseResult`] (not granted at once without a lease).
    fn lease_request(&self, fx: &Effects<'_, Self>, r: LeaseRequest) {
        let tx = fx.completions().clone();
        let Some(lease) = self.lease.clone() else {
            if r == LeaseRequest::Acquire {
                tx.send(MembershipCompletion::LeaseResult(false));
            }
            return;
        };
        match r {
            LeaseRequest::Acquire => fx.spawn(Box::pin(async move {
                let granted = match lease.acquire().await {
                    Ok(g) => g,
                    Err(e) => {
                        warn!(error = %e, "lease acquisition failed");
                        false
                    }
                };
                tx.send(MembershipCompletion::LeaseResult(granted));
            })),
            LeaseRequest::Release => fx.spawn(Box::pin(async move {
                match lease.release().await {
                    Ok(_) => info!("lease released"),
                    Err(e) => warn!(error = %e, "lease release failed"),
                }
            })),
            _ => {}
        }
    }
}

impl LayerEffects for MembershipEffects {
    type Machine = ClusterCore;
    type Command = Command;
    type Completion = MembershipCompletion;

    fn name(&self) -> &'static str {
        "membership"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: Command) {
        let now = fx.now_ms;
        let core = &mut *fx.machine;
        let (result, reply) = match command {
            Command::Join(a, r) => (core.join(now, &a), r),
            Command::JoinSeedNodes(s, r) => (core.join_seed_nodes(now, &s), r),
            Command::Leave(a, r) => (core.leave(now, &a), r),
            Command::Down(a, r) => (core.down(now, &a), r),
            Command::PrepareForFullShutdown(r) => (core.prepare_for_full_cluster_shutdown(now), r),
            Command::IslandProbeTargets(t) => {
                core.set_island_probe_targets(t);
                return;
            }
            Command::ExitingCompleted(r) => {
                core.exiting_completed(now);
                let _ = r.send(());
                return;
            }
            Command::Shutdown(reply) => {
                self.exit = Some(Exit::Shutdown(reply));
                fx.stop();
                return;
            }
            Command::Stop => {
                self.exit = Some(Exit::Stop);
                fx.stop();
                return;
            }
        };
        let _ = reply.send(result);
    }

    fn completion(&mut self, fx: &mut Effects<'_, Self>, completion: MembershipCompletion) {
        match completion {
            MembershipCompletion::LeaseResult(granted) => {
                info!(granted, "lease acquisition result");
                fx.machine.handle_lease_result(granted);
            }
            MembershipCompletion::QuarantinedBy(peer) => {
                fx.machine.handle_quarantined_by_peer(&peer);
            }
        }
    }

    fn event(&mut self, _fx: &mut Effects<'_, Self>, event: ClusterEvent) {
        self.events.push(event);
    }

    fn received(&mut self, message: &ClusterMessage, bytes: usize) {
        metrics::message_received(&self.node_label, message.kind(), bytes);
        if let ClusterMessage::HeartbeatRsp {
            creation_time_ms, ..
        } = message
        {
            let rtt = self.clock.now_ms().saturating_sub(*creation_time_ms);
            self.shared
                .max_heartbeat_rtt_ms
                .fetch_max(rtt, Ordering::Relaxed);
            metrics::heartbeat_rtt(&self.node_label, rtt);
        }
    }

    /// No housekeeping tick: the core's own timers (gossip, heartbeats) end turns often
    /// enough for the once-a-second metrics.
    fn tick_interval_ms(&self) -> Option<u64> {
        None
    }

    fn flushed(&mut self, fx: &mut Effects<'_, Self>) {
        while let Some(node) = fx.machine.poll_quarantine() {
            self.transport.quarantine(&node);
        }
        while let Some(r) = fx.machine.poll_lease_request() {
            self.lease_request(fx, r);
        }
        let events = std::mem::take(&mut self.events);
        // When the coordinated shutdown starts is the core's decision (the simulator takes
        // the same one): Exiting, Downed, or the core's own shutdown.
        while let Some(reason) = fx.machine.poll_coordinated_shutdown() {
            self.shared.shutdown.run(reason);
        }
        if let Some(reason) = fx.machine.shutdown_reason() {
            self.set_ended(reason);
        }
        let version = fx.machine.state_changes();
        let now = fx.now_ms;
        self.publish_stats(fx.machine, now);
        let changed = !events.is_empty() || version != self.published;
        if changed || now.saturating_sub(self.metrics_recorded_ms) >= 1000 {
            self.metrics_recorded_ms = now;
            if !changed {
                let view = self.views.borrow().clone();
                metrics::record_membership(&self.node_label, &view, &fx.machine.stats());
            }
        }
        if changed {
            self.write_membership_record(fx);
            self.published = version;
            let view = Arc::new(fx.machine.membership_view());
            metrics::record_membership(&self.node_label, &view, &fx.machine.stats());
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
}
