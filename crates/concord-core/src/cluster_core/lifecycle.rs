//! The node's lifecycle in the cluster: applying a new gossip state (and the domain events
//! it yields), leader actions and the Split Brain Resolver, being downed, exiting with its
//! hand-over window, removal, quarantine of removed incarnations and the lease cycle.
//!
//! Spec: cluster-membership-service.md, "Membership Lifecycle", "Leader", "Leaving";
//! Akka `ClusterCoreDaemon` (`exitingTasksInProgress`, `ExitingCompleted`,
//! `quarantine-removed-node-after`) and `SplitBrainResolver` (lease release).

use tracing::{info, warn};

use super::cluster_timer::ClusterTimer;
use super::lease_request::LeaseRequest;
use super::sbr_decision_record::{SbrDecisionRecord, SBR_DECISIONS_KEPT};
use super::shutdown_reason::ShutdownReason;
use super::ClusterCore;
use crate::address::Address;
use crate::events::{diff, ClusterEvent};
use crate::gossip::Gossip;
use crate::leader::{
    leader_actions_on_convergence, move_joining_to_weakly_up, track_joining, LeaderActionsResult,
};
use crate::member::MemberStatus;
use crate::membership_state::MembershipState;
use crate::message::ClusterMessage;
use crate::split_brain_resolver::{Decision, DecisionCause, SbrAction};

impl ClusterCore {
    // ------------------------------------------------------------------ runtime answers

    /// The coordinated shutdown's exiting tasks are done (its `cluster-exiting` phase:
    /// singleton hand-over, shard hand-off): from now on this node marks the gossip as seen,
    /// so the leader can remove it, and it tells the leader at once. If the node is not
    /// Exiting yet, the Exiting state will be marked seen as soon as it arrives (Akka's
    /// `ExitingCompleted`). After this, a node that does not learn of its removal within
    /// `exiting-shutdown-timeout` shuts down anyway.
    pub fn exiting_completed(&mut self, now_ms: u64) {
        if self.exiting_done {
            return;
        }
        self.exiting_done = true;
        if !self.exiting_seen || self.shutdown.is_some() {
            return;
        }
        info!("exiting tasks completed; the leader may remove this node now");
        let me = self.state.self_unique_address.clone();
        let g = self.state.latest_gossip.clone().seen(&me);
        self.update_latest_gossip(now_ms, g);
        self.outputs.timers.set(
            ClusterTimer::ExitingShutdown,
            now_ms.saturating_add(self.settings.exiting_shutdown_timeout_ms),
        );
        // Tell the leader (and the next candidate) now rather than at the next gossip round.
        let leader = self.state.leader().filter(|l| **l != me).cloned();
        let next = self
            .state
            .latest_gossip
            .members
            .values()
            .filter(|m| m.unique_address != me && Some(&m.unique_address) != leader.as_ref())
            .find(|m| m.status == MemberStatus::Up)
            .map(|m| m.unique_address.clone());
        for to in leader.into_iter().chain(next) {
            self.send_gossip_to(&to);
        }
    }

    /// A peer refused this incarnation because it is quarantined: this node was removed
    /// from the cluster while it could not hear about it. It shuts down.
    pub fn handle_quarantined_by_peer(&mut self, peer: &Address) {
        if self.initialized && self.shutdown.is_none() {
            warn!(%peer, "a peer refused this node as quarantined: it was removed from the cluster; shutting down");
            self.shut_down(ShutdownReason::Quarantined);
        }
    }

    /// The outcome of a [`LeaseRequest::Acquire`].
    pub fn handle_lease_result(&mut self, granted: bool) {
        if let Some(sbr) = &mut self.sbr {
            sbr.on_lease_result(granted);
        }
    }

    pub(super) fn shut_down(&mut self, reason: ShutdownReason) {
        if self.shutdown.is_none() {
            self.shutdown = Some(reason);
            self.state_changes += 1;
            self.coordinated_shutdown.push_back(reason);
        }
    }

    // ------------------------------------------------------------------ state updates

    pub(super) fn update_versioned(&mut self, now_ms: u64, g: Gossip) {
        let me = self.state.self_unique_address.clone();
        let g = self.seen_by_self(g.bump(&me));
        self.update_latest_gossip(now_ms, g);
    }

