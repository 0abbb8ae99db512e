//! Joining: the seed-node process (InitJoin / InitJoinAck / InitJoinNack), Join and
//! Welcome, joining oneself to form a new cluster, and the retries.
//!
//! Spec: cluster-specification.md, "Seed Nodes"; cluster-membership-service.md, "Joining".

use std::collections::BTreeSet;

use tracing::{debug, info, warn};

use super::cluster_timer::ClusterTimer;
use super::command_error::CommandError;
use super::join_process::JoinProcess;
use super::shutdown_reason::ShutdownReason;
use super::ClusterCore;
use crate::address::{Address, UniqueAddress};
use crate::cluster_identity::{may_join_self_after_seed_timeout, ClusterId, ClusterIdentity};
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};
use crate::message::ClusterMessage;
use rand::Rng;

/// The seed-node process resends InitJoin this often, ms (at most the seed-node timeout,
/// at least 100 ms).
fn init_join_interval_ms(seed_node_timeout_ms: u64) -> u64 {
    1000.min(seed_node_timeout_ms.max(100))
}

impl ClusterCore {
    /// Joins the cluster of the node at `address`; joining one's own address forms a new
    /// cluster. Retries after `retry-unsuccessful-join-after`.
    pub fn join(&mut self, now_ms: u64, address: &Address) -> Result<(), CommandError> {
        if address.system != self.self_address().system {
            return Err(CommandError::OtherCluster(
                address.clone(),
                self.self_address().system.clone(),
            ));
        }
        if self.initialized {
            info!(target = %address, "already a member of a cluster; ignoring join");
            return Ok(());
        }
        if address == self.self_address() {
            self.join_self(now_ms);
        } else {
            self.send_join(now_ms, address.clone(), None);
        }
        Ok(())
    }

    /// Joins via seed nodes (Akka `joinSeedNodes`): InitJoin to all seeds, Join to the
    /// first that answers. If this node is the first seed, it forms a new cluster when
    /// every other seed said no or none answered within `seed-node-timeout`.
    pub fn join_seed_nodes(&mut self, now_ms: u64, seeds: &[Address]) -> Result<(), CommandError> {
        if seeds.is_empty() {
            return Err(CommandError::NoSeedNodes);
        }
        if let Some(other) = seeds
            .iter()
            .find(|s| s.system != self.self_address().system)
        {
            return Err(CommandError::OtherCluster(
                other.clone(),
                self.self_address().system.clone(),
            ));
        }
        if self.initialized {
            return Ok(());
        }
        if let Some(t) = self.settings.shutdown_after_unsuccessful_join_seed_nodes_ms {
            self.outputs.timers.set_if_unset(
                ClusterTimer::JoinSeedNodesDeadline,
                now_ms.saturating_add(t),
            );
        }
        self.start_seed_node_process(now_ms, seeds.to_vec());
        Ok(())
    }

    fn start_seed_node_process(&mut self, now_ms: u64, mut seeds: Vec<Address>) {
        let me = self.self_address().clone();
        let mut seen = BTreeSet::new();
        seeds.retain(|s| seen.insert(s.clone()));
        self.seed_nodes = seeds.clone();
        if seeds.len() == 1 && seeds[0] == me {
            self.join_self(now_ms);
            return;
        }
        let first_seed = seeds[0] == me;
        let remaining: BTreeSet<Address> = seeds.iter().filter(|s| **s != me).cloned().collect();
        info!(seeds = ?seeds.iter().map(|s| s.to_string()).collect::<Vec<_>>(), first_seed, "joining seed nodes");
        self.join = JoinProcess::SeedNodes {
            seeds,
            first_seed,
            remaining,
        };
        self.outputs.timers.cancel(&ClusterTimer::JoinRetry);
        if first_seed {
            self.outputs.timers.set(
                ClusterTimer::SeedNodeTimeout,
                now_ms.saturating_add(self.settings.seed_node_timeout_ms),
            );
        } else {
            self.outputs.timers.cancel(&ClusterTimer::SeedNodeTimeout);
        }
        self.send_init_joins(now_ms);
    }

