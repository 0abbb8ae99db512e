//! [`ClusterMetricsCollector`]: the sans-IO machine of the cluster-metrics protocol (Akka's
//! `ClusterMetricsCollector`, `akka-cluster-metrics/.../ClusterMetricsCollector.scala`, with
//! a change-driven gossip instead of Akka's full exchange).
//!
//! **Sampling.** Every `sample-interval` it asks its host for a sample
//! ([`ClusterMetricsEvent::SampleWanted`]; reading the machine is I/O, so the host does it
//! and hands the values back with [`ClusterMetricsCollector::record_sample`]), smooths each
//! value with an [`super::Ewma`] and quantises the averages ([`super::quantise`]). A new
//! *version* of the node's entry (a [`MetricsEntry`]: uid, version, codes; ~25 bytes) is
//! published only when a code moved past its dead band, or every `refresh-interval` (30 s).
//!
//! **Rounds.** Every `gossip-interval` (3 s) the node sends **one** random reachable member a
//! digest of the versions it holds — compact ([`Digest::Compact`]: a hash of the nodes and
//! one varint per entry, ~37 bytes at 25 nodes) — and the member answers, at most once per
//! half gossip interval, with the entries it holds newer and the positions of those it holds
//! older (`want`), which the node then sends: push-pull anti-entropy with digests (Demers et
//! al., "Epidemic algorithms for replicated database maintenance", PODC 1987; the digest
//! exchange of Scuttlebutt, van Renesse et al., LADIS 2008). Only versions that changed
//! travel, each to each node about once; none is ever lost for good (every round compares
//! everything), and a new version reaches every node in O(log n) rounds. A member whose
//! entries are of other nodes (one joined or left) cannot read a compact digest: it answers
//! with its full digest ([`Digest::Full`], uids and versions), and the exchange goes on from
//! there.
//!
//! Only members' entries are kept; entries of members that leave are dropped, entries whose
//! uid is no member's or shared by two members, that claim a newer version of this node than
//! it published, or that are malformed are refused, as is everything from non-members. The
//! first version's message ([`MetricsGossipEnvelope`]) is still understood and answered in
//! kind, for a rolling upgrade.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::SeedableRng;

use super::entry::{EntryVersion, MetricsEntry, MetricsState};
use super::ewma::alpha;
use super::messages::{ClusterMetricsMessage, Digest, MetricsGossipEnvelope, MetricsGossipMessage};
use super::metrics_gossip::MetricsGossip;
use super::node_metrics::{names, Metric, NodeMetrics, MAX_METRICS_PER_NODE};
use super::own::OwnMetrics;
use super::quantise::scale;
use super::settings::{ClusterMetricsEvent, ClusterMetricsSettings, CollectorStats};
use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Sample,
    Gossip,
}

/// A digest this node sent: when, and the uids of its positions (what a `want` names).
#[derive(Debug)]
struct DigestSent {
    at_ms: u64,
    uids: Vec<u64>,
}

/// The cluster-metrics machine of one node; see the module docs.
#[derive(Debug)]
pub struct ClusterMetricsCollector {
    settings: ClusterMetricsSettings,
    me: UniqueAddress,
    own: OwnMetrics,
    state: MetricsState,
    /// When this node learnt each entry's version, ms.
    learnt_at: BTreeMap<u64, u64>,
    view: MetricsGossip,
    /// Members (any status) in the latest view, this node included: whose entries are kept.
    members: BTreeSet<UniqueAddress>,
    /// Member uid → member; `None` when two members share the uid (their entries are
    /// refused: the uid cannot tell them apart).
    by_uid: BTreeMap<u64, Option<UniqueAddress>>,
    /// Members to gossip with: not this node, not Down, reachable.
    peers: Vec<UniqueAddress>,
    /// The digests this node sent lately, by receiver (one each, at most two gossip
    /// intervals old): their answers' `want`s name positions in them.
    digests_sent: BTreeMap<UniqueAddress, DigestSent>,
    started: bool,
    /// When this node last answered each member's round, ms: at most one answer per
    /// member per half gossip interval, whatever a member asks.
    answered: BTreeMap<UniqueAddress, u64>,
    rng: SmallRng,
    stats: CollectorStats,
    out: Outputs<ClusterMetricsMessage, ClusterMetricsEvent, Timer>,
}

