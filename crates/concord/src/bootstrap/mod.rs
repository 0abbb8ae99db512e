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
//! for `stable-margin`. The process ends when this node is a member.

pub mod contact_point;
pub mod join_decider;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use concord_core::Address;
use rand::{Rng, SeedableRng};
use tokio::sync::mpsc;
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
        }
    }
}

/// `base` × 2^`attempt`, capped at `max`, then scaled by a random factor in
/// [1 − `random_factor`, 1 + `random_factor`].
pub fn backoff(
    base: Duration,
    max: Duration,
    random_factor: f64,
    attempt: u32,
    rng: &mut impl Rng,
) -> Duration {
    let exp = base.saturating_mul(1u32 << attempt.min(16)).min(max);
    let f = if random_factor > 0.0 {
        1.0 + rng.random_range(-random_factor..=random_factor)
    } else {
        1.0
    };
    exp.mul_f64(f.max(0.0))
}

enum Input {
    Lookup(Result<Vec<ResolvedTarget>, String>),
    Probe(ResolvedTarget, Result<SeedNodesJson, String>),
}

/// Runs Cluster Bootstrap for `cluster` until it is a member (or shuts down). `self_host` is
/// this node's advertised host (`remote.hostname`).
pub async fn run(
    cluster: Cluster,
    settings: BootstrapSettings,
    discovery: Arc<dyn ServiceDiscovery>,
    decider: Arc<dyn JoinDecider>,
    self_host: String,
) {
    let clock = Clock::new();
    let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
    let http = reqwest::Client::new();
    let self_contact_point = ResolvedTarget::new(self_host, Some(settings.fallback_port));
    let system = cluster.self_address().system.clone();
    info!(
        service = %settings.lookup.service_name,
        contact_point = ?self_contact_point,
        "cluster bootstrap started"
    );
    let (tx, mut rx) = mpsc::unbounded_channel::<Input>();
    let mut info_state = SeedNodesInformation {
        now_ms: clock.now_ms(),
        contact_points_changed_at_ms: clock.now_ms(),
        contact_points: BTreeSet::new(),
        self_contact_point: self_contact_point.clone(),
        seed_nodes_observations: BTreeMap::new(),
    };
    let mut lookup_attempt: u32 = 0;
    let mut next_lookup = tokio::time::Instant::now();
    let mut lookup_in_flight = false;
    let mut next_probe: BTreeMap<ResolvedTarget, tokio::time::Instant> = BTreeMap::new();
    let mut probing: BTreeSet<ResolvedTarget> = BTreeSet::new();
    // After a join this node waits for the Welcome before deciding again.
    let mut joined_at: Option<tokio::time::Instant> = None;
    let rejoin_after = Duration::from_secs(10);
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut terminated = {
        let c = cluster.clone();
        Box::pin(async move { c.terminated().await })
    };
    loop {
        if cluster.state().self_member.is_some() {
            info!("cluster bootstrap done: this node is a member");
            return;
        }
        tokio::select! {
            _ = &mut terminated => return,
            _ = tick.tick() => {}
            Some(input) = rx.recv() => match input {
                Input::Lookup(result) => {
                    lookup_in_flight = false;
                    let found = match result {
                        Ok(targets) => targets,
                        Err(e) => {
                            warn!(error = %e, "contact point discovery failed");
                            Vec::new()
                        }
                    };
                    let points: BTreeSet<ResolvedTarget> = found
                        .into_iter()
                        .map(|mut t| {
                            t.port = t.port.or(Some(settings.fallback_port));
                            t
                        })
                        .collect();
                    if points != info_state.contact_points {
                        info!(contact_points = ?points.iter().map(|t| format!("{}:{}", t.host, t.port.unwrap_or(0))).collect::<Vec<_>>(), "discovered contact points changed");
                        info_state.contact_points_changed_at_ms = clock.now_ms();
                        info_state.seed_nodes_observations.retain(|k, _| points.contains(k));
                        next_probe.retain(|k, _| points.contains(k));
                        info_state.contact_points = points;
                    }
                    let enough = info_state.contact_points.len() >= settings.required_contact_point_nr;
                    lookup_attempt = if enough { 0 } else { lookup_attempt.saturating_add(1) };
                    next_lookup = tokio::time::Instant::now()
                        + backoff(settings.interval, settings.backoff_max, settings.backoff_random_factor, lookup_attempt, &mut rng);
                }
                Input::Probe(target, result) => {
                    probing.remove(&target);
                    match result {
                        Ok(answer) => {
                            let Ok(source) = crate::config::parse_node_address(&answer.self_node, &system) else {
                                warn!(node = %answer.self_node, "contact point answered with a bad selfNode");
                                continue;
                            };
                            if source.system != system {
                                warn!(node = %answer.self_node, "contact point belongs to another cluster (system name); ignored");
                                info_state.seed_nodes_observations.remove(&target);
                                continue;
                            }
                            let seeds: BTreeSet<Address> = answer
                                .seed_nodes
                                .iter()
                                .filter_map(|s| crate::config::parse_node_address(&s.node, &system).ok())
                                .filter(|a| a.system == system)
                                .collect();
                            debug!(contact_point = %target.host, seeds = seeds.len(), "probe answered");
                            if info_state.contact_points.contains(&target) {
                                info_state.seed_nodes_observations.insert(target, SeedNodesObservation {
                                    observed_at_ms: clock.now_ms(),
                                    source_address: source,
                                    seed_nodes: seeds,
                                });
                            }
                        }
                        Err(e) => {
                            debug!(error = %e, "probe failed");
                            info_state.seed_nodes_observations.remove(&target);
                        }
                    }
                }
            },
        }
        let now = tokio::time::Instant::now();
        if !lookup_in_flight && now >= next_lookup {
            lookup_in_flight = true;
            let (d, l, t, tx) = (
                discovery.clone(),
                settings.lookup.clone(),
                settings.resolve_timeout,
                tx.clone(),
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
        for target in info_state.contact_points.iter() {
            if info_state.is_self(target) || probing.contains(target) {
                continue;
            }
            let due = next_probe.get(target).is_none_or(|at| now >= *at);
            if !due {
                continue;
            }
            let jitter: f64 = 1.0
                + rng
                    .random_range(-settings.probe_interval_jitter..=settings.probe_interval_jitter);
            next_probe.insert(
                target.clone(),
                now + settings.probe_interval.mul_f64(jitter.max(0.0)),
            );
            probing.insert(target.clone());
            let (http, target, tx) = (http.clone(), target.clone(), tx.clone());
            let (port, timeout) = (settings.fallback_port, settings.probing_failure_timeout);
            tokio::spawn(async move {
                let r = contact_point::probe(&http, &target, port, timeout).await;
                let _ = tx.send(Input::Probe(target, r));
            });
        }
        if joined_at.is_some_and(|at| now < at + rejoin_after) {
            continue;
        }
        info_state.now_ms = clock.now_ms();
        match decider.decide(&info_state) {
            JoinDecision::KeepProbing => {}
            JoinDecision::JoinOtherSeedNodes(seeds) => {
                info!(seeds = ?seeds.iter().map(|a| a.to_string()).collect::<Vec<_>>(), "bootstrap: joining the seed nodes a contact point reported");
                joined_at = Some(now);
                if let Err(e) = cluster.join_seed_nodes(seeds.into_iter().collect()).await {
                    warn!(error = %e, "bootstrap join failed");
                }
            }
            JoinDecision::JoinSelf => {
                info!(contact_points = info_state.contact_points.len(), "bootstrap: no cluster exists and this node has the lowest contact point; forming a new cluster");
                joined_at = Some(now);
                let me = cluster.self_address().clone();
                if let Err(e) = cluster.join(me).await {
                    warn!(error = %e, "bootstrap self-join failed");
                }
            }
        }
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
}