    /// InitJoin to the seeds that may still answer; re-armed every second.
    pub(super) fn send_init_joins(&mut self, now_ms: u64) {
        let me = self.self_address().clone();
        let targets: Vec<Address> = match &self.join {
            JoinProcess::SeedNodes {
                first_seed: true,
                remaining,
                ..
            } => remaining.iter().cloned().collect(),
            JoinProcess::SeedNodes { seeds, .. } => {
                seeds.iter().filter(|s| **s != me).cloned().collect()
            }
            _ => return,
        };
        self.outputs.timers.set(
            ClusterTimer::InitJoin,
            now_ms.saturating_add(init_join_interval_ms(self.settings.seed_node_timeout_ms)),
        );
        for t in targets {
            self.send_to_address(&t, ClusterMessage::InitJoin { cluster: None });
        }
    }

    pub(super) fn seed_node_timeout(&mut self, now_ms: u64) {
        if matches!(
            self.join,
            JoinProcess::SeedNodes {
                first_seed: true,
                ..
            }
        ) {
            if !may_join_self_after_seed_timeout(self.membership_record.as_ref()) {
                let cluster = self
                    .membership_record
                    .and_then(|r| r.cluster)
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "unknown".into());
                warn!(
                    %cluster,
                    "no other seed node answered within seed-node-timeout, but this node was a member of a cluster (membership record in its data directory): it does not form a new cluster and keeps trying to join its seed nodes (to form a new one anyway, delete the record or join the node to itself)"
                );
                self.stats.self_joins_refused += 1;
                return;
            }
            info!("no other seed node answered within seed-node-timeout; forming a new cluster");
            self.join_self(now_ms);
        }
    }

    pub(super) fn retry_join(&mut self, now_ms: u64) {
        let JoinProcess::TryingToJoin { target, seeds } = &self.join else {
            return;
        };
        let (target, seeds) = (target.clone(), seeds.clone());
        match seeds {
            Some(s) => {
                warn!(%target, "join was not welcomed within retry-unsuccessful-join-after; trying the seed nodes again");
                self.start_seed_node_process(now_ms, s);
            }
            None => {
                warn!(%target, "join was not welcomed within retry-unsuccessful-join-after; retrying");
                self.send_join(now_ms, target, None);
            }
        }
    }

    fn send_join(&mut self, now_ms: u64, target: Address, seeds: Option<Vec<Address>>) {
        info!(%target, "sending Join");
        let msg = ClusterMessage::Join {
            roles: self.self_member.roles.clone(),
            app_version: self.self_member.app_version.clone(),
        };
        self.send_to_address(&target, msg);
        self.outputs.timers.cancel(&ClusterTimer::InitJoin);
        self.outputs.timers.cancel(&ClusterTimer::SeedNodeTimeout);
        match self.settings.retry_unsuccessful_join_after_ms {
            Some(r) => self
                .outputs
                .timers
                .set(ClusterTimer::JoinRetry, now_ms.saturating_add(r)),
            None => {
                self.outputs.timers.cancel(&ClusterTimer::JoinRetry);
            }
        }
        self.join = JoinProcess::TryingToJoin { target, seeds };
    }

    /// The join process is over: this node is a member now.
    fn joined(&mut self) {
        self.join = JoinProcess::Idle;
        self.initialized = true;
        for t in [
            ClusterTimer::InitJoin,
            ClusterTimer::SeedNodeTimeout,
            ClusterTimer::JoinRetry,
            ClusterTimer::JoinSeedNodesDeadline,
        ] {
            self.outputs.timers.cancel(&t);
        }
    }

    fn join_self(&mut self, now_ms: u64) {
        let id = loop {
            let id: u64 = self.rng.random();
            if id != 0 {
                break ClusterId(id);
            }
        };
        let identity = ClusterIdentity {
            id,
            reformed_from: self.membership_record.and_then(|r| r.cluster),
        };
        info!(cluster = %identity, "joining itself, forming a new cluster");
        let mut g = Gossip::single(self.self_member.clone());
        g.identity = Some(identity);
        self.joined();
        self.update_latest_gossip(now_ms, g);
    }

    /// Starts as a member of an existing cluster state (for simulators and tests that begin
    /// from a formed cluster instead of replaying thousands of joins). `gossip` must contain
    /// this node; returns false (and changes nothing) otherwise.
    pub fn adopt_initial_state(&mut self, now_ms: u64, gossip: Gossip) -> bool {
        let me = self.state.self_unique_address.clone();
        if self.initialized || !gossip.has_member(&me) {
            return false;
        }
        self.joined();
        self.update_latest_gossip(now_ms, gossip.seen(&me));
        true
    }

    /// `leave` of this node before it is in a cluster: nothing to leave, it just stops.
    pub(super) fn leave_before_joining(&mut self) {
        self.shut_down(ShutdownReason::LeftBeforeJoining);
    }

    // ------------------------------------------------------------------ messages

    pub(super) fn receive_init_join(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        cluster: Option<ClusterIdentity>,
    ) {
        if let Some(other) = cluster {
            self.found_cluster(now_ms, from, other);
        }
        let ok = self.initialized
            && self.state.self_member().is_some_and(|m| {
                !matches!(
                    m.status,
                    MemberStatus::Down | MemberStatus::Exiting | MemberStatus::Leaving
                )
            });
        let reply = if ok {
            ClusterMessage::InitJoinAck {
                cluster: self.cluster_identity(),
            }
        } else {
            ClusterMessage::InitJoinNack
        };
        self.send(from, reply);
    }

    pub(super) fn receive_init_join_ack(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        cluster: Option<ClusterIdentity>,
    ) {
        if self.initialized {
            // The answer to an island probe.
            if let Some(other) = cluster {
                if self.is_island_probe_target(&from.address) {
                    self.found_cluster(now_ms, from, other);
                } else {
                    self.stats.refused_non_member += 1;
                }
            }
            return;
        }
        // Only a seed this node asked may direct its join (a stranger's InitJoinAck would
        // otherwise make it join the stranger's "cluster").
        if let JoinProcess::SeedNodes { seeds, .. } = &self.join {
            if !seeds.contains(&from.address) {
                self.stats.refused_non_member += 1;
                return;
            }
            let seeds = seeds.clone();
            self.send_join(now_ms, from.address.clone(), Some(seeds));
        }
    }

    pub(super) fn receive_init_join_nack(&mut self, now_ms: u64, from: &UniqueAddress) {
        let form = match &mut self.join {
            JoinProcess::SeedNodes {
                first_seed: true,
                remaining,
                ..
            } => {
                remaining.remove(&from.address);
                remaining.is_empty()
            }
            _ => false,
        };
        if form {
            info!("all other seed nodes answered that they are not in a cluster; forming a new cluster");
            self.join_self(now_ms);
        }
    }

    pub(super) fn receive_join(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        roles: BTreeSet<String>,
        app_version: String,
    ) {
        // The admission check comes first, before anything is looked at or answered: a
        // Join from a non-member costs one admission (it may add the sender, and its answer
        // may open a connection), a retried Join from a member none.
        let newcomers = u64::from(!self.state.latest_gossip.has_member(from));
        if !self.admission_check(now_ms, from, newcomers) {
            return;
        }
        if !self.initialized {
            debug!(node = %from, "ignoring Join: not in a cluster yet");
            self.stats.ignored += 1;
            return;
        }
        let self_status = self.state.self_member().map(|m| m.status);
        if matches!(
            self_status,
            Some(MemberStatus::Down | MemberStatus::Exiting | MemberStatus::Leaving) | None
        ) {
            self.stats.ignored += 1;
            return;
        }
        if from.address == *self.self_address() || from.address.system != self.self_address().system
        {
            self.stats.ignored += 1;
            return;
        }
        if self.state.latest_gossip.tombstones.contains_key(from) {
            info!(node = %from, "ignoring Join from a removed incarnation; it must restart to join again");
            self.stats.ignored += 1;
            return;
        }
        let existing = self
            .state
            .latest_gossip
            .members
            .values()
            .find(|m| m.address() == &from.address)
            .cloned();
        match existing {
            Some(m) if m.unique_address == *from => {
                // Retried Join (lost Welcome): send the state again.
                let gossip = self.state.latest_gossip.clone();
                self.send(from, ClusterMessage::Welcome { gossip });
            }
            Some(old) => {
                if old.status != MemberStatus::Down {
                    info!(
                        old = %old.unique_address, new = %from,
                        "new incarnation of an existing member is trying to join; the old one is marked Down and will be removed, then the new one may join"
                    );
                    let me = self.state.self_unique_address.clone();
                    let mut g = self.state.latest_gossip.clone();
                    g.overview.reachability =
                        g.overview.reachability.terminated(&me, &old.unique_address);
                    g.members.insert(
                        old.unique_address.clone(),
                        old.with_status(MemberStatus::Down),
                    );
                    self.update_versioned(now_ms, g);
                }
            }
            None => {
                let member = Member::joining(from.clone(), roles, app_version);
                info!(node = %from, "node is JOINING");
                let mut g = self.state.latest_gossip.clone();
                g.members.insert(from.clone(), member);
                self.update_versioned(now_ms, g);
                let gossip = self.state.latest_gossip.clone();
                self.send(from, ClusterMessage::Welcome { gossip });
                self.gossip_round(now_ms);
            }
        }
    }

    /// Gossip before this node was welcomed: taken as the Welcome when it comes from the
    /// cluster this node asked to join — its sender is a member of it, it holds this very
    /// incarnation as a member, and the node this node sent its Join to is (or was) a member
    /// of it too. Otherwise ignored. Without it, a joiner whose Welcome was lost stays out
    /// for good once the member it joined through is gone (its retried Joins go nowhere)
    /// while the others count it as a member that never sees their gossip, and no Down
    /// member can ever be removed (found by the sharding simulation, seed 1043). Akka has
    /// the same gap.
    pub(super) fn receive_gossip_while_joining(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        gossip: Gossip,
    ) {
        let me = self.state.self_unique_address.clone();
        let JoinProcess::TryingToJoin { target, .. } = &self.join else {
            self.stats.ignored += 1;
            return;
        };
        let of_that_cluster = gossip.members.keys().any(|m| m.address == *target)
            || gossip.tombstones.keys().any(|m| m.address == *target);
        if !(gossip.has_member(&me) && gossip.has_member(from) && of_that_cluster)
            || gossip.tombstones.contains_key(&me)
        {
            self.stats.ignored += 1;
            return;
        }
        info!(from = %from, "welcomed into the cluster by its gossip (the Welcome did not arrive)");
        self.joined();
        self.update_latest_gossip(now_ms, gossip.seen(&me));
    }

    pub(super) fn receive_welcome(&mut self, now_ms: u64, from: &UniqueAddress, gossip: Gossip) {
        let expected = matches!(&self.join, JoinProcess::TryingToJoin { target, .. } if *target == from.address);
        if self.initialized || !expected {
            self.stats.ignored += 1;
            return;
        }
        let me = self.state.self_unique_address.clone();
        if !gossip.has_member(&me) {
            warn!(from = %from, "ignoring Welcome that does not contain this node");
            self.stats.ignored += 1;
            return;
        }
        info!(from = %from, "welcomed into the cluster");
        self.joined();
        self.update_latest_gossip(now_ms, gossip.seen(&me));
    }
}