impl ClusterMetricsCollector {
    /// A collector for node `me`; `seed` seeds its choice of gossip peers.
    pub fn new(settings: ClusterMetricsSettings, me: UniqueAddress, seed: u64) -> Self {
        let a = alpha(
            settings.moving_average_half_life_ms,
            settings.sample_interval_ms,
        );
        ClusterMetricsCollector {
            own: OwnMetrics::new(me.uid, a, settings.refresh_interval_ms),
            settings,
            members: [me.clone()].into(),
            by_uid: [(me.uid, Some(me.clone()))].into(),
            me,
            state: MetricsState::new(),
            learnt_at: BTreeMap::new(),
            view: MetricsGossip::new(),
            peers: Vec::new(),
            digests_sent: BTreeMap::new(),
            started: false,
            answered: BTreeMap::new(),
            rng: SmallRng::seed_from_u64(seed),
            stats: CollectorStats::default(),
            out: Outputs::new(),
        }
    }

    /// Every node's latest metrics as this node knows them (this node's included once it
    /// sampled), decoded for readers.
    pub fn gossip(&self) -> &MetricsGossip {
        &self.view
    }

    /// The entries as gossiped (uid → latest version).
    pub fn state(&self) -> &MetricsState {
        &self.state
    }

    /// The collector's counters.
    pub fn stats(&self) -> CollectorStats {
        self.stats
    }

    /// The settings.
    pub fn settings(&self) -> &ClusterMetricsSettings {
        &self.settings
    }

    /// Records a sample of this node taken at `now_ms`: metric name → value (units as in
    /// [`names`]). Each value updates its moving average (a metric seen for the first time
    /// starts at its value; a metric missing from this sample is dropped from the entry),
    /// and a new version is published if one is due (see [`super::quantise`]). Values that
    /// are NaN, infinite or negative, names this version does not know, and names beyond
    /// [`MAX_METRICS_PER_NODE`] are dropped and counted in
    /// [`CollectorStats::sample_values_dropped`].
    pub fn record_sample(&mut self, now_ms: u64, values: BTreeMap<String, f64>) {
        let mut known = BTreeMap::new();
        for (name, value) in values {
            match names::id(&name) {
                Some(id)
                    if value.is_finite() && value >= 0.0 && known.len() < MAX_METRICS_PER_NODE =>
                {
                    known.insert(id, value);
                }
                _ => self.stats.sample_values_dropped += 1,
            }
        }
        self.stats.samples += 1;
        if let Some(entry) = self.own.record(now_ms, known) {
            self.stats.published += 1;
            self.state.merge_entry(entry);
        }
        self.view_update(self.me.uid);
        self.out.events.push_back(ClusterMetricsEvent::Changed);
    }

    /// The member with uid `uid`, if exactly one has it.
    fn member_of(&self, uid: u64) -> Option<&UniqueAddress> {
        self.by_uid.get(&uid).and_then(Option::as_ref)
    }

    /// Whether an entry read from the network may be kept: valid, of a member, and not a
    /// version of this node's entry that it did not publish.
    fn acceptable(&self, entry: &MetricsEntry) -> bool {
        if entry.validate().is_err() || self.member_of(entry.uid).is_none() {
            return false;
        }
        entry.uid != self.me.uid || self.own.published().is_some_and(|p| *p >= *entry)
    }

    /// Merges an acceptable entry; true if it was newer.
    fn merge(&mut self, now_ms: u64, entry: MetricsEntry) -> bool {
        let uid = entry.uid;
        if !self.state.merge_entry(entry) {
            return false;
        }
        self.stats.entries_merged += 1;
        self.learnt_at.insert(uid, now_ms);
        self.view_update(uid);
        true
    }

