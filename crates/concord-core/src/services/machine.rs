//! [`ServicesMachine`]: partitioned services on one node (sans-IO) — the leader's placement
//! written into a versioned [`ServicesState`] and gossiped, the graceful handoff of the
//! spec, and routing of service messages with per-sender order kept across moves.
//!
//! Spec: cluster-specification-original.md, "Leader Actions", "Partitioning", "Handoff".
//!
//! **State.** Only the leader writes ([`leader_step`]); it pushes each new state to every
//! member, and every gossip interval each node sends its digest to one random member, which
//! answers with its state if newer (or with its own digest if older, to be pushed to).
//! Every node reports its registered paths, its instances' mailbox depths and whether it is
//! draining to the leader each interval. The leader acts only while no member is
//! unreachable (Akka's leader actions need convergence for the same reason).
//!
//! **Handoff** of a change `path: N1 → N2` (steps 1–6): the leader writes the change (1);
//! N1 sends `Prepare` to N2 (2); N2 keeps everything for the path and answers `Ready` (3);
//! N1 stops its instance, which handles what it holds first, keeping what arrives
//! meanwhile; once it has stopped N1 sends `HandOver` and then, on the same lane, what it
//! kept; N2 starts its instance on `HandOver`, so **two instances never run at once**. N1
//! reports `Complete` to the leader (4), which updates the table (5); everyone converges
//! (6). Until then N1 forwards late messages to N2. A change without a previous host
//! (a new instance, or one whose host crashed) starts on N2 at once, and N2 reports it.
//!
//! **Per-sender order.** For a path with one instance, a sending node remembers where its
//! last message went. When the table sends it elsewhere (N1 → N2) it first sends `Flush`
//! to N1, then marks its first message to N2 `hold_for: N1`. N2 holds that sender's
//! messages; N1, after passing on everything the sender sent it, tells N2 `Drained`, and N2
//! releases them in order. Lanes are FIFO per pair of nodes, so a sender's messages reach
//! the instance in the order sent. If N1 crashes the held messages go after
//! `handoff-timeout` (counted).
//!
//! The state's gossip and the leader's side are in `state_gossip.rs`, the handoff steps
//! and message delivery on a host in `handoff.rs`, the removal margin in
//! `removal_margin.rs`.
//!
//! **Bounds.** Buffers (handoff, held, not yet placed) share `buffer-size` messages per
//! node; registrations and received states are bounded by `max-services`; forwarded
//! messages by [`MAX_FORWARD_HOPS`]. Messages from non-members are dropped and counted.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::hosting::{
    Hosting, RegisterError, SendOutcome, ServicesDrop, ServicesEvent, ServicesSettings,
    ServicesStats,
};
use super::leader_actions::NodeOffer;
use super::message::MAX_FORWARD_HOPS;
use super::scaling::ScalingTracker;
use super::{
    InstancePolicy, PartitionChange, PartitionPath, Router, RoutingLogic, ServicesMessage,
    ServicesState,
};
use crate::address::UniqueAddress;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    Tick,
}

/// A message waiting for its path to be placed.
#[derive(Clone, Debug)]
pub(super) struct Unrouted {
    pub(super) since_ms: u64,
    pub(super) path: PartitionPath,
    pub(super) logic: RoutingLogic,
    pub(super) key: Option<Vec<u8>>,
    pub(super) payload: Vec<u8>,
}

/// Messages of one sender held until its previous host's `Drained`.
#[derive(Clone, Debug)]
pub(super) struct Held {
    pub(super) since_ms: u64,
    pub(super) queue: VecDeque<Vec<u8>>,
}

/// An instance's id for consistent hashing: `"<address>#<uid>"`, the same on every node.
fn hash_id(node: &UniqueAddress) -> Vec<u8> {
    format!("{}#{}", node.address, node.uid).into_bytes()
}

