//! [`ClusterCore`]: the sans-IO membership state machine of one node (Akka's
//! `ClusterCoreDaemon`, `ClusterHeartbeatSender` and seed-node processes in one).
//!
//! Inputs: [`ClusterCore::handle_message`] (a message from an authenticated peer),
//! [`ClusterCore::handle_timeout`] (time passed) and the user commands `join`,
//! `join_seed_nodes`, `leave`, `down`, `prepare_for_full_cluster_shutdown`. Outputs are
//! polled: [`ClusterCore::poll_transmit`], [`ClusterCore::poll_event`],
//! [`ClusterCore::poll_timeout`] (next deadline) and [`ClusterCore::shutdown_reason`].
//! Time is milliseconds passed in by the caller; randomness comes from a seeded RNG.
//!
//! Spec: cluster-specification.md ("Gossip", "Failure Detector", "Leader", "Seed Nodes",
//! "Gossip Protocol", "Membership Lifecycle") and cluster-membership-service.md.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tracing::{debug, info, warn};

use crate::address::{Address, UniqueAddress};
use crate::events::{diff, ClusterEvent, CurrentClusterState};
use crate::failure_detector::PhiAccrualFailureDetector;
use crate::gossip::Gossip;
use crate::heartbeat_ring::HeartbeatNodeRing;
use crate::leader::{
    leader_actions_on_convergence, move_joining_to_weakly_up, track_joining, LeaderActionsResult,
};
use crate::member::{Member, MemberStatus};
use crate::membership_state::{adjusted_gossip_different_view_probability, MembershipState};
use crate::message::{ClusterMessage, Transmit};
use crate::reachability::ReachabilityStatus;
use crate::settings::ClusterSettings;
use crate::split_brain_resolver::{SbrAction, SplitBrainResolver};
use crate::vector_clock::ClockOrdering;

/// Why the node asks the runtime to shut it down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownReason {
    /// The node left gracefully and was removed.
    Removed,
    /// The node was marked Down (`run-coordinated-shutdown-when-down`).
    Downed,
    /// The node was Exiting and did not learn of its removal in time.
    ExitingTimeout,
    /// Joining the seed nodes did not succeed in time
    /// (`shutdown-after-unsuccessful-join-seed-nodes`).
    JoinSeedNodesTimeout,
    /// `leave` was called before the node was in a cluster.
    LeftBeforeJoining,
    /// Stopped by its owner without leaving (the runtime's abrupt stop).
    Stopped,
    /// A peer refused this incarnation as quarantined: it was removed from the cluster
    /// (e.g. downed while paused or partitioned).
    Quarantined,
}

/// Errors of user commands. None of them changes the node's state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// No member has this address.
    #[error("member [{0}] not found")]
    UnknownMember(Address),
    /// The node is not a member of a cluster yet.
    #[error("this node is not a member of a cluster")]
    NotInCluster,
    /// The seed-node list was empty.
    #[error("the seed-node list is empty")]
    NoSeedNodes,
    /// A join target belongs to another cluster (system name).
    #[error("cannot join [{0}]: it belongs to another cluster than `{1}`")]
    OtherCluster(Address, String),
}

/// Counters an operator watches (exported as metrics by the runtime).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Gossip ticks (rounds) performed.
    pub gossip_rounds: u64,
    /// Full gossip envelopes sent.
    pub gossip_sent: u64,
    /// Gossip status messages sent.
    pub gossip_status_sent: u64,
    /// Full gossip envelopes received.
    pub gossip_received: u64,
    /// Gossip status messages received.
    pub gossip_status_received: u64,
    /// Heartbeat requests sent.
    pub heartbeats_sent: u64,
    /// Messages ignored (unknown sender, not for this incarnation, ...).
    pub ignored: u64,
}

#[derive(Clone, Debug)]
enum JoinProcess {
    Idle,
    SeedNodes {
        seeds: Vec<Address>,
        first_seed: bool,
        /// Other seeds that have not answered InitJoinNack (first-seed process).
        remaining: BTreeSet<Address>,
        /// First seed: join self at this time.
        self_join_deadline_ms: u64,
        next_init_join_ms: u64,
    },
    TryingToJoin {
        target: Address,
        seeds: Option<Vec<Address>>,
        retry_at_ms: Option<u64>,
    },
}

