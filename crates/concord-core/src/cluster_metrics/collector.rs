//! [`ClusterMetricsCollector`]: the sans-IO machine of the cluster-metrics protocol (Akka's
//! `ClusterMetricsCollector`, `akka-cluster-metrics/.../ClusterMetricsCollector.scala`).
//!
//! Every `sample-interval` it asks its host for a sample ([`ClusterMetricsEvent::SampleWanted`];
//! reading the machine's CPU and memory is I/O, so the host does it and hands the values back
//! with [`ClusterMetricsCollector::record_sample`]), smooths each value with an [`Ewma`] and
//! numbers the sample. Every `gossip-interval` it sends every entry it holds to **one** random
//! other member, which merges them and answers once with its own; entries of nodes that left
//! the membership are dropped. So each node sends two messages of at most one entry per
//! member each gossip interval — the bytes per second grow with the cluster's size, not with
//! its traffic — and every node learns every node's metrics in O(log n) rounds.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::SeedableRng;

use super::ewma::{alpha, Ewma};
use super::metrics_gossip::MetricsGossip;
use super::node_metrics::{Metric, NodeMetrics, MAX_METRICS_PER_NODE, MAX_METRIC_NAME_BYTES};
use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;
use crate::outputs::Outputs;
use crate::protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};

/// The collector's settings (`[cluster-metrics]`, Akka's `akka.cluster.metrics.collector`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMetricsSettings {
    /// How often a node samples its metrics, ms (Akka's `sample-interval`, 3 s).
    pub sample_interval_ms: u64,
    /// How often a node sends its entries to one random member, ms (`gossip-interval`, 3 s).
    pub gossip_interval_ms: u64,
    /// The moving averages' half-life, ms (`moving-average-half-life`, 12 s).
    pub moving_average_half_life_ms: u64,
    /// Delay before the first sample and gossip, ms (`periodic-tasks-initial-delay`, 1 s).
    pub periodic_tasks_initial_delay_ms: u64,
}

impl Default for ClusterMetricsSettings {
    fn default() -> Self {
        ClusterMetricsSettings {
            sample_interval_ms: 3_000,
            gossip_interval_ms: 3_000,
            moving_average_half_life_ms: 12_000,
            periodic_tasks_initial_delay_ms: 1_000,
        }
    }
}

/// The protocol's one message (Akka's `MetricsGossipEnvelope`): the sender's entries, and
/// whether it wants the receiver's in return.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsGossipEnvelope {
    /// The sender's entries (at most one per member).
    pub entries: Vec<NodeMetrics>,
    /// Answer with your entries (set on a gossip round's first message, not on the answer).
    pub reply: bool,
}

/// What the collector tells its host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterMetricsEvent {
    /// Sample the node's metrics now and hand them to
    /// [`ClusterMetricsCollector::record_sample`].
    SampleWanted,
    /// The entries changed (a sample of this node, or newer entries from gossip, or a member
    /// left): read them with [`ClusterMetricsCollector::gossip`] (Akka's
    /// `ClusterMetricsChanged`).
    Changed,
}

/// Counters of the collector (for metrics and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectorStats {
    /// Samples of this node recorded.
    pub samples: u64,
    /// Gossip messages sent (rounds and answers).
    pub gossip_sent: u64,
    /// Gossip messages received from members.
    pub gossip_received: u64,
    /// Entries received that were newer than the ones held.
    pub entries_merged: u64,
    /// Entries refused: malformed (see [`NodeMetrics::validate`]), of a node that is not a
    /// member, or claiming to be this node; and messages from non-members (counted once).
    pub entries_refused: u64,
    /// Sampled values dropped: not finite, negative, or beyond the limits on names.
    pub sample_values_dropped: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Sample,
    Gossip,
}

/// The cluster-metrics machine of one node; see the module docs.
#[derive(Debug)]
pub struct ClusterMetricsCollector {
    settings: ClusterMetricsSettings,
    me: UniqueAddress,
    alpha: f64,
    gossip: MetricsGossip,
    /// Members (any status) in the latest view: whose entries are kept.
    members: BTreeSet<UniqueAddress>,
    /// Members to gossip with: not this node, not Down, reachable.
    peers: Vec<UniqueAddress>,
    sequence: u64,
    started: bool,
    /// When this node last answered each member's round, ms: at most one answer per
    /// member per half gossip interval, whatever a member asks.
    answered: BTreeMap<UniqueAddress, u64>,
    rng: SmallRng,
    stats: CollectorStats,
    out: Outputs<MetricsGossipEnvelope, ClusterMetricsEvent, Timer>,
}