/// The partitioned-services machine of one node; see the module docs.
#[derive(Debug)]
pub struct ServicesMachine {
    pub(super) me: UniqueAddress,
    pub(super) settings: ServicesSettings,
    pub(super) rng: SmallRng,
    pub(super) view: Option<MembershipView>,
    pub(super) members: BTreeSet<UniqueAddress>,
    pub(super) state: ServicesState,
    pub(super) policies: BTreeMap<PartitionPath, InstancePolicy>,
    pub(super) draining: bool,
    pub(super) local_depths: BTreeMap<PartitionPath, u32>,
    // Leader side.
    pub(super) offers: BTreeMap<UniqueAddress, NodeOffer>,
    pub(super) depths: BTreeMap<UniqueAddress, BTreeMap<PartitionPath, u32>>,
    pub(super) completed: BTreeSet<PartitionChange>,
    pub(super) scaling: ScalingTracker,
    pub(super) node_load: BTreeMap<UniqueAddress, f64>,
    /// When this node last became leader, ms.
    pub(super) leader_since_ms: u64,
    // Local hosting and order.
    pub(super) hosting: BTreeMap<PartitionPath, Hosting>,
    pub(super) reports: BTreeSet<PartitionChange>,
    pub(super) held: BTreeMap<(PartitionPath, UniqueAddress), Held>,
    pub(super) early_drained: BTreeMap<(PartitionPath, UniqueAddress), u64>,
    pub(super) last_host: BTreeMap<PartitionPath, UniqueAddress>,
    pub(super) unrouted: VecDeque<Unrouted>,
    pub(super) routers: BTreeMap<(PartitionPath, RoutingLogic), Router>,
    /// Each member's consistent-hashing id ([`hash_id`]), made on membership changes
    /// rather than for every message.
    pub(super) hash_ids: BTreeMap<UniqueAddress, Vec<u8>>,
    /// Node → when this node first saw it Down or removed (kept for the removal margin).
    pub(super) written_off: BTreeMap<UniqueAddress, u64>,
    pub(super) stats: ServicesStats,
    pub(super) out: Outputs<ServicesMessage, ServicesEvent, Timer>,
}

impl ServicesMachine {
    /// The machine of node `me`; `seed` seeds its random choices (gossip peers, routers).
    pub fn new(me: UniqueAddress, settings: ServicesSettings, seed: u64) -> Self {
        let scaling = ScalingTracker::new(settings.scale_up_depth, settings.scale_sustained_rounds);
        let mut out = Outputs::new();
        out.timers.set(Timer::Tick, settings.gossip_interval_ms);
        ServicesMachine {
            members: [me.clone()].into(),
            me,
            settings,
            rng: SmallRng::seed_from_u64(seed),
            view: None,
            state: ServicesState::default(),
            policies: BTreeMap::new(),
            draining: false,
            local_depths: BTreeMap::new(),
            offers: BTreeMap::new(),
            depths: BTreeMap::new(),
            completed: BTreeSet::new(),
            scaling,
            node_load: BTreeMap::new(),
            leader_since_ms: 0,
            hosting: BTreeMap::new(),
            reports: BTreeSet::new(),
            held: BTreeMap::new(),
            early_drained: BTreeMap::new(),
            last_host: BTreeMap::new(),
            unrouted: VecDeque::new(),
            routers: BTreeMap::new(),
            hash_ids: BTreeMap::new(),
            written_off: BTreeMap::new(),
            stats: ServicesStats::default(),
            out,
        }
    }

    /// Registers the service `path` with `policy` on this node (it offers to host it; the
    /// leader places the paths it has registered itself).
    ///
    /// # Errors
    /// [`RegisterError`]: `max-services` reached, or `path` registered already.
    pub fn register(
        &mut self,
        now_ms: u64,
        path: PartitionPath,
        policy: InstancePolicy,
    ) -> Result<(), RegisterError> {
        if self.policies.contains_key(&path) {
            return Err(RegisterError::Duplicate(path));
        }
        if self.policies.len() >= self.settings.max_services {
            return Err(RegisterError::TooMany(self.policies.len()));
        }
        self.policies.insert(path, policy);
        self.report(now_ms);
        self.reconcile(now_ms);
        Ok(())
    }

