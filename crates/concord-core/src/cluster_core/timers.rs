//! The membership machine's timers and what each one does when it fires.

use tracing::{info, warn};

use super::cluster_timer::ClusterTimer;
use super::lease_request::LeaseRequest;
use super::shutdown_reason::ShutdownReason;
use super::ClusterCore;
use crate::failure_detector::PhiAccrualFailureDetector;

impl ClusterCore {
    /// Runs every timer whose time has come.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        if self.shutdown.is_some() {
            return;
        }
        let due = self.outputs.timers.expired(now_ms);
        let gossip_due = due.contains(&ClusterTimer::Gossip);
        for timer in due {
            if self.shutdown.is_some() {
                return;
            }
            match timer {
                ClusterTimer::InitJoin => self.send_init_joins(now_ms),
                ClusterTimer::SeedNodeTimeout => self.seed_node_timeout(now_ms),
                ClusterTimer::JoinRetry => self.retry_join(now_ms),
                ClusterTimer::JoinSeedNodesDeadline => {
                    if !self.initialized {
                        warn!("could not join the seed nodes within shutdown-after-unsuccessful-join-seed-nodes; shutting down");
                        self.shut_down(ShutdownReason::JoinSeedNodesTimeout);
                    }
                }
                ClusterTimer::ExpectedFirstHeartbeat(node) => {
                    let phi = self.settings.failure_detector.phi_settings();
                    let fd = self
                        .failure_detectors
                        .entry(node)
                        .or_insert_with(|| PhiAccrualFailureDetector::new(phi));
                    if !fd.is_monitoring() {
                        // No reply yet: start the clock as if a heartbeat had arrived, so a
                        // node that never answers is detected.
                        fd.heartbeat(now_ms);
                    }
                }
                ClusterTimer::Heartbeat => {
                    self.outputs.timers.set(
                        ClusterTimer::Heartbeat,
                        now_ms.saturating_add(self.settings.failure_detector.heartbeat_interval_ms),
                    );
                    self.heartbeat_tick(now_ms);
                }
                ClusterTimer::Reaper => {
                    self.outputs.timers.set(
                        ClusterTimer::Reaper,
                        now_ms.saturating_add(self.settings.unreachable_nodes_reaper_interval_ms),
                    );
                    self.reap_unreachable(now_ms);
                }
                ClusterTimer::LeaderActions => {
                    self.outputs.timers.set(
                        ClusterTimer::LeaderActions,
                        now_ms.saturating_add(self.settings.leader_actions_interval_ms),
                    );
                    self.leader_actions(now_ms);
                }
                ClusterTimer::Gossip => {
                    self.outputs.timers.set(
                        ClusterTimer::Gossip,
                        now_ms.saturating_add(self.settings.gossip_interval_ms),
                    );
                    self.gossip_tick(now_ms);
                }
                // A speed-up round due together with the regular round is that round.
                ClusterTimer::GossipSpeedup(_) if gossip_due => {}
                ClusterTimer::GossipSpeedup(_) => self.gossip_round(now_ms),
                ClusterTimer::DownShutdown => {
                    info!("this node is Down; shutting down (run-coordinated-shutdown-when-down)");
                    self.shut_down(ShutdownReason::Downed);
                }
                ClusterTimer::ExitingShutdown => {
                    warn!("Exiting, but removal was not observed in time; shutting down");
                    self.shut_down(ShutdownReason::ExitingTimeout);
                }
                ClusterTimer::QuarantineRemoved(node) => self.quarantines.push_back(node),
                ClusterTimer::LeaseAcquire => self.lease_requests.push_back(LeaseRequest::Acquire),
                ClusterTimer::IslandProbe => self.island_probe(now_ms),
            }
        }
    }
}
