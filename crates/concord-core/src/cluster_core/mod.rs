//! [`ClusterCore`]: the sans-IO membership state machine of one node (Akka's
//! `ClusterCoreDaemon`, `ClusterHeartbeatSender` and seed-node processes in one).
//!
//! It is a [`ProtocolMachine`] like every other layer. Inputs:
//! [`ClusterCore::handle_message`] (a message from an authenticated peer),
//! [`ClusterCore::handle_timeout`] (time passed), the user commands (`join`,
//! `join_seed_nodes`, `leave`, `down`, `prepare_for_full_cluster_shutdown`) and the
//! runtime's answers ([`ClusterCore::handle_lease_result`],
//! [`ClusterCore::handle_quarantined_by_peer`], [`ClusterCore::exiting_completed`]).
//! Outputs are polled: [`ClusterCore::poll_transmit`], [`ClusterCore::poll_event`],
//! [`ClusterCore::poll_timeout`] (the earliest deadline of its [`TimerTable`]),
//! [`ClusterCore::poll_quarantine`], [`ClusterCore::poll_lease_request`] and
//! [`ClusterCore::shutdown_reason`]. Time is milliseconds passed in by the caller;
//! randomness comes from a seeded RNG.
//!
//! The parts: `join` (seed-node process, InitJoin/Join/Welcome), `gossip` (gossip
//! rounds, merge, status), `heartbeat` (heartbeat sender, first-heartbeat deadline,
//! unreachable reaper), `commands` (leave, down, full-cluster shutdown), `lifecycle`
//! (state updates and events, leader actions, downing, exiting, removal, quarantine,
//! lease) and `timers` (the timer enum and what each one does).
//!
//! Spec: cluster-specification.md ("Gossip", "Failure Detector", "Leader", "Seed Nodes",
//! "Gossip Protocol", "Membership Lifecycle") and cluster-membership-service.md.

mod cluster_timer;
mod command_error;
mod commands;
mod core_stats;
mod gossip;
mod heartbeat;
mod island;
mod join;
mod join_process;
mod lease_request;
mod lifecycle;
mod other_cluster;
mod sbr_decision_record;
mod shutdown_reason;
mod timers;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::address::{Address, UniqueAddress};
use crate::cluster_identity::{ClusterIdentity, MembershipRecord};
use crate::events::ClusterEvent;
use crate::failure_detector::PhiAccrualFailureDetector;
use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;
use crate::membership_view::MembershipView;
use crate::message::ClusterMessage;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};
use crate::rate_limit::TokenBucket;
use crate::settings::ClusterSettings;
use crate::split_brain_resolver::SplitBrainResolver;
use crate::timers::TimerTable;

pub use cluster_timer::ClusterTimer;
pub use command_error::CommandError;
pub use core_stats::CoreStats;
use join_process::JoinProcess;
pub use lease_request::LeaseRequest;
pub use other_cluster::{
    OtherCluster, ISLAND_PROBE_INTERVAL_MS, MAX_ISLAND_PROBE_TARGETS,
    OTHER_CLUSTER_FORGOTTEN_AFTER_MS,
};
pub use sbr_decision_record::{SbrDecisionRecord, SBR_DECISIONS_KEPT};
pub use shutdown_reason::ShutdownReason;

