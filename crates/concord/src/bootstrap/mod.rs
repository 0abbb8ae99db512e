//! Cluster Bootstrap: forms or joins a cluster with no seed-node list, from service
//! discovery and HTTP contact-point probing (Akka Management Cluster Bootstrap).
//!
//! The process (cluster-bootstrap-details.md): look the service up every
//! `contact-point-discovery.interval` (backing off exponentially to
//! `exponential-backoff-max`, random factor `exponential-backoff-random-factor`, while fewer
//! than `required-contact-point-nr` contact points are found); probe every other contact
//! point's `GET /bootstrap/seed-nodes` every `probe-interval` (± `probe-interval-jitter`,
//! timeout `probing-failure-timeout`); after every result ask the [`JoinDecider`]. Seed
//! nodes reported by any contact point are joined at once ("epidemic joining"); with no
//! cluster anywhere, the lowest contact point joins itself once discovery has been stable
//! for `stable-margin`. The process ends when this node is a member; the [`island_watch`]
//! then keeps probing the contact points every `island-watch-interval` for another cluster
//! of this system name (Concord-specific).

mod backoff;
pub mod contact_point;
pub mod island_watch;
pub mod join_decider;
mod settings;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use concord_core::Address;
use rand::SeedableRng;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

pub use backoff::{backoff, jittered};
pub use contact_point::{SeedNodeJson, SeedNodesJson};
pub use join_decider::{
    JoinDecider, JoinDeciderSettings, JoinDecision, LowestAddressJoinDecider, SeedNodesInformation,
    SeedNodesObservation,
};
pub use settings::BootstrapSettings;

use contact_point::with_fallback_port;

use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::discovery::{ResolvedTarget, ServiceDiscovery};

/// Results the spawned lookups and probes send back.
enum Input {
    Lookup(Result<Vec<ResolvedTarget>, String>),
    Probe(ResolvedTarget, Result<SeedNodesJson, String>),
}

/// The bootstrap process's state between events.
struct Bootstrap {
    cluster: Cluster,
    settings: BootstrapSettings,
    discovery: Arc<dyn ServiceDiscovery>,
    decider: Arc<dyn JoinDecider>,
    system: String,
    clock: Clock,
    rng: rand::rngs::StdRng,
    http: reqwest::Client,
    tx: mpsc::UnboundedSender<Input>,
    /// What the decider sees.
    info: SeedNodesInformation,
    lookup_attempt: u32,
    next_lookup: Instant,
    lookup_in_flight: bool,
    next_probe: BTreeMap<ResolvedTarget, Instant>,
    probing: BTreeSet<ResolvedTarget>,
    /// When this node last issued a join; decisions pause until `REJOIN_AFTER` has passed.
    joined_at: Option<Instant>,
}

/// A join that brought no Welcome is decided again after this.
const REJOIN_AFTER: Duration = Duration::from_secs(10);

impl Bootstrap {
    fn on_lookup(&mut self, result: Result<Vec<ResolvedTarget>, String>) {
        self.lookup_in_flight = false;
        let found = result.unwrap_or_else(|e| {
            warn!(error = %e, "contact point discovery failed");
            Vec::new()
        });
        let fallback = self.settings.fallback_port;
        let points = with_fallback_port(found, fallback);
        if points != self.info.contact_points {
            info!(
                contact_points = ?points
                    .iter()
                    .map(|t| format!("{}:{}", t.host, t.port.unwrap_or(fallback)))
                    .collect::<Vec<_>>(),
                "discovered contact points changed"
            );
            self.info.contact_points_changed_at_ms = self.clock.now_ms();
            self.info
                .seed_nodes_observations
                .retain(|k, _| points.contains(k));
            self.next_probe.retain(|k, _| points.contains(k));
            self.info.contact_points = points;
        }
        let enough = self.info.contact_points.len() >= self.settings.required_contact_point_nr;
        self.lookup_attempt = if enough {
            0
        } else {
            self.lookup_attempt.saturating_add(1)
        };
        let s = &self.settings;
        self.next_lookup = Instant::now()
            + backoff(
                s.interval,
                s.backoff_max,
                s.backoff_random_factor,
                self.lookup_attempt,
                &mut self.rng,
            );
    }

    fn on_probe(&mut self, target: ResolvedTarget, result: Result<SeedNodesJson, String>) {
        self.probing.remove(&target);
        let answer = match result {
            Ok(a) => a,
            Err(e) => {
                debug!(error = %e, "probe failed");
                self.info.seed_nodes_observations.remove(&target);
                return;
            }
        };
        let source = match crate::config::parse_node_address(&answer.self_node, &self.system) {
            Ok(a) if a.system == self.system => a,
            _ => {
                warn!(node = %answer.self_node, "contact point answered with a bad selfNode or another cluster's name; ignored");
                self.info.seed_nodes_observations.remove(&target);
                return;
            }
        };
        let seeds: BTreeSet<Address> = answer
            .seed_nodes
            .iter()
            .filter_map(|s| crate::config::parse_node_address(&s.node, &self.system).ok())
            .filter(|a| a.system == self.system)
            .collect();
        debug!(contact_point = %target.host, seeds = seeds.len(), "probe answered");
        if self.info.contact_points.contains(&target) {
            let observation = SeedNodesObservation {
                observed_at_ms: self.clock.now_ms(),
                source_address: source,
                seed_nodes: seeds,
            };
            self.info
                .seed_nodes_observations
                .insert(target, observation);
        }
    }

