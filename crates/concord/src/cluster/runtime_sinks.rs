//! [`RuntimeSinks`]: where the tokio runtime carries the membership layer's outputs — the
//! transport (quarantines), the coordinated shutdown, the handles' `watch` channels and
//! event batches, the shared counters and the Prometheus metrics.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use concord_core::{
    ClusterCore, ClusterMessage, CoreStats, MembershipView, ShutdownReason, UniqueAddress,
};
use tokio::sync::watch;
use tracing::warn;

use super::island_report::IslandReport;
use super::membership_sinks::{MembershipSinks, Publication};
use super::shared::Shared;
use super::subscription::EventBatch;
use crate::clock::Clock;
use crate::metrics;
use crate::remote::Transport;

/// The runtime's [`MembershipSinks`]; see the module docs.
pub(crate) struct RuntimeSinks {
    transport: Transport,
    shared: Arc<Shared>,
    views: watch::Sender<Arc<MembershipView>>,
    ended: watch::Sender<Option<ShutdownReason>>,
    /// The clock, for heartbeat round trips (ms) as messages arrive.
    clock: Clock,
    node_label: String,
    /// When the membership metrics were last recorded, ms: the counters (gossip rounds,
    /// resolver decisions) move without membership changes, so they are recorded at least
    /// once a second too (at the end of a turn).
    metrics_recorded_ms: u64,
    /// When refusals were last logged, ms, and the counters then.
    refusals_logged: (u64, CoreStats),
}

impl RuntimeSinks {
    /// Sinks quarantining on `transport`, publishing to `views`, `ended` and `shared`.
    pub(crate) fn new(
        transport: Transport,
        shared: Arc<Shared>,
        views: watch::Sender<Arc<MembershipView>>,
        ended: watch::Sender<Option<ShutdownReason>>,
        clock: Clock,
    ) -> Self {
        let node_label = shared.self_unique_address.address.to_string();
        RuntimeSinks {
            transport,
            shared,
            views,
            ended,
            clock,
            node_label,
            metrics_recorded_ms: 0,
            refusals_logged: (0, CoreStats::default()),
        }
    }

    /// Shares the core's counters and logs, at most once per 10 s, how many messages it
    /// refused since the last line (strangers' gossip, implausible clocks, join floods).
    fn publish_stats(&mut self, core: &ClusterCore, stats: CoreStats, now: u64) {
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
        let decisions_changed = {
            let mut shared = self
                .shared
                .core_stats
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let changed = shared.sbr_decisions != stats.sbr_decisions;
            *shared = stats;
            changed
        };
        if decisions_changed {
            *self
                .shared
                .sbr_decisions
                .lock()
                .unwrap_or_else(|p| p.into_inner()) =
                core.recent_sbr_decisions().cloned().collect();
        }
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
}

impl MembershipSinks for RuntimeSinks {
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
            self.shared
                .last_heartbeat_rtt_ms
                .store(rtt, Ordering::Relaxed);
            metrics::heartbeat_rtt(&self.node_label, rtt);
        }
    }

    fn quarantine(&mut self, node: &UniqueAddress) {
        self.transport.quarantine(node);
    }

    fn start_coordinated_shutdown(&mut self, reason: ShutdownReason) {
        self.shared.shutdown.run(reason);
    }

    fn ended(&mut self, reason: ShutdownReason) {
        self.ended.send_if_modified(|e| {
            let changed = e.is_none();
            e.get_or_insert(reason);
            changed
        });
    }

    fn turn_ended(&mut self, core: &ClusterCore, now: u64, publication: Option<Publication>) {
        let stats = core.stats();
        self.publish_stats(core, stats, now);
        let changed = publication.is_some();
        if changed || now.saturating_sub(self.metrics_recorded_ms) >= 1000 {
            self.metrics_recorded_ms = now;
            if !changed {
                let view = self.views.borrow().clone();
                metrics::record_membership(&self.node_label, &view, &stats);
            }
        }
        if let Some((view, events)) = publication {
            metrics::record_membership(&self.node_label, &view, &stats);
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