/// The membership state machine of one node. See the module docs.
pub struct ClusterCore {
    settings: ClusterSettings,
    self_member: Member,
    state: MembershipState,
    initialized: bool,
    join: JoinProcess,
    join_seed_nodes_deadline_ms: Option<u64>,
    rng: SmallRng,
    next_gossip_ms: u64,
    speedup_ticks_ms: Vec<u64>,
    next_heartbeat_ms: u64,
    next_reaper_ms: u64,
    next_leader_actions_ms: u64,
    heartbeat_seq: u64,
    ring_dirty: bool,
    active_receivers: BTreeSet<UniqueAddress>,
    failure_detectors: BTreeMap<UniqueAddress, PhiAccrualFailureDetector>,
    expected_first_heartbeat_ms: BTreeMap<UniqueAddress, u64>,
    joining_since_ms: BTreeMap<UniqueAddress, u64>,
    exiting_since_ms: Option<u64>,
    down_at_ms: Option<u64>,
    shutdown: Option<ShutdownReason>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<ClusterEvent>,
    stats: CoreStats,
    state_changes: u64,
    sbr: Option<SplitBrainResolver>,
    lease_requests: VecDeque<u64>,
}

impl ClusterCore {
    /// A node that is not yet in a cluster. `rng_seed` seeds all its random choices.
    pub fn new(
        self_unique_address: UniqueAddress,
        roles: BTreeSet<String>,
        app_version: impl Into<String>,
        settings: ClusterSettings,
        now_ms: u64,
        rng_seed: u64,
    ) -> Self {
        let first = now_ms + settings.periodic_tasks_initial_delay_ms;
        let settings_sbr = settings.downing.clone().map(SplitBrainResolver::new);
        let self_member = Member::joining(self_unique_address.clone(), roles, app_version);
        ClusterCore {
            next_gossip_ms: first,
            next_heartbeat_ms: first,
            next_reaper_ms: first + settings.unreachable_nodes_reaper_interval_ms,
            next_leader_actions_ms: first + settings.leader_actions_interval_ms,
            settings,
            self_member,
            state: MembershipState::new(Gossip::empty(), self_unique_address),
            initialized: false,
            join: JoinProcess::Idle,
            join_seed_nodes_deadline_ms: None,
            rng: SmallRng::seed_from_u64(rng_seed),
            speedup_ticks_ms: Vec::new(),
            heartbeat_seq: 0,
            ring_dirty: true,
            active_receivers: BTreeSet::new(),
            failure_detectors: BTreeMap::new(),
            expected_first_heartbeat_ms: BTreeMap::new(),
            joining_since_ms: BTreeMap::new(),
            exiting_since_ms: None,
            down_at_ms: None,
            shutdown: None,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            stats: CoreStats::default(),
            state_changes: 0,
            sbr: settings_sbr,
            lease_requests: VecDeque::new(),
        }
    }

    // ------------------------------------------------------------------ queries

    /// This node.
    pub fn self_unique_address(&self) -> &UniqueAddress {
        &self.state.self_unique_address
    }

    /// This node's address.
    pub fn self_address(&self) -> &Address {
        &self.state.self_unique_address.address
    }

