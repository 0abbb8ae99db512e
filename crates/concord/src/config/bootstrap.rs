//! `[bootstrap]`: Cluster Bootstrap (Akka `akka.management.cluster.bootstrap`).

use std::time::Duration;

use serde::Deserialize;

use super::duration;

/// `[bootstrap]` (Akka `akka.management.cluster.bootstrap`). Bootstrap runs when
/// `cluster.seed-nodes` is empty and `contact-point-discovery.service-name` is set.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct BootstrapConfig {
    /// Allow the lowest-addressed node to form a new cluster (true). Off: only join
    /// existing clusters (Akka `new-cluster-enabled`).
    pub new_cluster_enabled: bool,
    /// Discovery of contact points.
    pub contact_point_discovery: ContactPointDiscoveryConfig,
    /// Probing of contact points.
    pub contact_point: ContactPointConfig,
    /// Once this node is a member, the island watch looks the contact points up and
    /// probes them this often ("30s", ± `contact-point.probe-interval-jitter`), and hands
    /// the seed nodes they report to the island probe, so that another cluster of this
    /// system name reachable through them is found (docs/MEMBERSHIP.md, "Island
    /// clusters"). "0s": no island watch. Concord-specific (Akka's bootstrap ends when the
    /// node joins).
    #[serde(deserialize_with = "duration::de")]
    pub island_watch_interval: Duration,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            new_cluster_enabled: true,
            contact_point_discovery: ContactPointDiscoveryConfig::default(),
            contact_point: ContactPointConfig::default(),
            island_watch_interval: Duration::from_secs(30),
        }
    }
}

/// `[bootstrap.contact-point-discovery]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ContactPointDiscoveryConfig {
    /// Service to look up (empty: no bootstrap).
    pub service_name: String,
    /// Appended as `<service-name>.<service-namespace>` when set.
    pub service_namespace: String,
    /// Port name for SRV lookups (with `protocol`); empty: A/AAAA lookups.
    pub port_name: String,
    /// Protocol for SRV lookups ("tcp").
    pub protocol: String,
    /// `config`, `dns` or `aggregate` ("config").
    pub discovery_method: String,
    /// Time between lookups ("1s"), backed off exponentially up to
    /// `exponential-backoff-max` while too few contact points are found.
    #[serde(deserialize_with = "duration::de")]
    pub interval: Duration,
    /// Random factor of the backoff (0.2).
    pub exponential_backoff_random_factor: f64,
    /// Longest time between lookups ("15s").
    #[serde(deserialize_with = "duration::de")]
    pub exponential_backoff_max: Duration,
    /// Discovery must not have changed for this long before a new cluster is formed ("5s").
    #[serde(deserialize_with = "duration::de")]
    pub stable_margin: Duration,
    /// At least this many contact points before a new cluster is formed (2). Set it to the
    /// initial number of nodes.
    pub required_contact_point_nr: usize,
    /// Form a new cluster only after every discovered contact point answered (true).
    pub contact_with_all_contact_points: bool,
    /// Timeout of one lookup ("3s").
    #[serde(deserialize_with = "duration::de")]
    pub resolve_timeout: Duration,
}

impl Default for ContactPointDiscoveryConfig {
    fn default() -> Self {
        ContactPointDiscoveryConfig {
            service_name: String::new(),
            service_namespace: String::new(),
            port_name: String::new(),
            protocol: "tcp".into(),
            discovery_method: "config".into(),
            interval: Duration::from_secs(1),
            exponential_backoff_random_factor: 0.2,
            exponential_backoff_max: Duration::from_secs(15),
            stable_margin: Duration::from_secs(5),
            required_contact_point_nr: 2,
            contact_with_all_contact_points: true,
            resolve_timeout: Duration::from_secs(3),
        }
    }
}

/// `[bootstrap.contact-point]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ContactPointConfig {
    /// Port of a contact point whose target has none (0: this node's `management.port`).
    pub fallback_port: u16,
    /// Time between probes of one contact point ("1s").
    #[serde(deserialize_with = "duration::de")]
    pub probe_interval: Duration,
    /// Random jitter of the probe interval, as a fraction (0.2).
    pub probe_interval_jitter: f64,
    /// A probe without an answer for this long failed ("3s"); the contact point then no
    /// longer counts as answered.
    #[serde(deserialize_with = "duration::de")]
    pub probing_failure_timeout: Duration,
}

impl Default for ContactPointConfig {
    fn default() -> Self {
        ContactPointConfig {
            fallback_port: 0,
            probe_interval: Duration::from_secs(1),
            probe_interval_jitter: 0.2,
            probing_failure_timeout: Duration::from_secs(3),
        }
    }
}