    /// The readers' form of the entry of `node`.
    fn node_metrics(&self, node: &UniqueAddress) -> Option<NodeMetrics> {
        let e = self.state.get(node.uid)?;
        let own = *node == self.me;
        let metrics = e
            .codes
            .iter()
            .filter_map(|(id, code)| {
                let name = names::name(*id)?;
                let smoothed = scale(*id)?.value(*code);
                let value = if own {
                    self.own.latest(*id).unwrap_or(smoothed)
                } else {
                    smoothed
                };
                Some((name.to_string(), Metric { value, smoothed }))
            })
            .collect();
        let sampled_at_ms = if own {
            self.own.sampled_at_ms()
        } else {
            self.learnt_at.get(&node.uid).copied().unwrap_or(0)
        };
        Some(NodeMetrics {
            node: node.clone(),
            sequence: e.sequence,
            sampled_at_ms,
            metrics,
        })
    }

    fn view_update(&mut self, uid: u64) {
        let Some(node) = self.member_of(uid).cloned() else {
            return;
        };
        match self.node_metrics(&node) {
            Some(m) => self.view.insert(m),
            None => self.view.remove(&node),
        }
    }

    fn send(&mut self, to: &UniqueAddress, message: ClusterMetricsMessage) {
        self.stats.gossip_sent += 1;
        self.stats.entries_sent += match &message {
            ClusterMetricsMessage::Gossip(m) => m.entries.len(),
            ClusterMetricsMessage::Legacy(m) => m.entries.len(),
        } as u64;
        self.out.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message,
        });
    }

    fn send_gossip(&mut self, to: &UniqueAddress, message: MetricsGossipMessage) {
        self.send(to, ClusterMetricsMessage::Gossip(message));
    }

    fn entries_of(&self, uids: impl IntoIterator<Item = u64>) -> Vec<MetricsEntry> {
        uids.into_iter()
            .filter_map(|u| self.state.get(u).cloned())
            .collect()
    }

    /// Notes a digest of every entry held, sent to `to` now, and returns the uids of its
    /// positions.
    fn note_digest(&mut self, now_ms: u64, to: &UniqueAddress) -> Vec<u64> {
        let uids: Vec<u64> = self.state.entries().map(|e| e.uid).collect();
        let sent = DigestSent {
            at_ms: now_ms,
            uids: uids.clone(),
        };
        self.digests_sent.insert(to.clone(), sent);
        uids
    }

    /// Starts a round with one random peer: a compact digest of every entry held.
    fn start_round(&mut self, now_ms: u64) {
        let horizon = now_ms.saturating_sub(2 * self.settings.gossip_interval_ms);
        self.digests_sent.retain(|_, d| d.at_ms >= horizon);
        let Some(peer) = self.peers.choose(&mut self.rng).cloned() else {
            return;
        };
        self.note_digest(now_ms, &peer);
        let digest = Digest::Compact {
            nodes: self.state.nodes_hash(),
            sequences: self.state.entries().map(|e| e.sequence).collect(),
        };
        let round = MetricsGossipMessage {
            digest: Some(digest),
            reply: true,
            ..Default::default()
        };
        self.send_gossip(&peer, round);
    }

    /// True (and noted) if `from`'s round may be answered now.
    fn may_answer(&mut self, now_ms: u64, from: &UniqueAddress) -> bool {
        let spacing = self.settings.gossip_interval_ms / 2;
        let due = self
            .answered
            .get(from)
            .is_none_or(|at| now_ms.saturating_sub(*at) >= spacing);
        if due {
            self.answered.insert(from.clone(), now_ms);
        }
        due
    }

    fn handle_gossip(&mut self, now_ms: u64, from: &UniqueAddress, m: MetricsGossipMessage) {
        let mut changed = false;
        for entry in m.entries {
            if !self.acceptable(&entry) {
                self.stats.entries_refused += 1;
            } else {
                changed |= self.merge(now_ms, entry);
            }
        }
        if changed {
            self.out.events.push_back(ClusterMetricsEvent::Changed);
        }
        if !m.want.is_empty() {
            self.send_wanted(from, &m.want);
        }
        let Some(digest) = m.digest.filter(|_| m.reply) else {
            return;
        };
        // A round, or a full digest sent back for this node's own round (solicited, once).
        let solicited = self.digests_sent.remove(from).is_some();
        if solicited || self.may_answer(now_ms, from) {
            self.answer(now_ms, from, digest);
        }
    }

    /// Sends `to` the entries at positions `want` of the digest this node last sent it
    /// (once: the digest is forgotten).
    fn send_wanted(&mut self, to: &UniqueAddress, want: &[u32]) {
        let Some(sent) = self.digests_sent.remove(to) else {
            return;
        };
        let uids: BTreeSet<u64> = want
            .iter()
            .filter_map(|i| sent.uids.get(*i as usize).copied())
            .collect();
        let entries = self.entries_of(uids);
        if !entries.is_empty() {
            self.send_gossip(
                to,
                MetricsGossipMessage {
                    entries,
                    ..Default::default()
                },
            );
        }
    }

    /// Answers a digest from `to`: the entries it lacks or holds older, and the positions
    /// of those this node wants; or, for a compact digest of other nodes' entries than this
    /// node holds, this node's full digest (which `to` answers in turn).
    fn answer(&mut self, now_ms: u64, to: &UniqueAddress, digest: Digest) {
        // (uid, version) per position, when this node can read the digest.
        let theirs: Vec<EntryVersion> = match digest {
            Digest::Full(versions) => versions,
            Digest::Compact { nodes, sequences } => {
                if nodes != self.state.nodes_hash() || sequences.len() != self.state.len() {
                    self.note_digest(now_ms, to);
                    let full = MetricsGossipMessage {
                        digest: Some(Digest::Full(self.state.versions())),
                        reply: true,
                        ..Default::default()
                    };
                    self.send_gossip(to, full);
                    return;
                }
                self.state
                    .entries()
                    .zip(sequences)
                    .map(|(e, sequence)| EntryVersion {
                        uid: e.uid,
                        sequence,
                    })
                    .collect()
            }
        };
        let mut held: BTreeMap<u64, u64> = BTreeMap::new();
        let mut want = Vec::new();
        for (i, v) in theirs.iter().enumerate() {
            if self.member_of(v.uid).is_none() {
                continue;
            }
            held.insert(v.uid, v.sequence);
            if v.uid != self.me.uid && self.state.sequence_of(v.uid) < Some(v.sequence) {
                want.push(i as u32);
            }
        }
        let newer: Vec<u64> = self
            .state
            .entries()
            .filter(|e| held.get(&e.uid).is_none_or(|s| *s < e.sequence))
            .map(|e| e.uid)
            .collect();
        let entries = self.entries_of(newer);
        if entries.is_empty() && want.is_empty() {
            return;
        }
        self.send_gossip(
            to,
            MetricsGossipMessage {
                entries,
                digest: None,
                want,
                reply: false,
            },
        );
    }

    fn handle_legacy(&mut self, now_ms: u64, from: &UniqueAddress, m: MetricsGossipEnvelope) {
        let mut changed = false;
        for e in m.entries {
            let codes: BTreeMap<u8, u32> = e
                .metrics
                .iter()
                .filter_map(|(name, metric)| {
                    let id = names::id(name)?;
                    Some((id, scale(id)?.code(metric.smoothed)))
                })
                .collect();
            let entry = MetricsEntry {
                uid: e.node.uid,
                sequence: e.sequence,
                codes: codes.into_iter().collect(),
            };
            let published = self.own.published().map_or(0, |p| p.sequence);
            if e.node == self.me && e.sequence <= published {
                // This node's own entry coming back.
                continue;
            }
            let ok = e.node != self.me
                && self.member_of(e.node.uid) == Some(&e.node)
                && e.validate().is_ok()
                && self.acceptable(&entry);
            if !ok {
                self.stats.entries_refused += 1;
            } else {
                changed |= self.merge(now_ms, entry);
            }
        }
        if changed {
            self.out.events.push_back(ClusterMetricsEvent::Changed);
        }
        if m.reply && self.may_answer(now_ms, from) {
            let entries = self.view.entries().cloned().collect();
            let answer = MetricsGossipEnvelope {
                entries,
                reply: false,
            };
            self.send(from, ClusterMetricsMessage::Legacy(answer));
        }
    }

    fn start(&mut self, now_ms: u64) {
        if self.started {
            return;
        }
        self.started = true;
        let first = now_ms.saturating_add(self.settings.periodic_tasks_initial_delay_ms);
        self.out.timers.set(Timer::Sample, first);
        self.out.timers.set(Timer::Gossip, first);
    }
}