    /// Starts draining (coordinated shutdown): the leader places nothing more here and hands
    /// this node's instances off. See [`ServicesMachine::hosts_nothing`].
    pub fn drain(&mut self, now_ms: u64) {
        if !self.draining {
            self.draining = true;
            self.report(now_ms);
        }
    }

    /// Whether this node hosts no instance and is in no handoff (a draining node may stop).
    pub fn hosts_nothing(&self) -> bool {
        self.hosting
            .values()
            .all(|h| matches!(h, Hosting::Moved { .. }))
            && self.state.table.instances_on(&self.me).is_empty()
            && !self
                .state
                .pending
                .iter()
                .any(|c| c.from.as_ref() == Some(&self.me) || c.to == self.me)
    }

    /// Mailbox depth of each local instance (messages waiting), reported to the leader for
    /// scaling.
    pub fn set_local_depths(&mut self, depths: BTreeMap<PartitionPath, u32>) {
        self.local_depths = depths;
    }

    /// A load figure per node (cluster metrics' capacity use, 0–1), read by load-aware
    /// placement on the leader.
    pub fn set_node_load(&mut self, load: BTreeMap<UniqueAddress, f64>) {
        self.node_load = load;
    }

    /// This node.
    pub fn node(&self) -> &UniqueAddress {
        &self.me
    }

    /// The current state (table and pending changes).
    pub fn state(&self) -> &ServicesState {
        &self.state
    }

    /// The registered paths.
    pub fn registered(&self) -> impl Iterator<Item = &PartitionPath> {
        self.policies.keys()
    }

