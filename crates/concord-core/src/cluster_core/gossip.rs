//! Gossip: the periodic round (full state to a peer that has not seen it, a status digest
//! otherwise), the speed-up rounds, receiving and merging gossip by vector clock, and
//! answering a status.
//!
//! Spec: cluster-specification.md, "Gossip", "Gossip Protocol", "Gossip Convergence".

use tracing::{debug, info};

use super::cluster_timer::ClusterTimer;
use super::ClusterCore;
use crate::address::UniqueAddress;
use crate::gossip::Gossip;
use crate::member::MemberStatus;
use crate::membership_state::adjusted_gossip_different_view_probability;
use crate::message::ClusterMessage;
use crate::vector_clock::{ClockOrdering, VectorClock, MAX_VECTOR_CLOCK_JUMP};

impl ClusterCore {
    pub(super) fn receive_gossip(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        to: &UniqueAddress,
        remote: Gossip,
    ) {
        self.stats.gossip_received += 1;
        let me = self.state.self_unique_address.clone();
        if *to != me {
            debug!(%to, "ignoring gossip meant for another incarnation");
            self.stats.ignored += 1;
            return;
        }
        if !self.initialized {
            self.receive_gossip_while_joining(now_ms, from, remote);
            return;
        }
        // Who sent it decides whether the content is used at all: only a member (of this
        // node's view, not removed) may change this node's state. A non-member's gossip is
        // taken only as the Join it stands for, or answered when it comes from a removed
        // node; nothing in it is acted on otherwise (a forged tombstone of this node from a
        // stranger must not make it shut down).
        let local = &self.state.latest_gossip;
        let sender_is_member = local.has_member(from) && !local.tombstones.contains_key(from);
        if !sender_is_member {
            self.receive_gossip_from_non_member(now_ms, from, &remote);
            return;
        }
        if let Some((node, counter)) = remote
            .version
            .implausible_jump(&local.version, MAX_VECTOR_CLOCK_JUMP)
        {
            debug!(%from, %node, counter, local = local.version.get(node), "refusing gossip whose vector clock jumps implausibly far ahead");
            self.stats.implausible_clocks += 1;
            return;
        }
        if remote.tombstones.contains_key(&me) {
            let previous = self.state.self_member().map(|m| m.status);
            self.self_removed(previous);
            return;
        }
        if !remote.has_member(&me) {
            debug!(%from, "ignoring gossip from a member that does not know this node");
            self.stats.ignored += 1;
            return;
        }
        if !local.overview.reachability.is_reachable_from(&me, from) {
            debug!(%from, "ignoring gossip from a node this node sees as unreachable");
            self.stats.ignored += 1;
            return;
        }
        let remote_seen_by_me = remote.seen_by_node(&me);
        let (winner, talkback) = match remote.version.compare(&local.version) {
            ClockOrdering::Same => (remote.merge_seen(local), !remote_seen_by_me),
            ClockOrdering::Before => (local.clone(), true),
            ClockOrdering::After => (remote, !remote_seen_by_me),
            ClockOrdering::Concurrent if remote.merge_prunes_versions(local) => {
                // The merge drops the vector-clock entries of removed nodes (Akka's
                // `Gossip.merge` prunes the tombstoned nodes' entries too). What those
                // nodes changed stays in the merged members, but the merged version no
                // longer records it, and can be the very version of a state without those
                // changes: a member removed while cut off that had moved a joiner it
                // admitted to WeaklyUp, merged with the cluster that removed it, gave the
                // cluster's own version to a state with the joiner WeaklyUp; the cluster's
                // next state (Joining, a later version) then replaced it and the joiner's
                // status went back from WeaklyUp to Joining, on the joiner too (found by
                // the simulator, seed 491 of `concord-sim --seeds 1000`). The merged state
                // gets a version of its own, this node's counter incremented: later than
                // both, and concurrent with every state that does not descend from it, so
                // the next merge keeps the higher status. Akka does not do this (it keeps
                // the merged version as is).
                (remote.merge(local).bump(&me), true)
            }
            ClockOrdering::Concurrent => (remote.merge(local), true),
        };
        let new = self.seen_by_self(winner.normalize());
        let local = &self.state.latest_gossip;
        let newcomers = new.members.keys().filter(|m| !local.has_member(m)).count();
        if !self.admission_check(now_ms, from, newcomers as u64) {
            debug!(%from, newcomers, "refusing gossip from a member not yet Up that carries more new members than the join rate limit admits");
            return;
        }
        if new != self.state.latest_gossip {
            self.update_latest_gossip(now_ms, new);
        }
        if talkback {
            self.send_gossip_to(from);
        }
    }