    /// The settings.
    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }

    /// The current view.
    pub fn state(&self) -> &MembershipState {
        &self.state
    }

    /// The latest gossip.
    pub fn latest_gossip(&self) -> &Gossip {
        &self.state.latest_gossip
    }

    /// A snapshot for subscribers and the management API.
    pub fn current_cluster_state(&self) -> CurrentClusterState {
        CurrentClusterState::of(&self.state)
    }

    /// This node's member entry (status Joining with no cluster yet; Removed once removed).
    pub fn self_member(&self) -> Member {
        match self.state.self_member() {
            Some(m) => m.clone(),
            None if self.shutdown == Some(ShutdownReason::Removed) => {
                self.self_member.with_status(MemberStatus::Removed)
            }
            None => self.self_member.clone(),
        }
    }

    /// True once the node is a member of a cluster.
    pub fn is_initialized(&self) -> bool {
        self.initialized
    }

    /// Increases every time the membership state (latest gossip or shutdown) changes;
    /// lets a driver refresh derived views only when needed.
    pub fn state_changes(&self) -> u64 {
        self.state_changes
    }

    /// Protocol counters.
    pub fn stats(&self) -> CoreStats {
        self.stats
    }

    /// φ of the failure detector monitoring `node`, if this node monitors it.
    pub fn phi(&self, node: &UniqueAddress, now_ms: u64) -> Option<f64> {
        self.failure_detectors.get(node).map(|fd| fd.phi(now_ms))
    }

    /// Nodes this node currently sends heartbeats to.
    pub fn heartbeat_receivers(&self) -> &BTreeSet<UniqueAddress> {
        &self.active_receivers
    }

    /// Set when the node should shut down; the runtime then flushes and exits.
    pub fn shutdown_reason(&self) -> Option<ShutdownReason> {
        self.shutdown
    }

    // ------------------------------------------------------------------ outputs

    /// Next message to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// Next lease acquisition the Split Brain Resolver asks for (lease-majority): try
    /// after the returned delay (ms), then call [`ClusterCore::handle_lease_result`].
    #[must_use]
    pub fn poll_lease_request(&mut self) -> Option<u64> {
        self.lease_requests.pop_front()
    }

    /// The outcome of a requested lease acquisition.
    pub fn handle_lease_result(&mut self, granted: bool) {
        if let Some(sbr) = &mut self.sbr {
            sbr.on_lease_result(granted);
        }
    }

    /// A peer refused this incarnation because it is quarantined: this node was removed
    /// from the cluster while it could not hear about it. It shuts down.
    pub fn handle_quarantined_by_peer(&mut self, peer: &Address) {
        if self.initialized && self.shutdown.is_none() {
            warn!(%peer, "a peer refused this node as quarantined: it was removed from the cluster; shutting down");
            self.shutdown = Some(ShutdownReason::Quarantined);
            self.state_changes += 1;
        }
    }

    /// Next domain event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ClusterEvent> {
        self.events.pop_front()
    }

    /// The next time [`ClusterCore::handle_timeout`] must be called, ms.
    pub fn poll_timeout(&self) -> Option<u64> {
        let mut t = self
            .next_gossip_ms
            .min(self.next_heartbeat_ms)
            .min(self.next_reaper_ms)
            .min(self.next_leader_actions_ms);
        if let Some(s) = self.speedup_ticks_ms.iter().min() {
            t = t.min(*s);
        }
        if let JoinProcess::SeedNodes {
            next_init_join_ms,
            self_join_deadline_ms,
            first_seed,
            ..
        } = &self.join
        {
            t = t.min(*next_init_join_ms);
            if *first_seed {
                t = t.min(*self_join_deadline_ms);
            }
        }
        if let JoinProcess::TryingToJoin {
            retry_at_ms: Some(r),
            ..
        } = &self.join
        {
            t = t.min(*r);
        }
        if let Some(d) = self.join_seed_nodes_deadline_ms {
            t = t.min(d);
        }
        if let Some(d) = self.expected_first_heartbeat_ms.values().min() {
            t = t.min(*d);
        }
        Some(t)
    }

    fn send(&mut self, to: &UniqueAddress, message: ClusterMessage) {
        self.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            message,
        });
    }

    fn send_to_address(&mut self, to: &Address, message: ClusterMessage) {
        self.transmits.push_back(Transmit {
            to: to.clone(),
            to_uid: None,
            message,
        });
    }

    // ------------------------------------------------------------------ user commands

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
            self.join_seed_nodes_deadline_ms.get_or_insert(now_ms + t);
        }
        self.start_seed_node_process(now_ms, seeds.to_vec());
        Ok(())
    }

    fn start_seed_node_process(&mut self, now_ms: u64, mut seeds: Vec<Address>) {
        let me = self.self_address().clone();
        let mut seen = BTreeSet::new();
        seeds.retain(|s| seen.insert(s.clone()));
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
            self_join_deadline_ms: now_ms + self.settings.seed_node_timeout_ms,
            next_init_join_ms: now_ms,
        };
        self.seed_node_tick(now_ms);
    }

    fn seed_node_tick(&mut self, now_ms: u64) {
        let me = self.self_address().clone();
        let (targets, first_seed, deadline) = match &mut self.join {
            JoinProcess::SeedNodes {
                seeds,
                first_seed,
                next_init_join_ms,
                self_join_deadline_ms,
                remaining,
            } => {
                if *first_seed && now_ms >= *self_join_deadline_ms {
                    (Vec::new(), true, true)
                } else if now_ms >= *next_init_join_ms {
                    *next_init_join_ms =
                        now_ms + 1000.min(self.settings.seed_node_timeout_ms.max(100));
                    let targets: Vec<Address> = if *first_seed {
                        remaining.iter().cloned().collect()
                    } else {
                        seeds.iter().filter(|s| **s != me).cloned().collect()
                    };
                    (targets, *first_seed, false)
                } else {
                    return;
                }
            }
            _ => return,
        };
        if first_seed && deadline {
            info!("no other seed node answered within seed-node-timeout; forming a new cluster");
            self.join_self(now_ms);
            return;
        }
        for t in targets {
            self.send_to_address(&t, ClusterMessage::InitJoin);
        }
    }

    fn send_join(&mut self, now_ms: u64, target: Address, seeds: Option<Vec<Address>>) {
        info!(%target, "sending Join");
        let msg = ClusterMessage::Join {
            roles: self.self_member.roles.clone(),
            app_version: self.self_member.app_version.clone(),
        };
        self.send_to_address(&target, msg);
        let retry_at_ms = self
            .settings
            .retry_unsuccessful_join_after_ms
            .map(|r| now_ms + r);
        self.join = JoinProcess::TryingToJoin {
            target,
            seeds,
            retry_at_ms,
        };
    }

    fn join_self(&mut self, now_ms: u64) {
        info!("joining itself, forming a new cluster");
        let g = Gossip::single(self.self_member.clone());
        self.join = JoinProcess::Idle;
        self.join_seed_nodes_deadline_ms = None;
        self.initialized = true;
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
        self.join = JoinProcess::Idle;
        self.initialized = true;
        self.update_latest_gossip(now_ms, gossip.seen(&me));
        true
    }

    /// Marks the member at `address` Leaving (graceful removal: Leaving → Exiting →
    /// Removed by the leader). Leaving oneself before joining shuts the node down.
    pub fn leave(&mut self, now_ms: u64, address: &Address) -> Result<(), CommandError> {
        if !self.initialized {
            if address == self.self_address() {
                self.shutdown = Some(ShutdownReason::LeftBeforeJoining);
                return Ok(());
            }
            return Err(CommandError::NotInCluster);
        }
        let m = self.member_by_address(address)?;
        if matches!(
            m.status,
            MemberStatus::Joining
                | MemberStatus::WeaklyUp
                | MemberStatus::Up
                | MemberStatus::PreparingForShutdown
                | MemberStatus::ReadyForShutdown
        ) {
            info!(member = %m.unique_address, "marking member Leaving");
            let mut g = self.state.latest_gossip.clone();
            g.members.insert(
                m.unique_address.clone(),
                m.with_status(MemberStatus::Leaving),
            );
            self.update_versioned(now_ms, g);
        }
        Ok(())
    }

    /// Marks the member at `address` Down; the leader then removes it even though it is
    /// unreachable.
    pub fn down(&mut self, now_ms: u64, address: &Address) -> Result<(), CommandError> {
        if !self.initialized {
            return Err(CommandError::NotInCluster);
        }
        let m = self.member_by_address(address)?;
        self.down_member(now_ms, &m);
        Ok(())
    }

    fn down_member(&mut self, now_ms: u64, m: &Member) {
        if m.status.can_transition_to(MemberStatus::Down) {
            info!(member = %m.unique_address, "marking member Down");
            let mut g = self.state.latest_gossip.clone();
            g.members
                .insert(m.unique_address.clone(), m.with_status(MemberStatus::Down));
            self.update_versioned(now_ms, g);
        }
    }

    /// Starts a full cluster shutdown: every Up member becomes PreparingForShutdown; the
    /// leader then moves them to ReadyForShutdown on convergence.
    pub fn prepare_for_full_cluster_shutdown(&mut self, now_ms: u64) -> Result<(), CommandError> {
        if !self.initialized {
            return Err(CommandError::NotInCluster);
        }
        let mut g = self.state.latest_gossip.clone();
        let mut changed = false;
        for m in g.members.values_mut() {
            if m.status == MemberStatus::Up {
                *m = m.with_status(MemberStatus::PreparingForShutdown);
                changed = true;
            }
        }
        if changed {
            info!("preparing for full cluster shutdown");
            self.update_versioned(now_ms, g);
        }
        Ok(())
    }

    fn member_by_address(&self, address: &Address) -> Result<Member, CommandError> {
        self.state
            .latest_gossip
            .members
            .values()
            .find(|m| m.address() == address)
            .cloned()
            .ok_or_else(|| CommandError::UnknownMember(address.clone()))
    }

    // ------------------------------------------------------------------ state updates

    fn update_versioned(&mut self, now_ms: u64, g: Gossip) {
        let me = self.state.self_unique_address.clone();
        self.update_latest_gossip(now_ms, g.bump(&me));
    }

    fn update_latest_gossip(&mut self, now_ms: u64, g: Gossip) {
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
                other => {
                    if let Some(m) = other.member() {
                        info!(member = %m.unique_address, status = %m.status, "{}", other.type_name())
                    }
                }
            }
            self.events.push_back(e);
        }
        if old_state
            .latest_gossip
            .members
            .keys()
            .ne(self.state.latest_gossip.members.keys())
            || old_state.latest_gossip.overview.reachability
                != self.state.latest_gossip.overview.reachability
        {
            self.ring_dirty = true;
        }
        self.check_self_status(now_ms);
    }

    fn check_self_status(&mut self, now_ms: u64) {
        if !self.initialized || self.shutdown.is_some() {
            return;
        }
        let me = &self.state.self_unique_address;
        match self.state.latest_gossip.member(me).map(|m| m.status) {
            None => self.self_removed(),
            Some(MemberStatus::Down) if self.settings.run_coordinated_shutdown_when_down => {
                // Keep gossiping for two rounds so the cluster learns, then stop.
                self.down_at_ms
                    .get_or_insert(now_ms + 2 * self.settings.gossip_interval_ms);
            }
            Some(MemberStatus::Exiting) => {
                self.exiting_since_ms.get_or_insert(now_ms);
            }
            _ => {}
        }
    }

    fn self_removed(&mut self) {
        if self.shutdown.is_none() {
            info!("this node has been removed from the cluster; shutting down");
            let me = self.state.self_unique_address.clone();
            if let Some(m) = self.state.latest_gossip.member(&me).cloned() {
                self.events.push_back(ClusterEvent::MemberRemoved {
                    member: m.with_status(MemberStatus::Removed),
                    previous_status: m.status,
                });
            }
            self.shutdown = Some(ShutdownReason::Removed);
            self.state_changes += 1;
        }
    }

    // ------------------------------------------------------------------ messages

    /// Handles a message from `from` (authenticated by the transport handshake).
    pub fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, msg: ClusterMessage) {
        if self.shutdown.is_some() {
            return;
        }
        match msg {
            ClusterMessage::InitJoin => self.receive_init_join(from),
            ClusterMessage::InitJoinAck => self.receive_init_join_ack(now_ms, from),
            ClusterMessage::InitJoinNack => self.receive_init_join_nack(now_ms, from),
            ClusterMessage::Join { roles, app_version } => {
                self.receive_join(now_ms, from, roles, app_version)
            }
            ClusterMessage::Welcome { gossip } => self.receive_welcome(now_ms, from, gossip),
            ClusterMessage::GossipEnvelope { to, gossip } => {
                self.receive_gossip(now_ms, from, &to, gossip)
            }
            ClusterMessage::GossipStatus {
                version,
                seen_digest,
            } => self.receive_gossip_status(from, version, seen_digest),
            ClusterMessage::Heartbeat {
                sequence_nr,
                creation_time_ms,
            } => self.send(
                from,
                ClusterMessage::HeartbeatRsp {
                    sequence_nr,
                    creation_time_ms,
                },
            ),
            ClusterMessage::HeartbeatRsp { .. } => {
                if self.active_receivers.contains(from) {
                    let phi = self.settings.failure_detector.phi_settings();
                    self.failure_detectors
                        .entry(from.clone())
                        .or_insert_with(|| PhiAccrualFailureDetector::new(phi))
                        .heartbeat(now_ms);
                    self.expected_first_heartbeat_ms.remove(from);
                }
            }
        }
    }

    fn receive_init_join(&mut self, from: &UniqueAddress) {
        let ok = self.initialized
            && self.state.self_member().is_some_and(|m| {
                !matches!(
                    m.status,
                    MemberStatus::Down | MemberStatus::Exiting | MemberStatus::Leaving
                )
            });
        let reply = if ok {
            ClusterMessage::InitJoinAck
        } else {
            ClusterMessage::InitJoinNack
        };
        self.send(from, reply);
    }

    fn receive_init_join_ack(&mut self, now_ms: u64, from: &UniqueAddress) {
        if let JoinProcess::SeedNodes { seeds, .. } = &self.join {
            let seeds = seeds.clone();
            self.send_join(now_ms, from.address.clone(), Some(seeds));
        }
    }

    fn receive_init_join_nack(&mut self, now_ms: u64, from: &UniqueAddress) {
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

    fn receive_join(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        roles: BTreeSet<String>,
        app_version: String,
    ) {
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

    fn receive_welcome(&mut self, now_ms: u64, from: &UniqueAddress, gossip: Gossip) {
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
        self.join = JoinProcess::Idle;
        self.join_seed_nodes_deadline_ms = None;
        self.initialized = true;
        self.update_latest_gossip(now_ms, gossip.seen(&me));
    }

    fn receive_gossip(
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
            self.stats.ignored += 1;
            return;
        }
        if remote.tombstones.contains_key(&me) {
            self.self_removed();
            return;
        }
        let local = &self.state.latest_gossip;
        if remote.has_member(&me) && !local.has_member(from) && !local.tombstones.contains_key(from)
        {
            // A member of this cluster welcomed `from` but crashed before its gossip about
            // the join reached anyone else: `from` now gossips as a Joining member that nobody
            // else knows, and would stay Joining forever. Its gossip contains this node, so it
            // was admitted by our cluster; handle it as the Join it sent (found by the
            // simulator, seeds 5750, 7874 and 7888 of `concord-sim --seeds 10000`).
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
        let local = &self.state.latest_gossip;
        if !remote.has_member(&me) || !local.has_member(from) || local.tombstones.contains_key(from)
        {
            debug!(%from, "ignoring gossip from a node that is not a member or does not know this node");
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
            ClockOrdering::Concurrent => (remote.merge(local), true),
        };
        let new = winner.normalize().seen(&me);
        if new != self.state.latest_gossip {
            self.update_latest_gossip(now_ms, new);
        }
        if talkback {
            self.send_gossip_to(from);
        }
    }

    fn receive_gossip_status(
        &mut self,
        from: &UniqueAddress,
        version: crate::vector_clock::VectorClock,
        seen_digest: u64,
    ) {
        self.stats.gossip_status_received += 1;
        let me = self.state.self_unique_address.clone();
        let local = &self.state.latest_gossip;
        if !self.initialized
            || !local.has_member(from)
            || !local.overview.reachability.is_reachable_from(&me, from)
        {
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

    fn send_gossip_to(&mut self, to: &UniqueAddress) {
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

    // ------------------------------------------------------------------ timers

    /// Runs every task whose time has come.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        if self.shutdown.is_some() {
            return;
        }
        self.seed_node_tick(now_ms);
        if let JoinProcess::TryingToJoin {
            target,
            seeds,
            retry_at_ms: Some(r),
        } = &self.join
        {
            if now_ms >= *r {
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
        }
        if let Some(d) = self.join_seed_nodes_deadline_ms {
            if now_ms >= d && !self.initialized {
                warn!("could not join the seed nodes within shutdown-after-unsuccessful-join-seed-nodes; shutting down");
                self.shutdown = Some(ShutdownReason::JoinSeedNodesTimeout);
                return;
            }
        }
        let due_first: Vec<UniqueAddress> = self
            .expected_first_heartbeat_ms
            .iter()
            .filter(|(_, d)| **d <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for n in due_first {
            self.expected_first_heartbeat_ms.remove(&n);
            let phi = self.settings.failure_detector.phi_settings();
            let fd = self
                .failure_detectors
                .entry(n)
                .or_insert_with(|| PhiAccrualFailureDetector::new(phi));
            if !fd.is_monitoring() {
                // No reply yet: start the clock as if a heartbeat had arrived, so a node
                // that never answers is detected.
                fd.heartbeat(now_ms);
            }
        }
        if now_ms >= self.next_heartbeat_ms {
            self.next_heartbeat_ms = now_ms + self.settings.failure_detector.heartbeat_interval_ms;
            self.heartbeat_tick(now_ms);
        }
        if now_ms >= self.next_reaper_ms {
            self.next_reaper_ms = now_ms + self.settings.unreachable_nodes_reaper_interval_ms;
            self.reap_unreachable(now_ms);
        }
        if now_ms >= self.next_leader_actions_ms {
            self.next_leader_actions_ms = now_ms + self.settings.leader_actions_interval_ms;
            self.leader_actions(now_ms);
        }
        let due_speedup = self.speedup_ticks_ms.iter().any(|t| *t <= now_ms);
        self.speedup_ticks_ms.retain(|t| *t > now_ms);
        if now_ms >= self.next_gossip_ms {
            self.next_gossip_ms = now_ms + self.settings.gossip_interval_ms;
            self.gossip_tick(now_ms);
        } else if due_speedup {
            self.gossip_round(now_ms);
        }
        if let Some(d) = self.down_at_ms {
            if now_ms >= d && self.shutdown.is_none() {
                info!("this node is Down; shutting down (run-coordinated-shutdown-when-down)");
                self.shutdown = Some(ShutdownReason::Downed);
            }
        }
        if let Some(since) = self.exiting_since_ms {
            if now_ms >= since + self.settings.exiting_shutdown_timeout_ms
                && self.shutdown.is_none()
            {
                warn!("Exiting, but removal was not observed in time; shutting down");
                self.shutdown = Some(ShutdownReason::ExitingTimeout);
            }
        }
    }

    fn gossip_tick(&mut self, now_ms: u64) {
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
            self.speedup_ticks_ms = vec![now_ms + i / 3, now_ms + 2 * i / 3];
        }
    }

    /// One round of gossip to one peer: the full state if the peer has not seen it,
    /// otherwise only the status.
    fn gossip_round(&mut self, _now_ms: u64) {
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

    fn heartbeat_tick(&mut self, now_ms: u64) {
        if !self.initialized {
            return;
        }
        if self.ring_dirty {
            self.ring_dirty = false;
            let g = &self.state.latest_gossip;
            let ring = HeartbeatNodeRing::new(
                self.state.self_unique_address.clone(),
                g.members.keys().cloned(),
                g.overview.reachability.all_unreachable_or_terminated(),
                self.settings.failure_detector.monitored_by_nr_of_members,
            );
            let receivers = ring.my_receivers();
            self.failure_detectors.retain(|k, _| receivers.contains(k));
            self.expected_first_heartbeat_ms
                .retain(|k, _| receivers.contains(k));
            for r in receivers.difference(&self.active_receivers) {
                self.expected_first_heartbeat_ms.insert(
                    r.clone(),
                    now_ms + self.settings.failure_detector.expected_response_after_ms,
                );
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

    /// Marks monitored nodes whose φ crossed the threshold as unreachable (observer =
    /// self), and reachable again when heartbeats resume.
    fn reap_unreachable(&mut self, now_ms: u64) {
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

    fn split_brain_resolver_tick(&mut self, now_ms: u64) {
        let Some(sbr) = &mut self.sbr else { return };
        match sbr.tick(now_ms, &self.state) {
            Some(SbrAction::Down { decision, nodes }) => {
                warn!(
                    strategy = sbr.settings().strategy.name(),
                    ?decision,
                    nodes = ?nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
                    "split brain resolver decision: downing members"
                );
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
                self.lease_requests.push_back(delay_ms);
            }
            None => {}
        }
    }

    fn leader_actions(&mut self, now_ms: u64) {
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

#[cfg(test)]
mod tests;