    /// Starts the lookup and the probes that are due.
    fn start_due_work(&mut self) {
        let now = Instant::now();
        if !self.lookup_in_flight && now >= self.next_lookup {
            self.lookup_in_flight = true;
            let (d, l, t, tx) = (
                self.discovery.clone(),
                self.settings.lookup.clone(),
                self.settings.resolve_timeout,
                self.tx.clone(),
            );
            tokio::spawn(async move {
                let r = d
                    .lookup(&l, t)
                    .await
                    .map(|r| r.addresses)
                    .map_err(|e| e.to_string());
                let _ = tx.send(Input::Lookup(r));
            });
        }
        let due: Vec<ResolvedTarget> = self
            .info
            .contact_points
            .iter()
            .filter(|t| !self.info.is_self(t) && !self.probing.contains(*t))
            .filter(|t| self.next_probe.get(*t).is_none_or(|at| now >= *at))
            .cloned()
            .collect();
        for target in due {
            let s = &self.settings;
            let next = now + jittered(s.probe_interval, s.probe_interval_jitter, &mut self.rng);
            self.next_probe.insert(target.clone(), next);
            self.probing.insert(target.clone());
            let (http, tx) = (self.http.clone(), self.tx.clone());
            let (port, timeout) = (s.fallback_port, s.probing_failure_timeout);
            let scheme = s.scheme();
            tokio::spawn(async move {
                let r = contact_point::probe(&http, scheme, &target, port, timeout).await;
                let _ = tx.send(Input::Probe(target, r));
            });
        }
    }

    /// Asks the decider and acts on its decision.
    async fn decide(&mut self) {
        let now = Instant::now();
        if self.joined_at.is_some_and(|at| now < at + REJOIN_AFTER) {
            return;
        }
        self.info.now_ms = self.clock.now_ms();
        match self.decider.decide(&self.info) {
            JoinDecision::KeepProbing => {}
            JoinDecision::JoinOtherSeedNodes(seeds) => {
                info!(
                    seeds = ?seeds.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                    "bootstrap: joining the seed nodes a contact point reported"
                );
                self.joined_at = Some(now);
                if let Err(e) = self
                    .cluster
                    .join_seed_nodes(seeds.into_iter().collect())
                    .await
                {
                    warn!(error = %e, "bootstrap join failed");
                }
            }
            JoinDecision::JoinSelf => {
                info!(
                    contact_points = self.info.contact_points.len(),
                    "bootstrap: no cluster exists and this node has the lowest contact point; forming a new cluster"
                );
                self.joined_at = Some(now);
                let me = self.cluster.self_address().clone();
                if let Err(e) = self.cluster.join(me).await {
                    warn!(error = %e, "bootstrap self-join failed");
                }
            }
        }
    }
}

/// Runs Cluster Bootstrap for `cluster` until it is a member (or shuts down), then its
/// [`island_watch`] until the node's membership ends. `self_host` is this node's advertised
/// host (`remote.hostname`).
pub async fn run(
    cluster: Cluster,
    settings: BootstrapSettings,
    discovery: Arc<dyn ServiceDiscovery>,
    decider: Arc<dyn JoinDecider>,
    self_host: String,
) {
    let clock = Clock::new();
    let self_contact_point = ResolvedTarget::new(self_host, Some(settings.fallback_port));
    info!(
        service = %settings.lookup.service_name,
        contact_point = ?self_contact_point,
        "cluster bootstrap started"
    );
    let (tx, mut rx) = mpsc::unbounded_channel::<Input>();
    let http = settings.http_client();
    let mut b = Bootstrap {
        system: cluster.self_address().system.clone(),
        cluster,
        settings,
        discovery,
        decider,
        info: SeedNodesInformation {
            now_ms: clock.now_ms(),
            contact_points_changed_at_ms: clock.now_ms(),
            contact_points: BTreeSet::new(),
            self_contact_point,
            seed_nodes_observations: BTreeMap::new(),
        },
        clock,
        rng: rand::rngs::StdRng::from_rng(&mut rand::rng()),
        http,
        tx,
        lookup_attempt: 0,
        next_lookup: Instant::now(),
        lookup_in_flight: false,
        next_probe: BTreeMap::new(),
        probing: BTreeSet::new(),
        joined_at: None,
    };
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shutdown = b.cluster.coordinated_shutdown().clone();
    let mut terminated = Box::pin(async move { shutdown.started().await });
    loop {
        if b.cluster.view().self_member().is_some() {
            info!("cluster bootstrap done: this node is a member");
            break;
        }
        tokio::select! {
            _ = &mut terminated => return,
            _ = tick.tick() => {}
            Some(input) = rx.recv() => match input {
                Input::Lookup(r) => b.on_lookup(r),
                Input::Probe(target, r) => b.on_probe(target, r),
            },
        }
        b.start_due_work();
        b.decide().await;
    }
    let watch = island_watch::IslandWatch {
        cluster: b.cluster,
        settings: b.settings,
        discovery: b.discovery,
        http: b.http,
        self_contact_point: b.info.self_contact_point,
        system: b.system,
        rng: b.rng,
    };
    tokio::select! {
        _ = &mut terminated => {}
        _ = watch.run() => {}
    }
}