    pub(super) fn update_latest_gossip(&mut self, now_ms: u64, g: Gossip) {
        self.state_changes += 1;
        let old = std::mem::replace(&mut self.state.latest_gossip, g);
        let old_state = MembershipState::new(old, self.state.self_unique_address.clone());
        for e in diff(&old_state, &self.state) {
            match &e {
                ClusterEvent::UnreachableMember(m) => {
                    warn!(member = %m.unique_address, "member is unreachable")
                }
                ClusterEvent::ReachableMember(m) => {
                    info!(member = %m.unique_address, "member is reachable again")
                }
                ClusterEvent::LeaderChanged(l) => {
                    info!(leader = %l.as_ref().map(|a| a.to_string()).unwrap_or_else(|| "none".into()), "leader changed")
                }
                ClusterEvent::RoleLeaderChanged { .. } => {}
                ClusterEvent::MemberRemoved { member, .. } => {
                    info!(member = %member.unique_address, "MemberRemoved");
                    if member.unique_address != self.state.self_unique_address {
                        // Akka's quarantine-removed-node-after: give the removed node time to
                        // receive the gossip that tells it so, then refuse it for good.
                        self.outputs.timers.set(
                            ClusterTimer::QuarantineRemoved(member.unique_address.clone()),
                            now_ms.saturating_add(self.settings.quarantine_removed_node_after_ms),
                        );
                    }
                }
                other => {
                    if let Some(m) = other.member() {
                        info!(member = %m.unique_address, status = %m.status, "{}", other.type_name())
                    }
                }
            }
            self.outputs.events.push_back(e);
        }
        let (old, new) = (&old_state.latest_gossip, &self.state.latest_gossip);
        if old.members.keys().ne(new.members.keys())
            // The ring's unreachable set (records of Down observers left out; a member
            // downed with records changes it without any record changing). Computed only
            // when what it depends on changed: most gossip changes neither.
            || (old.overview.reachability != new.overview.reachability
                || old.members.values().map(|m| m.status).ne(new.members.values().map(|m| m.status)))
                && old_state
                    .reachability_excluding_downed_observers()
                    .all_unreachable_or_terminated()
                    != self
                        .state
                        .reachability_excluding_downed_observers()
                        .all_unreachable_or_terminated()
        {
            self.ring_dirty = true;
        }
        let previous = old_state.self_member().map(|m| m.status);
        self.check_self_status(now_ms, previous);
    }

    fn check_self_status(&mut self, now_ms: u64, previous: Option<MemberStatus>) {
        if !self.initialized || self.shutdown.is_some() {
            return;
        }
        let me = &self.state.self_unique_address;
        match self.state.latest_gossip.member(me).map(|m| m.status) {
            None => self.self_removed(previous),
            Some(MemberStatus::Down) if self.settings.run_coordinated_shutdown_when_down => {
                if !self.down_shutdown_requested {
                    self.down_shutdown_requested = true;
                    self.coordinated_shutdown.push_back(ShutdownReason::Downed);
                }
                // Keep gossiping for two rounds so the cluster learns, then stop.
                self.outputs.timers.set_if_unset(
                    ClusterTimer::DownShutdown,
                    now_ms.saturating_add(self.settings.gossip_interval_ms.saturating_mul(2)),
                );
            }
            Some(MemberStatus::Exiting) if !self.exiting_seen => {
                self.exiting_seen = true;
                // Left: hand over, then go (Akka's ClusterLeavingReason).
                self.coordinated_shutdown.push_back(ShutdownReason::Removed);
                if self.exiting_done {
                    self.outputs.timers.set(
                        ClusterTimer::ExitingShutdown,
                        now_ms.saturating_add(self.settings.exiting_shutdown_timeout_ms),
                    );
                } else {
                    info!("this node is Exiting; waiting for its exiting tasks (coordinated shutdown) before it may be removed");
                }
            }
            _ => {}
        }
    }

    /// This node is no longer a member; `previous` is its last status as this node knew
    /// it. Removed after Leaving or Exiting, it left; removed from any other status (Down,
    /// or Up when the Down state never reached it), it was downed.
    pub(super) fn self_removed(&mut self, previous: Option<MemberStatus>) {
        if self.shutdown.is_none() {
            info!(previous = ?previous, "this node has been removed from the cluster; shutting down");
            let me = self.state.self_unique_address.clone();
            if let Some(m) = self.state.latest_gossip.member(&me).cloned() {
                self.outputs.events.push_back(ClusterEvent::MemberRemoved {
                    member: m.with_status(MemberStatus::Removed),
                    previous_status: m.status,
                });
            }
            let reason = match previous {
                Some(MemberStatus::Leaving | MemberStatus::Exiting) | None => {
                    ShutdownReason::Removed
                }
                Some(_) => ShutdownReason::Downed,
            };
            self.shut_down(reason);
        }
    }