impl ProtocolMachine for ClusterMetricsCollector {
    type Message = ClusterMetricsMessage;
    type Event = ClusterMetricsEvent;

    fn protocol(&self) -> ProtocolId {
        ProtocolId::CLUSTER_METRICS
    }

    fn handle_message(&mut self, now_ms: u64, from: &UniqueAddress, message: Self::Message) {
        if !self.members.contains(from) || *from == self.me {
            self.stats.entries_refused += 1;
            return;
        }
        self.stats.gossip_received += 1;
        match message {
            ClusterMetricsMessage::Gossip(m) => self.handle_gossip(now_ms, from, m),
            ClusterMetricsMessage::Legacy(m) => self.handle_legacy(now_ms, from, m),
        }
    }

    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, _: MembershipChange) {
        self.members = view.members.keys().cloned().collect();
        self.members.insert(self.me.clone());
        self.by_uid.clear();
        for m in &self.members {
            self.by_uid
                .entry(m.uid)
                .and_modify(|e| *e = None)
                .or_insert_with(|| Some(m.clone()));
        }
        self.peers = view
            .members
            .values()
            .filter(|m| m.unique_address != self.me)
            .filter(|m| !matches!(m.status, MemberStatus::Down | MemberStatus::Removed))
            .filter(|m| view.is_reachable(&m.unique_address))
            .map(|m| m.unique_address.clone())
            .collect();
        let by_uid = &self.by_uid;
        let kept = |uid: u64| by_uid.get(&uid).is_some_and(Option::is_some);
        let gone = self.state.retain(kept);
        self.learnt_at.retain(|u, _| kept(*u));
        let members = &self.members;
        self.answered.retain(|n, _| members.contains(n));
        self.digests_sent.retain(|n, _| members.contains(n));
        let in_view = self.view.len();
        self.view
            .retain(|n| by_uid.get(&n.uid) == Some(&Some(n.clone())));
        if !gone.is_empty() || self.view.len() != in_view {
            self.out.events.push_back(ClusterMetricsEvent::Changed);
        }
        if view.self_member().is_some() {
            self.start(now_ms);
        }
    }

    fn handle_timeout(&mut self, now_ms: u64) {
        for timer in self.out.timers.expired(now_ms) {
            match timer {
                Timer::Sample => {
                    self.out.events.push_back(ClusterMetricsEvent::SampleWanted);
                    let next = now_ms.saturating_add(self.settings.sample_interval_ms.max(1));
                    self.out.timers.set(Timer::Sample, next);
                }
                Timer::Gossip => {
                    self.start_round(now_ms);
                    let next = now_ms.saturating_add(self.settings.gossip_interval_ms.max(1));
                    self.out.timers.set(Timer::Gossip, next);
                }
            }
        }
    }

    fn poll_transmit(&mut self) -> Option<Transmit<Self::Message>> {
        self.out.poll_transmit()
    }

    fn poll_event(&mut self) -> Option<Self::Event> {
        self.out.poll_event()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.out.poll_timeout()
    }
}