impl ClusterMetricsCollector {
    /// A collector for node `me`; `seed` seeds its choice of gossip peers.
    pub fn new(settings: ClusterMetricsSettings, me: UniqueAddress, seed: u64) -> Self {
        let alpha = alpha(
            settings.moving_average_half_life_ms,
            settings.sample_interval_ms,
        );
        ClusterMetricsCollector {
            settings,
            members: [me.clone()].into(),
            me,
            alpha,
            gossip: MetricsGossip::new(),
            peers: Vec::new(),
            sequence: 0,
            started: false,
            answered: BTreeMap::new(),
            rng: SmallRng::seed_from_u64(seed),
            stats: CollectorStats::default(),
            out: Outputs::new(),
        }
    }

    /// Every node's latest metrics as this node knows them (this node's included once it
    /// sampled).
    pub fn gossip(&self) -> &MetricsGossip {
        &self.gossip
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
    /// [`super::names`]). Each value updates its moving average (a metric seen for the first
    /// time starts at its value); a metric missing from this sample is dropped from the
    /// entry. Values that are NaN, infinite or negative, names that are empty or longer than
    /// [`MAX_METRIC_NAME_BYTES`], and names beyond [`MAX_METRICS_PER_NODE`] are dropped and
    /// counted in [`CollectorStats::sample_values_dropped`].
    pub fn record_sample(&mut self, now_ms: u64, values: BTreeMap<String, f64>) {
        let previous = self.gossip.get(&self.me).map(|e| e.metrics.clone());
        let mut metrics = BTreeMap::new();
        for (name, value) in values {
            let fits = metrics.len() < MAX_METRICS_PER_NODE
                && !name.is_empty()
                && name.len() <= MAX_METRIC_NAME_BYTES;
            if !fits || !value.is_finite() || value < 0.0 {
                self.stats.sample_values_dropped += 1;
                continue;
            }
            let smoothed = match previous.as_ref().and_then(|p| p.get(&name)) {
                Some(m) => Ewma::new(m.smoothed, self.alpha).next(value).value,
                None => value,
            };
            metrics.insert(name, Metric { value, smoothed });
        }
        self.sequence += 1;
        self.stats.samples += 1;
        self.gossip.merge_entry(NodeMetrics {
            node: self.me.clone(),
            sequence: self.sequence,
            sampled_at_ms: now_ms,
            metrics,
        });
        self.out.events.push_back(ClusterMetricsEvent::Changed);
    }

    fn envelope(&self, reply: bool) -> MetricsGossipEnvelope {
        MetricsGossipEnvelope {
            entries: self.gossip.entries().cloned().collect(),
            reply,
        }
    }

    fn send(&mut self, to: &UniqueAddress, reply: bool) {
        let message = self.envelope(reply);
        self.stats.gossip_sent += 1;
        self.out.transmits.push_back(Transmit {
            to: to.address.clone(),
            to_uid: Some(to.uid),
            lane: Lane::Ordinary,
            message,
        });
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
    type Message = MetricsGossipEnvelope;
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
        let mut changed = false;
        for entry in message.entries {
            let acceptable = entry.node != self.me
                && self.members.contains(&entry.node)
                && entry.validate().is_ok();
            if !acceptable {
                self.stats.entries_refused += 1;
            } else if self.gossip.merge_entry(entry) {
                self.stats.entries_merged += 1;
                changed = true;
            }
        }
        if changed {
            self.out.events.push_back(ClusterMetricsEvent::Changed);
        }
        let spacing = self.settings.gossip_interval_ms / 2;
        let due = self
            .answered
            .get(from)
            .is_none_or(|at| now_ms.saturating_sub(*at) >= spacing);
        if message.reply && due {
            self.answered.insert(from.clone(), now_ms);
            self.send(&from.clone(), false);
        }
    }

    fn handle_membership(&mut self, now_ms: u64, view: &MembershipView, _: MembershipChange) {
        self.members = view.members.keys().cloned().collect();
        self.members.insert(self.me.clone());
        self.peers = view
            .members
            .values()
            .filter(|m| m.unique_address != self.me)
            .filter(|m| !matches!(m.status, MemberStatus::Down | MemberStatus::Removed))
            .filter(|m| view.is_reachable(&m.unique_address))
            .map(|m| m.unique_address.clone())
            .collect();
        let before = self.gossip.len();
        self.gossip.retain_members(&self.members);
        let members = &self.members;
        self.answered.retain(|n, _| members.contains(n));
        if self.gossip.len() != before {
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
                    if let Some(peer) = self.peers.choose(&mut self.rng).cloned() {
                        self.send(&peer, true);
                    }
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
