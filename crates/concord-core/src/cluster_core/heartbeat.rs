//! Failure detection: the heartbeat sender (request/reply heartbeats to the monitored
//! neighbours on the hashed ring), the first-heartbeat deadline, and the reaper that marks
//! monitored nodes unreachable when their φ crosses the threshold (and reachable again).
//!
//! Spec: cluster-specification.md, "Failure Detector"; Akka `ClusterHeartbeatSender`;
//! Hayashibara et al., "The φ Accrual Failure Detector" (2004).

use std::collections::BTreeSet;

use tracing::{info, warn};

use super::cluster_timer::ClusterTimer;
use super::ClusterCore;
use crate::address::UniqueAddress;
use crate::failure_detector::PhiAccrualFailureDetector;
use crate::heartbeat_ring::HeartbeatNodeRing;
use crate::message::ClusterMessage;
use crate::reachability::ReachabilityStatus;

impl ClusterCore {
    pub(super) fn heartbeat_tick(&mut self, now_ms: u64) {
        if !self.initialized {
            return;
        }
        if self.ring_dirty {
            self.ring_dirty = false;
            let g = &self.state.latest_gossip;
            // The ring's unreachable nodes are those of the view the rest of the core acts
            // on (events, resolver, convergence): records of Down observers left out. With
            // the raw records, a node only Down observers saw unreachable counts as already
            // unreachable here (watched only "in between", and not at all once enough
            // receivers are taken) while the resolver counts it reachable: if it crashed,
            // no live node would ever detect it (seed 7143).
            let ring = HeartbeatNodeRing::new(
                self.state.self_unique_address.clone(),
                g.members.keys().cloned(),
                self.state
                    .reachability_excluding_downed_observers()
                    .all_unreachable_or_terminated(),
                self.settings.failure_detector.monitored_by_nr_of_members,
            );
            let ring_receivers = ring.my_receivers();
            // Receivers the ring drops while their detector says unavailable stay
            // monitored (Akka `HeartbeatSenderState.membershipChange`): otherwise this
            // node's record of them would be cleared unchecked, the ring would take them
            // back as reachable, and they would flap unreachable/reachable.
            for r in self.active_receivers.difference(&ring_receivers) {
                if self
                    .failure_detectors
                    .get(r)
                    .is_some_and(|fd| !fd.is_available(now_ms))
                {
                    self.old_receivers_now_unreachable.insert(r.clone());
                }
            }
            self.old_receivers_now_unreachable
                .retain(|n| g.has_member(n) && !ring_receivers.contains(n));
            let receivers: BTreeSet<UniqueAddress> = ring_receivers
                .union(&self.old_receivers_now_unreachable)
                .cloned()
                .collect();
            self.failure_detectors.retain(|k, _| receivers.contains(k));
            self.outputs.timers.retain(|t| match t {
                ClusterTimer::ExpectedFirstHeartbeat(n) => receivers.contains(n),
                _ => true,
            });
            let first =
                now_ms.saturating_add(self.settings.failure_detector.expected_response_after_ms);
            for r in receivers.difference(&self.active_receivers) {
                self.outputs
                    .timers
                    .set(ClusterTimer::ExpectedFirstHeartbeat(r.clone()), first);
            }
            self.active_receivers = receivers;
        }
        self.heartbeat_seq += 1;
        let receivers: Vec<UniqueAddress> = self.active_receivers.iter().cloned().collect();
        for r in receivers {
            self.stats.heartbeats_sent += 1;
            self.send(
                &r,
                ClusterMessage::Heartbeat {
                    sequence_nr: self.heartbeat_seq,
                    creation_time_ms: now_ms,
                },
            );
        }
    }

    pub(super) fn receive_heartbeat_rsp(&mut self, now_ms: u64, from: &UniqueAddress) {
        if self.active_receivers.contains(from) {
            if self.old_receivers_now_unreachable.remove(from) {
                // A dropped receiver answered: no longer monitored (its detector goes, and
                // the reaper clears this node's record of it). Akka `heartbeatRsp`.
                self.active_receivers.remove(from);
                self.failure_detectors.remove(from);
                self.outputs
                    .timers
                    .cancel(&ClusterTimer::ExpectedFirstHeartbeat(from.clone()));
                return;
            }
            let phi = self.settings.failure_detector.phi_settings();
            self.failure_detectors
                .entry(from.clone())
                .or_insert_with(|| PhiAccrualFailureDetector::new(phi))
                .heartbeat(now_ms);
            self.outputs
                .timers
                .cancel(&ClusterTimer::ExpectedFirstHeartbeat(from.clone()));
        }
    }

    /// Marks monitored nodes whose φ crossed the threshold as unreachable (observer =
    /// self), and reachable again when heartbeats resume.
    pub(super) fn reap_unreachable(&mut self, now_ms: u64) {
        if !self.initialized {
            return;
        }
        let me = self.state.self_unique_address.clone();
        let g = &self.state.latest_gossip;
        let mut reach = g.overview.reachability.clone();
        for node in &self.active_receivers {
            if !g.has_member(node) {
                continue;
            }
            let available = self
                .failure_detectors
                .get(node)
                .is_none_or(|fd| fd.is_available(now_ms));
            match reach.status_from(&me, node) {
                ReachabilityStatus::Reachable if !available => {
                    warn!(node = %node, phi = self.failure_detectors.get(node).map(|f| f.phi(now_ms)).unwrap_or(0.0), "marking node as UNREACHABLE");
                    reach = reach.unreachable(&me, node);
                }
                ReachabilityStatus::Unreachable if available => {
                    info!(node = %node, "marking node as REACHABLE");
                    reach = reach.reachable(&me, node);
                }
                _ => {}
            }
        }
        // Nodes unreachable from us that we no longer monitor: nobody will clear them.
        for node in g.overview.reachability.all_unreachable_from(&me) {
            if !self.active_receivers.contains(&node)
                && g.has_member(&node)
                && reach.status_from(&me, &node) == ReachabilityStatus::Unreachable
            {
                reach = reach.reachable(&me, &node);
            }
        }
        if reach != g.overview.reachability {
            let mut ng = g.clone();
            ng.overview.reachability = reach;
            self.update_versioned(now_ms, ng);
        }
    }
}
