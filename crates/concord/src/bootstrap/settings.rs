//! [`BootstrapSettings`]: Cluster Bootstrap's timings, lookup and probe client, from
//! `[bootstrap]` (Akka Management's `ClusterBootstrapSettings`).

use std::time::Duration;

use tracing::warn;

use super::join_decider::JoinDeciderSettings;
use crate::config::Config;
use crate::discovery::Lookup;

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
    pub(super) fn http_client(&self) -> reqwest::Client {
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
    pub(super) fn scheme(&self) -> &'static str {
        if self.management_tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}
