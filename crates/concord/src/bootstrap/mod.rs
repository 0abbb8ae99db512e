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

pub mod contact_point;
pub mod island_watch;
pub mod join_decider;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use concord_core::Address;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

pub use contact_point::{SeedNodeJson, SeedNodesJson};
pub use join_decider::{
    JoinDecider, JoinDeciderSettings, JoinDecision, LowestAddressJoinDecider, SeedNodesInformation,
    SeedNodesObservation,
};

use crate::clock::Clock;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::discovery::{Lookup, ResolvedTarget, ServiceDiscovery};

/// Bootstrap timings and lookup, from `[bootstrap]`.
#[derive(Clone, Debug)]
pub struct BootstrapSettings {
    /// What to look up.
    pub lookup: Lookup,
    /// Port of targets without one (this node's management port by default).
    pub fallback_port: u16,
    /// Base lookup interval.
    pub interval: Duration,
    /// Backoff cap.
    pub backoff_max: Duration,
    /// Backoff random factor, 0..=1.
    pub backoff_random_factor: f64,
    /// Lookup timeout.
    pub resolve_timeout: Duration,
    /// Probe interval per contact point.
    pub probe_interval: Duration,
    /// Probe jitter, 0..=1.
    pub probe_interval_jitter: f64,
    /// Probe timeout.
    pub probing_failure_timeout: Duration,
    /// Minimum contact points before backoff stops.
    pub required_contact_point_nr: usize,
    /// The default decider's settings.
    pub decider: JoinDeciderSettings,
    /// Time between island watch rounds once this node is a member (zero: no watch).
    pub island_watch_interval: Duration,
    /// `[management.tls]`: contact points are probed over HTTPS, trusting its
    /// `ca-certificates` (and checking the contact point's name with
    /// `verify-peer-hostname`); `None`: plain HTTP.
    pub management_tls: Option<crate::config::TlsConfig>,
}

impl BootstrapSettings {
    /// From `config`; `management_port` is the bound management port (the fallback port
    /// when `contact-point.fallback-port` is 0).
    pub fn from_config(config: &Config, management_port: u16) -> Self {
        let d = &config.bootstrap.contact_point_discovery;
        let p = &config.bootstrap.contact_point;
        let service_name = if d.service_namespace.is_empty() {
            d.service_name.clone()
        } else {
            format!("{}.{}", d.service_name, d.service_namespace)
        };
        let mut lookup = Lookup::new(service_name);
        if !d.port_name.is_empty() {
            lookup = lookup.with_port_name(d.port_name.clone());
            if !d.protocol.is_empty() {
                lookup = lookup.with_protocol(d.protocol.clone());
            }
        }
        BootstrapSettings {
            lookup,
            fallback_port: if p.fallback_port == 0 {
                management_port
            } else {
                p.fallback_port
            },
            interval: d.interval,
            backoff_max: d.exponential_backoff_max,
            backoff_random_factor: d.exponential_backoff_random_factor,
            resolve_timeout: d.resolve_timeout,
            probe_interval: p.probe_interval,
            probe_interval_jitter: p.probe_interval_jitter,
            probing_failure_timeout: p.probing_failure_timeout,
            required_contact_point_nr: d.required_contact_point_nr,
            decider: JoinDeciderSettings {
                stable_margin_ms: d.stable_margin.as_millis() as u64,
                required_contact_point_nr: d.required_contact_point_nr,
                contact_with_all_contact_points: d.contact_with_all_contact_points,
                new_cluster_enabled: config.bootstrap.new_cluster_enabled,
            },
            island_watch_interval: config.bootstrap.island_watch_interval,
            management_tls: config.management.tls.clone(),
        }
    }

    /// The HTTP client for probes: HTTPS trusting `management_tls`'s authorities when set.
    fn http_client(&self) -> reqwest::Client {
        let builder = crate::tls::http_client_builder();
        let builder = match &self.management_tls {
            None => builder,
            Some(t) => match crate::tls::TlsContext::for_management(t) {
                Ok(ctx) => builder.tls_backend_preconfigured((*ctx.client_config()).clone()),
                Err(e) => {
                    warn!(error = %e, "cluster bootstrap: management TLS files unusable; probes will fail");
                    builder
                }
            },
        };
        builder.build().unwrap_or_else(|e| {
            warn!(error = %e, "cluster bootstrap: HTTPS client unusable; probes will fail");
            crate::tls::http_client_builder()
                .build()
                .expect("plain HTTP client")
        })
    }

    /// `http` or `https` (for the probe URLs).
    fn scheme(&self) -> &'static str {
        if self.management_tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// `d` scaled by a random factor in [1 − `factor`, 1 + `factor`] (`factor` clamped to 0..=1).
pub fn jittered(d: Duration, factor: f64, rng: &mut impl Rng) -> Duration {
    let f = if factor.is_finite() {
        factor.abs().min(1.0)
    } else {
        0.0
    };
    if f == 0.0 {
        return d;
    }
    d.mul_f64(1.0 + rng.random_range(-f..=f))
}

/// `base` × 2^`attempt`, capped at `max`, then [`jittered`] by `random_factor`.
pub fn backoff(
    base: Duration,
    max: Duration,
    random_factor: f64,
    attempt: u32,
    rng: &mut impl Rng,
) -> Duration {
    jittered(
        base.saturating_mul(1u32 << attempt.min(16)).min(max),
        random_factor,
        rng,
    )
}

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

/// The contact points of a lookup, each without a port given `fallback` (the management
/// port unless `contact-point.fallback-port` is set), without duplicates.
fn with_fallback_port(found: Vec<ResolvedTarget>, fallback: u16) -> BTreeSet<ResolvedTarget> {
    found
        .into_iter()
        .map(|mut t| {
            t.port = t.port.or(Some(fallback));
            t
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_within_the_random_factor() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let base = Duration::from_secs(1);
        let max = Duration::from_secs(15);
        assert_eq!(backoff(base, max, 0.0, 0, &mut rng), base);
        assert_eq!(backoff(base, max, 0.0, 3, &mut rng), Duration::from_secs(8));
        assert_eq!(backoff(base, max, 0.0, 10, &mut rng), max);
        for attempt in 0..20 {
            let d = backoff(base, max, 0.2, attempt, &mut rng);
            let exp = base.saturating_mul(1 << attempt.min(16)).min(max);
            assert!(
                d >= exp.mul_f64(0.8) && d <= exp.mul_f64(1.2),
                "{d:?} vs {exp:?}"
            );
        }
    }

    #[test]
    fn jitter_factor_is_clamped_and_never_panics() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let d = Duration::from_secs(1);
        assert_eq!(jittered(d, f64::NAN, &mut rng), d);
        assert_eq!(jittered(d, 0.0, &mut rng), d);
        for f in [-0.5, 3.0] {
            let j = jittered(d, f, &mut rng);
            assert!(j <= Duration::from_secs(2), "{f}: {j:?}");
        }
    }
}