    /// Gossip from a node that is not a member of this node's view.
    fn receive_gossip_from_non_member(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        remote: &Gossip,
    ) {
        let me = self.state.self_unique_address.clone();
        let local = &self.state.latest_gossip;
        if local.tombstones.contains_key(from) && remote.has_member(&me) {
            // A removed node that does not know it yet (it was paused or cut off while the
            // cluster removed it): answer with this gossip, whose tombstone tells it, so it
            // shuts down instead of acting on its stale view — e.g. a split brain resolver
            // deciding for a side the cluster has already downed (found by the simulator,
            // seed 3954 of `CONCORD_SIM_SEEDS=5000 cargo test -p concord-sim --test ddata`).
            self.stats.ignored += 1;
            self.send_gossip_to(from);
            return;
        }
        if remote.has_member(&me) && !local.tombstones.contains_key(from) {
            // A member of this cluster welcomed `from` but crashed before its gossip about
            // the join reached anyone else: `from` now gossips as a Joining member that nobody
            // else knows, and would stay Joining forever. Its gossip contains this node, so it
            // was admitted by our cluster; handle it as the Join it sent (found by the
            // simulator, seeds 5750, 7874 and 7888 of `concord-sim --seeds 10000`). It goes
            // through the same checks as a Join, the admission check and its rate limit
            // included, and admits the sender only: nothing else in a non-member's gossip
            // is ever taken (before the check, 600 made-up senders were all admitted).
            if let Some(m) = remote
                .members
                .get(from)
                .filter(|m| matches!(m.status, MemberStatus::Joining | MemberStatus::WeaklyUp))
            {
                let (roles, version) = (m.roles.clone(), m.app_version.clone());
                info!(node = %from, "gossip from a joining node this node did not know: taking it as its Join");
                self.receive_join(now_ms, from, roles, version);
                return;
            }
        }
        debug!(%from, "ignoring gossip from a node that is not a member");
        self.stats.refused_non_member += 1;
    }

    /// `g` marked as seen by this node — unless `g` shows this node Exiting while its
    /// exiting tasks are still running: then it is marked not seen, so the leader does not
    /// remove the node before it has handed its work over (Akka's
    /// `exitingTasksInProgress`).
    pub(super) fn seen_by_self(&self, g: Gossip) -> Gossip {
        let me = &self.state.self_unique_address;
        let exiting = g
            .member(me)
            .is_some_and(|m| m.status == MemberStatus::Exiting);
        if exiting && !self.exiting_done {
            let mut g = g;
            g.overview.seen.remove(me);
            g
        } else {
            g.seen(me)
        }
    }

    pub(super) fn receive_gossip_status(
        &mut self,
        from: &UniqueAddress,
        version: VectorClock,
        seen_digest: u64,
    ) {
        self.stats.gossip_status_received += 1;
        let me = self.state.self_unique_address.clone();
        let local = &self.state.latest_gossip;
        if self.initialized && local.tombstones.contains_key(from) {
            // A removed node that does not know it: the gossip with its tombstone tells it
            // (see `receive_gossip`).
            self.stats.ignored += 1;
            self.send_gossip_to(from);
            return;
        }
        if !self.initialized || !local.has_member(from) {
            self.stats.refused_non_member += 1;
            return;
        }
        if !local.overview.reachability.is_reachable_from(&me, from) {
            self.stats.ignored += 1;
            return;
        }
        match version.compare(&local.version) {
            ClockOrdering::Same => {
                if seen_digest != local.seen_digest() {
                    self.send_gossip_to(from);
                }
            }
            ClockOrdering::After => self.send_gossip_status_to(from),
            ClockOrdering::Before | ClockOrdering::Concurrent => self.send_gossip_to(from),
        }
    }

    pub(super) fn send_gossip_to(&mut self, to: &UniqueAddress) {
        self.stats.gossip_sent += 1;
        let gossip = self.state.latest_gossip.clone();
        self.send(
            to,
            ClusterMessage::GossipEnvelope {
                to: to.clone(),
                gossip,
            },
        );
    }

    fn send_gossip_status_to(&mut self, to: &UniqueAddress) {
        self.stats.gossip_status_sent += 1;
        let g = &self.state.latest_gossip;
        let msg = ClusterMessage::GossipStatus {
            version: g.version.clone(),
            seen_digest: g.seen_digest(),
        };
        self.send(to, msg);
    }

    /// The regular gossip round: prunes old tombstones, gossips, and schedules two extra
    /// rounds within the interval while the seen set is small or members are moving.
    pub(super) fn gossip_tick(&mut self, now_ms: u64) {
        if !self.initialized {
            return;
        }
        let prune_before = now_ms.saturating_sub(self.settings.prune_gossip_tombstones_after_ms);
        if self
            .state
            .latest_gossip
            .tombstones
            .values()
            .any(|t| *t < prune_before)
        {
            let g = self.state.latest_gossip.prune_tombstones(prune_before);
            self.state.latest_gossip = g;
        }
        self.gossip_round(now_ms);
        if self.state.is_gossip_speedup_needed() {
            let i = self.settings.gossip_interval_ms;
            self.outputs
                .timers
                .set(ClusterTimer::GossipSpeedup(1), now_ms.saturating_add(i / 3));
            self.outputs.timers.set(
                ClusterTimer::GossipSpeedup(2),
                now_ms.saturating_add(i.saturating_mul(2) / 3),
            );
        }
    }

    /// One round of gossip to one peer: the full state if the peer has not seen it,
    /// otherwise only the status.
    pub(super) fn gossip_round(&mut self, _now_ms: u64) {
        if !self.initialized {
            return;
        }
        self.stats.gossip_rounds += 1;
        let p = adjusted_gossip_different_view_probability(
            self.settings.gossip_different_view_probability,
            self.settings.reduce_gossip_different_view_probability,
            self.state.latest_gossip.members.len(),
        );
        if let Some(peer) = self.state.select_gossip_target(p, &mut self.rng) {
            if self.state.latest_gossip.seen_by_node(&peer) {
                self.send_gossip_status_to(&peer);
            } else {
                self.send_gossip_to(&peer);
            }
        }
    }
}