    /// What this node does with each path it hosts or hands off: `running`, `preparing`,
    /// `stopping`, `moved`, `arriving`.
    pub fn local_hosting(&self) -> BTreeMap<PartitionPath, &'static str> {
        self.hosting
            .iter()
            .map(|(p, h)| (p.clone(), h.as_str()))
            .collect()
    }

    /// Whether the local instance of `path` runs (may receive messages).
    pub fn is_running(&self, path: &PartitionPath) -> bool {
        matches!(
            self.hosting.get(path),
            Some(Hosting::Running | Hosting::Preparing { .. })
        )
    }

    /// The counters.
    pub fn stats(&self) -> &ServicesStats {
        &self.stats
    }

    /// Messages buffered (handoffs, held for order, not yet placed).
    pub fn buffered(&self) -> usize {
        self.hosting.values().map(Hosting::buffered).sum::<usize>()
            + self.held.values().map(|h| h.queue.len()).sum::<usize>()
            + self.unrouted.len()
    }

    pub(super) fn drop_one(&mut self, reason: ServicesDrop) {
        *self.stats.dropped.entry(reason).or_insert(0) += 1;
    }

    pub(super) fn transmit(&mut self, to: &UniqueAddress, message: ServicesMessage) {
        let lane = match message {
            ServicesMessage::Deliver { .. }
            | ServicesMessage::Forward { .. }
            | ServicesMessage::HandOver { .. }
            | ServicesMessage::Flush { .. }
            | ServicesMessage::Drained { .. }
            | ServicesMessage::Reply { .. } => Lane::Ordinary,
            _ => Lane::Control,
        };
        self.out.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane,
            message,
        });
    }

    pub(super) fn leader(&self) -> Option<UniqueAddress> {
        self.view.as_ref().and_then(|v| v.leader.clone())
    }

    /// Sends `payload` to the service `path`, routed by `logic` (`key`: the consistent
    /// hashing key; `capacity`: each node's capacity 0–1 for adaptive routing) over the
    /// path's instances in the table. Before the path is placed the message waits (at most
    /// `handoff-timeout`, within `buffer-size`).
    pub fn send(
        &mut self,
        now_ms: u64,
        path: &PartitionPath,
        logic: RoutingLogic,
        key: Option<&[u8]>,
        payload: Vec<u8>,
        capacity: &BTreeMap<UniqueAddress, f64>,
    ) -> SendOutcome {
        if payload.len() > self.settings.max_message_bytes {
            // A larger frame would travel on the large-message lane and could overtake
            // the messages before it: refused, so that order holds.
            self.drop_one(ServicesDrop::TooLarge);
            return SendOutcome::Dropped(ServicesDrop::TooLarge);
        }
        let instances: Vec<UniqueAddress> = self
            .state
            .table
            .instances(path)
            .unwrap_or(&[])
            .iter()
            .filter(|n| self.members.contains(n))
            .cloned()
            .collect();
        if instances.is_empty() {
            if self.buffered() >= self.settings.buffer_size {
                self.drop_one(ServicesDrop::BufferFull);
                return SendOutcome::Dropped(ServicesDrop::BufferFull);
            }
            self.unrouted.push_back(super::machine::Unrouted {
                since_ms: now_ms,
                path: path.clone(),
                logic,
                key: key.map(<[u8]>::to_vec),
                payload,
            });
            return SendOutcome::Buffered;
        }
        let seed = self.rng.random();
        let router = self
            .routers
            .entry((path.clone(), logic))
            .or_insert_with(|| Router::new(logic, seed));
        let hash_ids = &self.hash_ids;
        let targets = router.route(
            &instances,
            |n| n,
            |n| match hash_ids.get(n) {
                Some(id) => Cow::Borrowed(id.as_slice()),
                None => Cow::Owned(hash_id(n)),
            },
            key,
            capacity,
        );
        let single = instances.len() == 1 && logic != RoutingLogic::Broadcast;
        if !single {
            self.last_host.remove(path);
        }
        let count = targets.len();
        for i in targets {
            let to = instances[i].clone();
            let mut hold_for = None;
            if single {
                if let Some(prev) = self.last_host.insert(path.clone(), to.clone()) {
                    if prev != to && self.members.contains(&prev) {
                        self.flush_to(now_ms, &prev, path, &to);
                        hold_for = Some(prev);
                    }
                }
            }
            self.send_one(now_ms, &to, path, payload.clone(), hold_for);
        }
        SendOutcome::Sent(count)
    }

    fn flush_to(
        &mut self,
        now_ms: u64,
        prev: &UniqueAddress,
        path: &PartitionPath,
        next: &UniqueAddress,
    ) {
        if prev == &self.me {
            let me = self.me.clone();
            self.on_flush(now_ms, &me, path.clone(), next.clone());
        } else {
            self.transmit(
                prev,
                ServicesMessage::Flush {
                    path: path.clone(),
                    next: next.clone(),
                },
            );
        }
    }

    fn send_one(
        &mut self,
        now_ms: u64,
        to: &UniqueAddress,
        path: &PartitionPath,
        payload: Vec<u8>,
        hold_for: Option<UniqueAddress>,
    ) {
        if to == &self.me {
            let me = self.me.clone();
            self.on_deliver(now_ms, &me, path.clone(), payload, hold_for);
        } else {
            self.stats.sent += 1;
            self.transmit(
                to,
                ServicesMessage::Deliver {
                    path: path.clone(),
                    payload,
                    hold_for,
                },
            );
        }
    }

    /// Sends the messages that waited for their path, in order, once it is placed; drops
    /// those that waited longer than `handoff-timeout`.
    pub(super) fn send_unrouted(&mut self, now_ms: u64) {
        let waiting = std::mem::take(&mut self.unrouted);
        let empty = BTreeMap::new();
        for u in waiting {
            let placed = self
                .state
                .table
                .instances(&u.path)
                .is_some_and(|n| n.iter().any(|n| self.members.contains(n)));
            if placed {
                self.send(
                    now_ms,
                    &u.path,
                    u.logic,
                    u.key.as_deref(),
                    u.payload,
                    &empty,
                );
            } else if now_ms.saturating_sub(u.since_ms) >= self.settings.handoff_timeout_ms {
                self.drop_one(ServicesDrop::NoInstance);
            } else {
                self.unrouted.push_back(u);
            }
        }
    }

    /// Sends the answer to ask `id` back to the asking node `to` (or hands it over here).
    pub fn reply(&mut self, to: &UniqueAddress, id: u64, result: Result<Vec<u8>, String>) {
        if to == &self.me {
            self.out
                .events
                .push_back(ServicesEvent::Reply { id, result });
        } else {
            let (payload, error) = match result {
                Ok(p) => (p, None),
                Err(e) => (Vec::new(), Some(e)),
            };
            self.transmit(to, ServicesMessage::Reply { id, payload, error });
        }
    }
}