/// The membership state machine of one node. See the module docs.
pub struct ClusterCore {
    settings: ClusterSettings,
    self_member: Member,
    state: MembershipState,
    initialized: bool,
    join: JoinProcess,
    rng: SmallRng,
    /// Transmits, domain events and timers, drained by the host through the
    /// [`ProtocolMachine`] verbs.
    outputs: Outputs<ClusterMessage, ClusterEvent, ClusterTimer>,
    heartbeat_seq: u64,
    ring_dirty: bool,
    active_receivers: BTreeSet<UniqueAddress>,
    /// Receivers the ring dropped while their failure detector said unavailable: still
    /// monitored until they answer or leave the membership, so that this node's own
    /// unreachability record of them stays backed by a detector (Akka
    /// `HeartbeatSenderState.oldReceiversNowUnreachable`).
    old_receivers_now_unreachable: BTreeSet<UniqueAddress>,
    failure_detectors: BTreeMap<UniqueAddress, PhiAccrualFailureDetector>,
    joining_since_ms: BTreeMap<UniqueAddress, u64>,
    /// Self has been seen Exiting (the coordinated shutdown's exiting tasks were asked for).
    exiting_seen: bool,
    /// The runtime reported that the exiting tasks are done ([`ClusterCore::exiting_completed`]).
    exiting_done: bool,
    shutdown: Option<ShutdownReason>,
    quarantines: VecDeque<UniqueAddress>,
    lease_requests: VecDeque<LeaseRequest>,
    /// Requests to start the coordinated shutdown, with their reason (see
    /// [`ClusterCore::poll_coordinated_shutdown`]).
    coordinated_shutdown: VecDeque<ShutdownReason>,
    /// A Down of this node already asked for the coordinated shutdown.
    down_shutdown_requested: bool,
    stats: CoreStats,
    /// Rate limit of InitJoin and heartbeats answered for non-members, and of admissions
    /// (see [`ClusterCore::admission_check`]).
    non_member_requests: TokenBucket,
    state_changes: u64,
    sbr: Option<SplitBrainResolver>,
    /// The latest split brain resolver decisions this node carried out (at most
    /// [`SBR_DECISIONS_KEPT`]), oldest first.
    sbr_decisions: VecDeque<SbrDecisionRecord>,
    /// What the node's membership record said at start ([`ClusterCore::set_membership_record`]).
    membership_record: Option<MembershipRecord>,
    /// The seed nodes of the last seed-node process (island probes go to those outside
    /// this node's cluster).
    seed_nodes: Vec<Address>,
    /// Further island probe targets the runtime learned outside the seed-node process
    /// (Cluster Bootstrap's contact points; [`ClusterCore::set_island_probe_targets`]), at
    /// most [`MAX_ISLAND_PROBE_TARGETS`].
    island_probe_targets: BTreeSet<Address>,
    /// Other clusters of this system name found through the seed nodes, by id (at most
    /// [`other_cluster::MAX_OTHER_CLUSTERS`]).
    other_clusters: BTreeMap<crate::cluster_identity::ClusterId, OtherCluster>,
}

/// InitJoin, Join and heartbeat requests from non-members a node answers per second (on
/// average), and members it admits per second (every path: Join, gossip taken as a Join,
/// members carried by the gossip of a member not yet Up); more are dropped and counted
/// ([`CoreStats::join_requests_throttled`]). A joining node retries, so a legitimate join
/// is only delayed by a flood.
pub const JOIN_REQUESTS_PER_SECOND: u64 = 20;