    // ------------------------------------------------------------------ leader and downing

    fn split_brain_resolver_tick(&mut self, now_ms: u64) {
        let suspects = self
            .failure_detectors
            .iter()
            .filter(|(_, fd)| fd.is_suspect(now_ms))
            .map(|(n, _)| n.clone())
            .collect();
        let Some(sbr) = &mut self.sbr else { return };
        sbr.set_suspects(suspects);
        match sbr.tick(now_ms, &self.state) {
            Some(SbrAction::Down {
                decision,
                nodes,
                cause,
            }) => {
                warn!(
                    strategy = sbr.settings().strategy.name(),
                    ?decision,
                    cause = cause.name(),
                    nodes = ?nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
                    "split brain resolver decision: downing members"
                );
                self.stats.sbr_decisions += 1;
                if decision == Decision::DownAll {
                    let i = match cause {
                        DecisionCause::Unstable => 1,
                        DecisionCause::DoubleDecision => 2,
                        DecisionCause::Stable | DecisionCause::Lease => 0,
                    };
                    self.stats.sbr_down_all[i] += 1;
                }
                if self.sbr_decisions.len() == SBR_DECISIONS_KEPT {
                    self.sbr_decisions.pop_front();
                }
                self.sbr_decisions.push_back(SbrDecisionRecord {
                    at_ms: now_ms,
                    decision,
                    nodes: nodes.clone(),
                    cause,
                });
                let mut g = self.state.latest_gossip.clone();
                for n in &nodes {
                    if let Some(m) = g.members.get(n).cloned() {
                        if m.status.can_transition_to(MemberStatus::Down) {
                            g.members
                                .insert(n.clone(), m.with_status(MemberStatus::Down));
                        }
                    }
                }
                self.update_versioned(now_ms, g);
                self.gossip_round(now_ms);
            }
            Some(SbrAction::AcquireLease { delay_ms }) => {
                info!(delay_ms, "split brain resolver: acquiring the lease");
                self.outputs
                    .timers
                    .set(ClusterTimer::LeaseAcquire, now_ms.saturating_add(delay_ms));
            }
            Some(SbrAction::ReleaseLease) => {
                info!("split brain resolver: the downed members are removed; releasing the lease");
                self.lease_requests.push_back(LeaseRequest::Release);
            }
            None => {}
        }
    }

    pub(super) fn leader_actions(&mut self, now_ms: u64) {
        if !self.initialized {
            return;
        }
        track_joining(
            &mut self.joining_since_ms,
            &self.state.latest_gossip,
            now_ms,
        );
        self.split_brain_resolver_tick(now_ms);
        let me = self.state.self_unique_address.clone();
        if !self.state.is_leader(&me) {
            return;
        }
        let settings = self.settings.leader_settings();
        let result = if self.state.convergence() {
            leader_actions_on_convergence(&self.state, &settings, now_ms)
        } else if let Some(after) = self.settings.weakly_up_after_ms {
            move_joining_to_weakly_up(
                &self.state,
                &settings,
                &self.joining_since_ms,
                after,
                now_ms,
            )
        } else {
            None
        };
        if let Some(LeaderActionsResult {
            gossip,
            changed,
            removed,
        }) = result
        {
            for m in &changed {
                info!(member = %m.unique_address, status = %m.status, "leader is moving member");
            }
            for m in &removed {
                info!(member = %m.unique_address, previous = %m.status, "leader is removing member");
            }
            let gossip = self.seen_by_self(gossip);
            self.update_latest_gossip(now_ms, gossip);
            // Tell removed nodes, so they learn it and shut down.
            for m in &removed {
                if m.unique_address != me {
                    let gossip = self.state.latest_gossip.clone();
                    self.send(
                        &m.unique_address,
                        ClusterMessage::GossipEnvelope {
                            to: m.unique_address.clone(),
                            gossip,
                        },
                    );
                }
            }
            self.gossip_round(now_ms);
        }
    }
}