impl ProtocolMachine for ServicesMachine {
    type Message = ServicesMessage;
    type Event = ServicesEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::SERVICES
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: ServicesMessage) {
        if !self.members.contains(from) {
            self.drop_one(ServicesDrop::FromStranger);
            return;
        }
        match message {
            ServicesMessage::Status { version, writer } => {
                let theirs = (version, writer);
                let ours = self.state.digest();
                if ours > theirs {
                    self.transmit(from, ServicesMessage::State(self.state.clone()));
                } else if theirs > ours {
                    let (version, writer) = ours;
                    self.transmit(from, ServicesMessage::Status { version, writer });
                }
            }
            ServicesMessage::State(state) => self.accept_state(now_ms, state),
            ServicesMessage::Report {
                offers,
                depths,
                draining,
                version,
                writer,
            } => self.on_report(now_ms, from, offers, depths, draining, (version, writer)),
            ServicesMessage::Complete { change } => {
                if self.leader().as_ref() == Some(&self.me)
                    && self.state.pending.iter().any(|p| {
                        p.path == change.path && p.from == change.from && p.to == change.to
                    })
                {
                    self.completed.insert(change);
                    self.leader_act(now_ms);
                }
            }
            ServicesMessage::Prepare { path, version } => {
                self.on_prepare(now_ms, from, path, version)
            }
            ServicesMessage::Ready { path } => self.on_ready(now_ms, from, path),
            ServicesMessage::HandOver { path } => self.on_hand_over(now_ms, from, path),
            ServicesMessage::Deliver {
                path,
                payload,
                hold_for,
            } => self.on_deliver(now_ms, from, path, payload, hold_for),
            ServicesMessage::Forward {
                path,
                sender,
                payload,
                hops,
            } => {
                if hops >= MAX_FORWARD_HOPS {
                    self.drop_one(ServicesDrop::TooManyHops);
                } else {
                    self.accept_local(now_ms, path, sender, payload, hops.saturating_add(1));
                }
            }
            ServicesMessage::Flush { path, next } => self.on_flush(now_ms, from, path, next),
            ServicesMessage::Drained { path, sender } => self.on_drained(now_ms, path, sender),
            ServicesMessage::Reply { id, payload, error } => {
                let result = match error {
                    Some(e) => Err(e),
                    None => Ok(payload),
                };
                self.out
                    .events
                    .push_back(ServicesEvent::Reply { id, result });
            }
        }
    }

    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, _: MembershipChange) {
        self.members = view.members.keys().cloned().collect();
        self.members.insert(self.me.clone());
        self.hash_ids = self
            .members
            .iter()
            .map(|m| (m.clone(), hash_id(m)))
            .collect();
        let was_leader = self.leader().as_ref() == Some(&self.me);
        let old = self.view.replace(view.clone());
        self.note_written_off(now_ms, old.as_ref());
        if !was_leader && view.leader.as_ref() == Some(&self.me) {
            // A new leader learns every member's state afresh before it writes.
            self.offers.clear();
            self.depths.clear();
            self.leader_since_ms = now_ms;
        }
        let members = &self.members;
        self.offers.retain(|n, _| members.contains(n));
        self.depths.retain(|n, _| members.contains(n));
        self.last_host.retain(|_, n| members.contains(n));
        self.leader_act(now_ms);
        self.reconcile(now_ms);
        self.send_unrouted(now_ms);
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        for timer in self.out.timers.expired(now_ms) {
            match timer {
                Timer::Tick => self.tick(now_ms),
            }
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit<ServicesMessage>> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<ServicesEvent> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.out.poll_timeout()
    }
}