/// Non-member requests answered (and members admitted) at once before
/// [`JOIN_REQUESTS_PER_SECOND`] applies (a large cluster starting all at once).
pub const JOIN_REQUEST_BURST: u64 = 100;

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
        let first = now_ms.saturating_add(settings.periodic_tasks_initial_delay_ms);
        let mut outputs = Outputs::new();
        outputs.timers.set(ClusterTimer::Gossip, first);
        outputs.timers.set(ClusterTimer::Heartbeat, first);
        outputs.timers.set(
            ClusterTimer::IslandProbe,
            first.saturating_add(ISLAND_PROBE_INTERVAL_MS),
        );
        outputs.timers.set(
            ClusterTimer::Reaper,
            first.saturating_add(settings.unreachable_nodes_reaper_interval_ms),
        );
        outputs.timers.set(
            ClusterTimer::LeaderActions,
            first.saturating_add(settings.leader_actions_interval_ms),
        );
        let sbr = settings.downing.clone().map(SplitBrainResolver::new);
        let self_member = Member::joining(self_unique_address.clone(), roles, app_version);
        ClusterCore {
            settings,
            self_member,
            state: MembershipState::new(Gossip::empty(), self_unique_address),
            initialized: false,
            join: JoinProcess::Idle,
            rng: SmallRng::seed_from_u64(rng_seed),
            outputs,
            heartbeat_seq: 0,
            ring_dirty: true,
            active_receivers: BTreeSet::new(),
            old_receivers_now_unreachable: BTreeSet::new(),
            failure_detectors: BTreeMap::new(),
            joining_since_ms: BTreeMap::new(),
            exiting_seen: false,
            exiting_done: false,
            shutdown: None,
            quarantines: VecDeque::new(),
            lease_requests: VecDeque::new(),
            coordinated_shutdown: VecDeque::new(),
            down_shutdown_requested: false,
            sbr_decisions: VecDeque::new(),
            stats: CoreStats::default(),
            non_member_requests: TokenBucket::new(JOIN_REQUEST_BURST, JOIN_REQUESTS_PER_SECOND),
            state_changes: 0,
            sbr,
            membership_record: None,
            seed_nodes: Vec::new(),
            island_probe_targets: BTreeSet::new(),
            other_clusters: BTreeMap::new(),
        }
    }

    /// Tells the node what its membership record (kept by the runtime in the data
    /// directory) says: an earlier incarnation at this address was a member of a cluster.
    /// With a record the node does not form a new cluster when no other seed node answers
    /// within `seed-node-timeout`; it keeps trying to join
    /// ([`crate::cluster_identity::may_join_self_after_seed_timeout`]). Call before joining.
    pub fn set_membership_record(&mut self, record: Option<MembershipRecord>) {
        self.membership_record = record;
    }

    /// The identity of this node's cluster, once it is in one that has an identity.
    pub fn cluster_identity(&self) -> Option<ClusterIdentity> {
        if self.initialized {
            self.state.latest_gossip.identity
        } else {
            None
        }
    }

    /// The membership record given at start, if any.
    pub fn membership_record(&self) -> Option<&MembershipRecord> {
        self.membership_record.as_ref()
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

    /// The internal membership state (latest gossip + self): what convergence, leader and
    /// gossip-target decisions are computed from.
    pub fn membership_state(&self) -> &MembershipState {
        &self.state
    }

    /// The latest gossip.
    pub fn latest_gossip(&self) -> &Gossip {
        &self.state.latest_gossip
    }

    /// The immutable view published to the layers above and to subscribers, numbered by
    /// [`ClusterCore::state_changes`].
    pub fn membership_view(&self) -> MembershipView {
        if self.initialized {
            MembershipView::of(&self.state, self.state_changes)
        } else {
            let mut v = MembershipView::empty(self.state.self_unique_address.clone());
            v.version = self.state_changes;
            v
        }
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

    /// The latest split brain resolver decisions carried out by this node, oldest first
    /// (at most [`SBR_DECISIONS_KEPT`]); the count of all of them is in
    /// [`CoreStats::sbr_decisions`].
    pub fn recent_sbr_decisions(&self) -> impl Iterator<Item = &SbrDecisionRecord> {
        self.sbr_decisions.iter()
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

    /// Set when the node should shut down; the runtime then runs its coordinated shutdown.
    /// From then on the core ignores messages and has no timers.
    pub fn shutdown_reason(&self) -> Option<ShutdownReason> {
        self.shutdown
    }

    /// True while this node is Exiting and its exiting tasks (the coordinated shutdown's
    /// `cluster-exiting` phase: singleton hand-over, shard hand-off) have not completed.
    /// Meanwhile it does not mark the gossip as seen, so the leader does not remove it.
    pub fn exiting_tasks_in_progress(&self) -> bool {
        self.exiting_seen && !self.exiting_done && self.shutdown.is_none()
    }

    // ------------------------------------------------------------------ outputs

    /// Next message to send.
    #[must_use]
    pub fn poll_transmit(&mut self) -> Option<Transmit<ClusterMessage>> {
        self.outputs.transmits.pop_front()
    }

    /// Next domain event.
    #[must_use]
    pub fn poll_event(&mut self) -> Option<ClusterEvent> {
        self.outputs.events.pop_front()
    }

    /// Next incarnation to quarantine: a member removed `quarantine-removed-node-after` ago
    /// (Akka's rule). The runtime refuses its connections and messages from then on (and a
    /// simulator refuses its messages); the refused node learns it is quarantined and
    /// shuts down ([`ClusterCore::handle_quarantined_by_peer`]).
    #[must_use]
    pub fn poll_quarantine(&mut self) -> Option<UniqueAddress> {
        self.quarantines.pop_front()
    }

    /// Next lease operation the Split Brain Resolver asks for (lease-majority). The delay
    /// the strategy wants (the minority waits `acquire-lease-delay-for-minority`) has
    /// already passed in the core's timers; answer an `Acquire` with
    /// [`ClusterCore::handle_lease_result`].
    #[must_use]
    pub fn poll_lease_request(&mut self) -> Option<LeaseRequest> {
        self.lease_requests.pop_front()
    }

    /// Next request to start this node's coordinated shutdown, with its reason. The core
    /// decides when (the same decision in every host: the tokio runtime and the simulator):
    /// when this node becomes Exiting ([`ShutdownReason::Removed`]: the `cluster-exiting`
    /// phase hands its work over, then [`ClusterCore::exiting_completed`]), when it is marked
    /// Down and `run-coordinated-shutdown-when-down` is on ([`ShutdownReason::Downed`],
    /// Akka's `ClusterDowningReason`), and when the core shuts down for any reason
    /// ([`ClusterCore::shutdown_reason`]). A host starts its shutdown on the first request;
    /// later ones only confirm it (the first reason is the one reported).
    #[must_use]
    pub fn poll_coordinated_shutdown(&mut self) -> Option<ShutdownReason> {
        self.coordinated_shutdown.pop_front()
    }

    /// The next time [`ClusterCore::handle_timeout`] must be called, ms; `None` once the
    /// node has shut down.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.shutdown.is_some() {
            return None;
        }
        self.outputs.timers.next_deadline()
    }

    /// The armed timers and their deadlines (for tests and diagnostics).
    pub fn timers(&self) -> &TimerTable<ClusterTimer> {
        &self.outputs.timers
    }

    // ------------------------------------------------------------------ sending

    fn send(&mut self, to: &UniqueAddress, message: ClusterMessage) {
        self.outputs.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Control,
            message,
        });
    }

    fn send_to_address(&mut self, to: &Address, message: ClusterMessage) {
        self.outputs.transmits.push_back(Transmit {
            to: to.clone(),
            to_uid: None,
            lane: Lane::Control,
            message,
        });
    }

    // ------------------------------------------------------------------ messages

    /// True if a request from `from` may be answered: always for a member of this node's
    /// view; for anyone else within the rate limit of [`JOIN_REQUESTS_PER_SECOND`] (each
    /// answer may open a connection to the address the request claims).
    fn admit_non_member_request(&mut self, now_ms: u64, from: &UniqueAddress) -> bool {
        if self.state.latest_gossip.has_member(from) || self.non_member_requests.try_take(now_ms) {
            return true;
        }
        self.stats.join_requests_throttled += 1;
        false
    }

    /// The admission check: every path that adds to this node's gossip members it did not
    /// hold goes through it — a Join ([`ClusterCore::receive_join`]), gossip from a
    /// non-member taken as its Join (which admits its sender and nobody else), and the merge
    /// of gossip from a member. `newcomers` is how many members the message would add.
    ///
    /// Gossip from a member that this node's view shows Up or beyond (a member the cluster
    /// has converged on, Akka's only source of gossip) is taken whatever it adds: that is
    /// how the joiners other nodes admitted (each through its own check) reach every node,
    /// and throttling it would stop convergence. Any other source — a non-member, or a
    /// member still Joining or WeaklyUp, which has admitted nobody the leader knows of — gets
    /// its `newcomers` only within the rate limit shared with InitJoin and heartbeats of
    /// non-members ([`JOIN_REQUEST_BURST`] at once, [`JOIN_REQUESTS_PER_SECOND`] after), all
    /// or none. Refusals are counted in [`CoreStats::join_requests_throttled`]; a legitimate
    /// joiner retries, and the few members a joiner's gossip legitimately carries reach this
    /// node from the member that admitted them anyway.
    pub(super) fn admission_check(
        &mut self,
        now_ms: u64,
        source: &UniqueAddress,
        newcomers: u64,
    ) -> bool {
        let trusted = self
            .state
            .latest_gossip
            .member(source)
            .is_some_and(|m| m.status.precedence() >= MemberStatus::Up.precedence());
        if newcomers == 0 || trusted || self.non_member_requests.try_take_n(now_ms, newcomers) {
            return true;
        }
        self.stats.join_requests_throttled += 1;
        false
    }

    /// Handles a message from `from` (authenticated by the transport handshake).
    pub fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, msg: ClusterMessage) {
        if self.shutdown.is_some() {
            return;
        }
        match msg {
            ClusterMessage::InitJoin { cluster } => {
                if self.admit_non_member_request(now_ms, from) {
                    self.receive_init_join(now_ms, from, cluster);
                }
            }
            ClusterMessage::InitJoinAck { cluster } => {
                self.receive_init_join_ack(now_ms, from, cluster)
            }
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
            } => {
                // A member that joined after this node's latest gossip may heartbeat it
                // first: non-members are answered too, within the rate limit.
                if self.admit_non_member_request(now_ms, from) {
                    self.send(
                        from,
                        ClusterMessage::HeartbeatRsp {
                            sequence_nr,
                            creation_time_ms,
                        },
                    );
                }
            }
            ClusterMessage::HeartbeatRsp { .. } => self.receive_heartbeat_rsp(now_ms, from),
        }
    }
}

impl ProtocolMachine for ClusterCore {
    type Message = ClusterMessage;
    type Event = ClusterEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::MEMBERSHIP
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: ClusterMessage) {
        ClusterCore::handle_message(self, now_ms, from, message)
    }

    /// The membership machine is the source of the view: nothing to learn from it.
    fn handle_membership(&mut self, _now_ms: u64, _view: &MembershipView, _: MembershipChange) {}

    fn handle_timeout(&mut self, now_ms: u64) {
        ClusterCore::handle_timeout(self, now_ms)
    }

    fn poll_transmit(&mut self) -> Option<Transmit<ClusterMessage>> {
        ClusterCore::poll_transmit(self)
    }

    fn poll_event(&mut self) -> Option<ClusterEvent> {
        ClusterCore::poll_event(self)
    }

    fn poll_timeout(&self) -> Option<u64> {
        ClusterCore::poll_timeout(self)
    }
}

#[cfg(test)]
mod tests;
