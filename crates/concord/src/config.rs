//! Node configuration: one TOML file with kebab-case keys mirroring Akka's
//! `reference.conf` names and defaults, overridden by environment variables, then by
//! command-line flags. Every key is documented in `docs/CONFIGURATION.md`.
//!
//! Environment variables: `CONCORD__<SECTION>__<KEY>` sets `<section>.<key>` (`__`
//! separates levels, `_` stands for `-`), e.g. `CONCORD__CLUSTER__GOSSIP_INTERVAL=200ms`.
//! Values are read as TOML when they parse as TOML (numbers, booleans, arrays), otherwise
//! as strings.
//!
//! A bad value fails at start with a [`ConfigError`] naming the key.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use concord_core::address::parse_host_port;
use concord_core::settings::{ClusterSettings, FailureDetectorSettings};
use concord_core::split_brain_resolver::{DowningStrategy, SbrSettings};
use concord_core::Address;
use serde::{Deserialize, Deserializer};

use crate::remote::transport::TransportSettings;

/// A configuration problem, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration `{key}`: {message}")]
pub struct ConfigError {
    /// Dotted key path, e.g. `cluster.failure-detector.threshold`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Durations as strings like `"200ms"`, `"1s"`, `"24h"` (humantime).
mod duration {
    use super::*;
    pub(super) fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(s.trim()).map_err(|e| {
            serde::de::Error::custom(format!(
                "`{s}` is not a duration like \"200ms\" or \"1s\": {e}"
            ))
        })
    }
    /// Like `de`, plus `"off"` (or `false`) for none.
    pub(super) fn de_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum V {
            B(bool),
            S(String),
        }
        match V::deserialize(d)? {
            V::B(false) => Ok(None),
            V::B(true) => Err(serde::de::Error::custom("expected a duration or \"off\"")),
            V::S(s) if s.trim().eq_ignore_ascii_case("off") => Ok(None),
            V::S(s) => humantime::parse_duration(s.trim()).map(Some).map_err(|e| {
                serde::de::Error::custom(format!(
                    "`{s}` is not a duration like \"10s\" or \"off\": {e}"
                ))
            }),
        }
    }
}

/// `remote.hostname` placeholder for "this host's IP address" (Akka's `<getHostAddress>`).
pub const HOST_ADDRESS_PLACEHOLDER: &str = "<getHostAddress>";

/// The local address the kernel picks for the default route (a UDP `connect` sends nothing).
fn default_route_address() -> std::io::Result<std::net::IpAddr> {
    let probe = |bind: &str, to: &str| -> std::io::Result<std::net::IpAddr> {
        let s = std::net::UdpSocket::bind(bind)?;
        s.connect(to)?;
        Ok(s.local_addr()?.ip())
    };
    probe("0.0.0.0:0", "192.0.2.1:9").or_else(|_| probe("[::]:0", "[2001:db8::1]:9"))
}

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Config {
    /// Cluster (actor system) name; only nodes with the same name form a cluster.
    pub system: String,
    /// Remoting (`akka.remote.artery`).
    pub remote: RemoteConfig,
    /// Cluster membership (`akka.cluster`).
    pub cluster: ClusterConfig,
    /// Management HTTP API (`akka.management.http`).
    pub management: ManagementConfig,
    /// Cluster Bootstrap (`akka.management.cluster.bootstrap`).
    pub bootstrap: BootstrapConfig,
    /// Service discovery methods (`akka.discovery`).
    pub discovery: DiscoveryConfig,
    /// Test and chaos tooling (`[testkit]`).
    pub testkit: TestkitConfig,
}

/// `[testkit]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct TestkitConfig {
    /// Allow injecting link faults over the management API (off).
    pub fault_injection: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            system: "concord".into(),
            remote: RemoteConfig::default(),
            cluster: ClusterConfig::default(),
            management: ManagementConfig::default(),
            bootstrap: BootstrapConfig::default(),
            discovery: DiscoveryConfig::default(),
            testkit: TestkitConfig::default(),
        }
    }
}

/// `[remote]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// Host name or IP other nodes use to reach this node (`canonical.hostname`).
    pub hostname: String,
    /// Remoting port (25520).
    pub port: u16,
    /// Interface to bind (default: `hostname`).
    pub bind_hostname: Option<String>,
    /// Largest frame, bytes (262144).
    pub maximum_frame_size: usize,
    /// Handshake timeout ("5s").
    #[serde(deserialize_with = "duration::de")]
    pub handshake_timeout: Duration,
    /// Messages queued per peer while connecting (3072).
    pub outbound_message_queue_size: usize,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            hostname: "127.0.0.1".into(),
            port: 25520,
            bind_hostname: None,
            maximum_frame_size: 256 * 1024,
            handshake_timeout: Duration::from_secs(5),
            outbound_message_queue_size: 3072,
        }
    }
}

/// `[cluster.role.<name>]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct RoleConfig {
    /// Members with this role needed before the leader moves anyone to Up.
    pub min_nr_of_members: usize,
}

/// `[cluster.failure-detector]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct FailureDetectorConfig {
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub heartbeat_interval: Duration,
    /// 8.0.
    pub threshold: f64,
    /// 1000.
    pub max_sample_size: usize,
    /// "100ms".
    #[serde(deserialize_with = "duration::de")]
    pub min_std_deviation: Duration,
    /// "3s".
    #[serde(deserialize_with = "duration::de")]
    pub acceptable_heartbeat_pause: Duration,
    /// 5.
    pub monitored_by_nr_of_members: usize,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub expected_response_after: Duration,
}

impl Default for FailureDetectorConfig {
    fn default() -> Self {
        let d = FailureDetectorSettings::default();
        FailureDetectorConfig {
            heartbeat_interval: Duration::from_millis(d.heartbeat_interval_ms),
            threshold: d.threshold,
            max_sample_size: d.max_sample_size,
            min_std_deviation: Duration::from_millis(d.min_std_deviation_ms),
            acceptable_heartbeat_pause: Duration::from_millis(d.acceptable_heartbeat_pause_ms),
            monitored_by_nr_of_members: d.monitored_by_nr_of_members,
            expected_response_after: Duration::from_millis(d.expected_response_after_ms),
        }
    }
}

/// `[cluster]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// Seed nodes: `concord://system@host:port` or `host:port`.
    pub seed_nodes: Vec<String>,
    /// Roles of this node.
    pub roles: Vec<String>,
    /// Application version ("0.0.0").
    pub app_version: String,
    /// "5s".
    #[serde(deserialize_with = "duration::de")]
    pub seed_node_timeout: Duration,
    /// "10s" or "off".
    #[serde(deserialize_with = "duration::de_opt")]
    pub retry_unsuccessful_join_after: Option<Duration>,
    /// "off" or a duration.
    #[serde(deserialize_with = "duration::de_opt")]
    pub shutdown_after_unsuccessful_join_seed_nodes: Option<Duration>,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub periodic_tasks_initial_delay: Duration,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub gossip_interval: Duration,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub leader_actions_interval: Duration,
    /// "1s".
    #[serde(deserialize_with = "duration::de")]
    pub unreachable_nodes_reaper_interval: Duration,
    /// 1.
    pub min_nr_of_members: usize,
    /// Per-role settings.
    pub role: BTreeMap<String, RoleConfig>,
    /// "7s" or "off".
    #[serde(deserialize_with = "duration::de_opt")]
    pub allow_weakly_up_members: Option<Duration>,
    /// 0.8.
    pub gossip_different_view_probability: f64,
    /// 400.
    pub reduce_gossip_different_view_probability: usize,
    /// "24h".
    #[serde(deserialize_with = "duration::de")]
    pub prune_gossip_tombstones_after: Duration,
    /// true.
    pub run_coordinated_shutdown_when_down: bool,
    /// "10s".
    #[serde(deserialize_with = "duration::de")]
    pub exiting_shutdown_timeout: Duration,
    /// `[cluster.failure-detector]`.
    pub failure_detector: FailureDetectorConfig,
    /// `"split-brain-resolver"` (default) or `"none"` (manual downing only).
    pub downing_provider: String,
    /// `[cluster.split-brain-resolver]`.
    pub split_brain_resolver: SplitBrainResolverConfig,
}

/// `[cluster.split-brain-resolver.<strategy>]` with only a role.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct RoleOnlyConfig {
    /// Only members with this role count ("" = all).
    pub role: String,
}

/// `[cluster.split-brain-resolver.static-quorum]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct StaticQuorumConfig {
    /// Minimum members for a side to survive; required for static-quorum.
    pub quorum_size: Option<usize>,
    /// Only members with this role count ("" = all).
    pub role: String,
}

/// `[cluster.split-brain-resolver.keep-oldest]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct KeepOldestConfig {
    /// The oldest, cut off from all others, downs itself (true).
    pub down_if_alone: bool,
    /// Only members with this role count ("" = all).
    pub role: String,
}

impl Default for KeepOldestConfig {
    fn default() -> Self {
        KeepOldestConfig {
            down_if_alone: true,
            role: String::new(),
        }
    }
}

/// `[cluster.split-brain-resolver.lease-majority]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct LeaseMajorityConfig {
    /// Lease implementation: `"file"` (a lock file shared by processes on one host).
    pub lease_implementation: String,
    /// Lease name (default `<system>-concord-sbr`).
    pub lease_name: String,
    /// Directory of the file lease (default: the system temp directory).
    pub lease_directory: String,
    /// The minority waits this long before trying ("2s").
    #[serde(deserialize_with = "duration::de")]
    pub acquire_lease_delay_for_minority: Duration,
    /// A held lease expires after this unless renewed ("40s").
    #[serde(deserialize_with = "duration::de")]
    pub release_after: Duration,
    /// Only members with this role count ("" = all).
    pub role: String,
}

impl Default for LeaseMajorityConfig {
    fn default() -> Self {
        LeaseMajorityConfig {
            lease_implementation: "file".into(),
            lease_name: String::new(),
            lease_directory: String::new(),
            acquire_lease_delay_for_minority: Duration::from_secs(2),
            release_after: Duration::from_secs(40),
            role: String::new(),
        }
    }
}

/// `[cluster.split-brain-resolver]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SplitBrainResolverConfig {
    /// keep-majority (default), static-quorum, keep-oldest, down-all, lease-majority.
    pub active_strategy: String,
    /// Unreachability must be stable this long before a decision ("20s").
    #[serde(deserialize_with = "duration::de")]
    pub stable_after: Duration,
    /// `"on"` (3/4 of stable-after, at least 4 s), `"off"`, or a duration.
    pub down_all_when_unstable: String,
    /// `[..keep-majority]`.
    pub keep_majority: RoleOnlyConfig,
    /// `[..static-quorum]`.
    pub static_quorum: StaticQuorumConfig,
    /// `[..keep-oldest]`.
    pub keep_oldest: KeepOldestConfig,
    /// `[..lease-majority]`.
    pub lease_majority: LeaseMajorityConfig,
}

impl Default for SplitBrainResolverConfig {
    fn default() -> Self {
        SplitBrainResolverConfig {
            active_strategy: "keep-majority".into(),
            stable_after: Duration::from_secs(20),
            down_all_when_unstable: "on".into(),
            keep_majority: RoleOnlyConfig::default(),
            static_quorum: StaticQuorumConfig::default(),
            keep_oldest: KeepOldestConfig::default(),
            lease_majority: LeaseMajorityConfig::default(),
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        let d = ClusterSettings::default();
        let ms = Duration::from_millis;
        ClusterConfig {
            seed_nodes: Vec::new(),
            roles: Vec::new(),
            app_version: "0.0.0".into(),
            seed_node_timeout: ms(d.seed_node_timeout_ms),
            retry_unsuccessful_join_after: d.retry_unsuccessful_join_after_ms.map(ms),
            shutdown_after_unsuccessful_join_seed_nodes: None,
            periodic_tasks_initial_delay: ms(d.periodic_tasks_initial_delay_ms),
            gossip_interval: ms(d.gossip_interval_ms),
            leader_actions_interval: ms(d.leader_actions_interval_ms),
            unreachable_nodes_reaper_interval: ms(d.unreachable_nodes_reaper_interval_ms),
            min_nr_of_members: d.min_nr_of_members,
            role: BTreeMap::new(),
            allow_weakly_up_members: d.weakly_up_after_ms.map(ms),
            gossip_different_view_probability: d.gossip_different_view_probability,
            reduce_gossip_different_view_probability: d.reduce_gossip_different_view_probability,
            prune_gossip_tombstones_after: ms(d.prune_gossip_tombstones_after_ms),
            run_coordinated_shutdown_when_down: d.run_coordinated_shutdown_when_down,
            exiting_shutdown_timeout: ms(d.exiting_shutdown_timeout_ms),
            failure_detector: FailureDetectorConfig::default(),
            downing_provider: "split-brain-resolver".into(),
            split_brain_resolver: SplitBrainResolverConfig::default(),
        }
    }
}

/// `[management]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ManagementConfig {
    /// Serve the management HTTP API (true).
    pub enabled: bool,
    /// Interface to bind ("127.0.0.1").
    pub hostname: String,
    /// Port (8558; 0 picks a free port).
    pub port: u16,
    /// Refuse the write routes (join, leave, down, prepare-for-full-shutdown, fault
    /// injection) with 403. Unset (the default): read-only unless the API is bound to a
    /// loopback interface or a `bearer-token` is set.
    pub read_only: Option<bool>,
    /// When set, write routes require `Authorization: Bearer <token>` (401 otherwise).
    pub bearer_token: Option<String>,
}

impl Default for ManagementConfig {
    fn default() -> Self {
        ManagementConfig {
            enabled: true,
            hostname: "127.0.0.1".into(),
            port: 8558,
            read_only: None,
            bearer_token: None,
        }
    }
}

impl ManagementConfig {
    /// Whether write routes are refused: `read-only` if set, else true unless the API binds
    /// a loopback interface or a bearer token protects it.
    pub fn effective_read_only(&self) -> bool {
        self.read_only.unwrap_or_else(|| {
            let loopback = self.hostname == "localhost"
                || self
                    .hostname
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            !(loopback || self.bearer_token.as_deref().is_some_and(|t| !t.is_empty()))
        })
    }
}

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
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            new_cluster_enabled: true,
            contact_point_discovery: ContactPointDiscoveryConfig::default(),
            contact_point: ContactPointConfig::default(),
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

/// `[discovery]` (Akka `akka.discovery`).
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DiscoveryConfig {
    /// `[discovery.config]`: static endpoints.
    pub config: ConfigDiscoveryConfig,
    /// `[discovery.dns]`.
    pub dns: DnsDiscoveryConfig,
    /// `[discovery.aggregate]`.
    pub aggregate: AggregateDiscoveryConfig,
}

/// `[discovery.config]`: `[discovery.config.services.<name>] endpoints = [...]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ConfigDiscoveryConfig {
    /// Endpoints per service name.
    pub services: BTreeMap<String, ServiceEndpoints>,
}

/// The endpoints of one configured service.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ServiceEndpoints {
    /// `[{ host = "10.0.0.1", port = 8558 }, ...]`.
    pub endpoints: Vec<crate::discovery::ServiceEndpoint>,
}

/// `[discovery.dns]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct DnsDiscoveryConfig {
    /// DNS servers (`"IP"` or `"IP:port"`); empty: the system's (`/etc/resolv.conf`).
    pub name_servers: Vec<String>,
}

/// `[discovery.aggregate]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct AggregateDiscoveryConfig {
    /// Methods tried in order (["config", "dns"]).
    pub discovery_methods: Vec<String>,
}

impl Default for AggregateDiscoveryConfig {
    fn default() -> Self {
        AggregateDiscoveryConfig {
            discovery_methods: vec!["config".into(), "dns".into()],
        }
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// Sets `path` (e.g. `["cluster", "gossip-interval"]`) in a TOML table.
fn set_path(root: &mut toml::Table, path: &[String], value: toml::Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut t = root;
    for p in parents {
        let entry = t
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(next) = entry else {
            return;
        };
        t = next;
    }
    t.insert(last.clone(), value);
}

/// Parses an override value: TOML literal if it is one, else a string.
fn parse_override_value(raw: &str) -> toml::Value {
    match format!("v = {raw}").parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

/// Overrides on top of the file: `(dotted key, raw value)`.
pub type Overrides = Vec<(String, String)>;

/// Environment overrides (`CONCORD__SECTION__KEY=value`) from `vars`.
pub fn env_overrides(vars: impl IntoIterator<Item = (String, String)>) -> Overrides {
    vars.into_iter()
        .filter_map(|(k, v)| {
            let rest = k.strip_prefix("CONCORD__")?;
            let key = rest
                .split("__")
                .map(|p| p.to_ascii_lowercase().replace('_', "-"))
                .collect::<Vec<_>>()
                .join(".");
            Some((key, v))
        })
        .collect()
}

impl Config {
    /// Loads `file` (if any), applies `overrides` in order, validates.
    pub fn load(
        file: Option<&Path>,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let mut table = match file {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    ConfigError::new("--config", format!("cannot read {}: {e}", p.display()))
                })?;
                text.parse::<toml::Table>().map_err(|e| {
                    ConfigError::new(p.display().to_string(), format!("not valid TOML: {e}"))
                })?
            }
            None => toml::Table::new(),
        };
        for (k, v) in overrides {
            let path: Vec<String> = k.split('.').map(str::to_string).collect();
            set_path(&mut table, &path, parse_override_value(v));
        }
        Self::from_table(table)
    }

    /// Parses TOML text (no overrides).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let table = text
            .parse::<toml::Table>()
            .map_err(|e| ConfigError::new("<config>", format!("not valid TOML: {e}")))?;
        Self::from_table(table)
    }

    fn from_table(table: toml::Table) -> Result<Config, ConfigError> {
        let de = toml::Value::Table(table);
        let cfg: Config = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let msg = e.inner().to_string();
            let msg = msg.lines().next().unwrap_or_default().to_string();
            ConfigError::new(
                if path == "." {
                    "<config>".to_string()
                } else {
                    path
                },
                msg,
            )
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let name_ok = !self.system.is_empty()
            && self
                .system
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            return Err(ConfigError::new(
                "system",
                "must be non-empty and use only letters, digits, '-' and '_'",
            ));
        }
        if self.remote.hostname.is_empty() {
            return Err(ConfigError::new("remote.hostname", "must not be empty"));
        }
        if self.remote.maximum_frame_size < 1024 {
            return Err(ConfigError::new(
                "remote.maximum-frame-size",
                "must be at least 1024 bytes",
            ));
        }
        let c = &self.cluster;
        let positive = [
            ("cluster.gossip-interval", c.gossip_interval),
            ("cluster.leader-actions-interval", c.leader_actions_interval),
            (
                "cluster.unreachable-nodes-reaper-interval",
                c.unreachable_nodes_reaper_interval,
            ),
            ("cluster.seed-node-timeout", c.seed_node_timeout),
            (
                "cluster.failure-detector.heartbeat-interval",
                c.failure_detector.heartbeat_interval,
            ),
            (
                "cluster.failure-detector.min-std-deviation",
                c.failure_detector.min_std_deviation,
            ),
        ];
        for (k, d) in positive {
            if d.is_zero() {
                return Err(ConfigError::new(k, "must be greater than zero"));
            }
        }
        if !(c.failure_detector.threshold.is_finite() && c.failure_detector.threshold > 0.0) {
            return Err(ConfigError::new(
                "cluster.failure-detector.threshold",
                "must be a positive number",
            ));
        }
        if c.failure_detector.max_sample_size == 0 {
            return Err(ConfigError::new(
                "cluster.failure-detector.max-sample-size",
                "must be at least 1",
            ));
        }
        if c.failure_detector.monitored_by_nr_of_members == 0 {
            return Err(ConfigError::new(
                "cluster.failure-detector.monitored-by-nr-of-members",
                "must be at least 1",
            ));
        }
        if !(0.0..=1.0).contains(&c.gossip_different_view_probability) {
            return Err(ConfigError::new(
                "cluster.gossip-different-view-probability",
                "must be between 0.0 and 1.0",
            ));
        }
        if c.min_nr_of_members == 0 {
            return Err(ConfigError::new(
                "cluster.min-nr-of-members",
                "must be at least 1",
            ));
        }
        self.seed_node_addresses()?;
        self.downing()?;
        self.validate_bootstrap()?;
        if self.bootstrap_enabled() && !self.management.enabled {
            return Err(ConfigError::new(
                "management.enabled",
                "Cluster Bootstrap needs the management API (its contact point)",
            ));
        }
        if self.management.bearer_token.as_deref() == Some("") {
            return Err(ConfigError::new(
                "management.bearer-token",
                "must not be empty (leave it unset for no token)",
            ));
        }
        Ok(())
    }

    fn validate_bootstrap(&self) -> Result<(), ConfigError> {
        let d = &self.bootstrap.contact_point_discovery;
        let p = &self.bootstrap.contact_point;
        for (k, v) in [
            ("bootstrap.contact-point-discovery.interval", d.interval),
            (
                "bootstrap.contact-point-discovery.exponential-backoff-max",
                d.exponential_backoff_max,
            ),
            (
                "bootstrap.contact-point-discovery.resolve-timeout",
                d.resolve_timeout,
            ),
            ("bootstrap.contact-point.probe-interval", p.probe_interval),
            (
                "bootstrap.contact-point.probing-failure-timeout",
                p.probing_failure_timeout,
            ),
        ] {
            if v.is_zero() {
                return Err(ConfigError::new(k, "must be greater than zero"));
            }
        }
        for (k, v) in [
            (
                "bootstrap.contact-point-discovery.exponential-backoff-random-factor",
                d.exponential_backoff_random_factor,
            ),
            (
                "bootstrap.contact-point.probe-interval-jitter",
                p.probe_interval_jitter,
            ),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(ConfigError::new(k, "must be between 0.0 and 1.0"));
            }
        }
        if d.required_contact_point_nr == 0 {
            return Err(ConfigError::new(
                "bootstrap.contact-point-discovery.required-contact-point-nr",
                "must be at least 1",
            ));
        }
        use crate::discovery::{unknown_method, AGGREGATED_METHODS, DISCOVERY_METHODS};
        if !DISCOVERY_METHODS.contains(&d.discovery_method.as_str()) {
            return Err(ConfigError::new(
                "bootstrap.contact-point-discovery.discovery-method",
                unknown_method(&d.discovery_method, &DISCOVERY_METHODS),
            ));
        }
        for m in &self.discovery.aggregate.discovery_methods {
            if !AGGREGATED_METHODS.contains(&m.as_str()) {
                return Err(ConfigError::new(
                    "discovery.aggregate.discovery-methods",
                    unknown_method(m, &AGGREGATED_METHODS),
                ));
            }
        }
        for s in &self.discovery.dns.name_servers {
            if crate::discovery::parse_name_server(s).is_none() {
                return Err(ConfigError::new(
                    "discovery.dns.name-servers",
                    format!("`{s}` is not an IP address or IP:port"),
                ));
            }
        }
        Ok(())
    }

    /// Whether this node runs Cluster Bootstrap: no seed nodes configured and a
    /// contact-point service name set.
    pub fn bootstrap_enabled(&self) -> bool {
        self.cluster.seed_nodes.is_empty()
            && !self
                .bootstrap
                .contact_point_discovery
                .service_name
                .is_empty()
    }

    /// Replaces `remote.hostname = "<getHostAddress>"` (Akka's placeholder) by this host's
    /// IP address: the source address of the default route.
    ///
    /// Errors when the host has no route to find an address from.
    pub fn resolve_host_address(&mut self) -> Result<(), ConfigError> {
        if self.remote.hostname != HOST_ADDRESS_PLACEHOLDER {
            return Ok(());
        }
        let ip = default_route_address().map_err(|e| {
            ConfigError::new(
                "remote.hostname",
                format!("cannot determine this host's address for {HOST_ADDRESS_PLACEHOLDER}: {e}; set it explicitly"),
            )
        })?;
        self.remote.hostname = ip.to_string();
        Ok(())
    }

    /// The downing provider: `None` for `downing-provider = "none"`.
    pub fn downing(&self) -> Result<Option<SbrSettings>, ConfigError> {
        match self.cluster.downing_provider.as_str() {
            "none" | "" => return Ok(None),
            "split-brain-resolver" => {}
            other => {
                return Err(ConfigError::new(
                    "cluster.downing-provider",
                    format!("`{other}` is not one of \"split-brain-resolver\", \"none\""),
                ))
            }
        }
        let c = &self.cluster.split_brain_resolver;
        let role = |r: &str| {
            if r.is_empty() {
                None
            } else {
                Some(r.to_string())
            }
        };
        let strategy = match c.active_strategy.as_str() {
            "keep-majority" => DowningStrategy::KeepMajority { role: role(&c.keep_majority.role) },
            "static-quorum" => {
                let q = c.static_quorum.quorum_size.filter(|q| *q > 0).ok_or_else(|| {
                    ConfigError::new("cluster.split-brain-resolver.static-quorum.quorum-size", "must be set to at least 1 for static-quorum")
                })?;
                DowningStrategy::StaticQuorum { quorum_size: q, role: role(&c.static_quorum.role) }
            }
            "keep-oldest" => DowningStrategy::KeepOldest { down_if_alone: c.keep_oldest.down_if_alone, role: role(&c.keep_oldest.role) },
            "down-all" => DowningStrategy::DownAll,
            "lease-majority" => {
                if c.lease_majority.lease_implementation != "file" {
                    return Err(ConfigError::new(
                        "cluster.split-brain-resolver.lease-majority.lease-implementation",
                        format!("`{}` is not a known lease implementation (\"file\")", c.lease_majority.lease_implementation),
                    ));
                }
                DowningStrategy::LeaseMajority {
                    role: role(&c.lease_majority.role),
                    acquire_lease_delay_for_minority_ms: ms(c.lease_majority.acquire_lease_delay_for_minority),
                }
            }
            other => {
                return Err(ConfigError::new(
                    "cluster.split-brain-resolver.active-strategy",
                    format!("`{other}` is not one of keep-majority, static-quorum, keep-oldest, down-all, lease-majority"),
                ))
            }
        };
        if c.stable_after.is_zero() {
            return Err(ConfigError::new(
                "cluster.split-brain-resolver.stable-after",
                "must be greater than zero",
            ));
        }
        let stable_after_ms = ms(c.stable_after);
        let down_all_when_unstable_ms = match c.down_all_when_unstable.trim() {
            "on" | "true" => Some(SbrSettings::derived_down_all_when_unstable_ms(
                stable_after_ms,
            )),
            "off" | "false" => None,
            d => Some(ms(humantime::parse_duration(d).map_err(|e| {
                ConfigError::new(
                    "cluster.split-brain-resolver.down-all-when-unstable",
                    format!("`{d}` is not \"on\", \"off\" or a duration: {e}"),
                )
            })?)),
        };
        Ok(Some(SbrSettings {
            strategy,
            stable_after_ms,
            down_all_when_unstable_ms,
        }))
    }

    /// The lease name for lease-majority.
    pub fn lease_name(&self) -> String {
        let n = &self.cluster.split_brain_resolver.lease_majority.lease_name;
        if n.is_empty() {
            format!("{}-concord-sbr", self.system)
        } else {
            n.clone()
        }
    }

    /// This node's remoting address.
    pub fn self_address(&self) -> Address {
        Address::new(
            self.system.clone(),
            self.remote.hostname.clone(),
            self.remote.port,
        )
    }

    /// Parses `cluster.seed-nodes` (`concord://system@host:port` or `host:port`).
    pub fn seed_node_addresses(&self) -> Result<Vec<Address>, ConfigError> {
        self.cluster
            .seed_nodes
            .iter()
            .map(|s| {
                parse_node_address(s, &self.system)
                    .map_err(|m| ConfigError::new("cluster.seed-nodes", m))
            })
            .collect()
    }

    /// The membership settings for `concord-core`.
    pub fn cluster_settings(&self) -> ClusterSettings {
        let c = &self.cluster;
        let fd = &c.failure_detector;
        ClusterSettings {
            seed_node_timeout_ms: ms(c.seed_node_timeout),
            retry_unsuccessful_join_after_ms: c.retry_unsuccessful_join_after.map(ms),
            shutdown_after_unsuccessful_join_seed_nodes_ms: c
                .shutdown_after_unsuccessful_join_seed_nodes
                .map(ms),
            periodic_tasks_initial_delay_ms: ms(c.periodic_tasks_initial_delay),
            gossip_interval_ms: ms(c.gossip_interval),
            leader_actions_interval_ms: ms(c.leader_actions_interval),
            unreachable_nodes_reaper_interval_ms: ms(c.unreachable_nodes_reaper_interval),
            min_nr_of_members: c.min_nr_of_members,
            min_nr_of_members_of_role: c
                .role
                .iter()
                .map(|(k, v)| (k.clone(), v.min_nr_of_members))
                .collect(),
            weakly_up_after_ms: c.allow_weakly_up_members.map(ms),
            gossip_different_view_probability: c.gossip_different_view_probability,
            reduce_gossip_different_view_probability: c.reduce_gossip_different_view_probability,
            prune_gossip_tombstones_after_ms: ms(c.prune_gossip_tombstones_after),
            run_coordinated_shutdown_when_down: c.run_coordinated_shutdown_when_down,
            exiting_shutdown_timeout_ms: ms(c.exiting_shutdown_timeout),
            failure_detector: FailureDetectorSettings {
                heartbeat_interval_ms: ms(fd.heartbeat_interval),
                threshold: fd.threshold,
                max_sample_size: fd.max_sample_size,
                min_std_deviation_ms: ms(fd.min_std_deviation),
                acceptable_heartbeat_pause_ms: ms(fd.acceptable_heartbeat_pause),
                monitored_by_nr_of_members: fd.monitored_by_nr_of_members,
                expected_response_after_ms: ms(fd.expected_response_after),
            },
            // Validated in `validate`; an invalid provider never reaches here.
            downing: self.downing().unwrap_or(None),
        }
    }

    /// The transport settings.
    pub fn transport_settings(&self) -> TransportSettings {
        TransportSettings {
            maximum_frame_size: self.remote.maximum_frame_size,
            handshake_timeout: self.remote.handshake_timeout,
            outbound_message_queue_size: self.remote.outbound_message_queue_size,
            ..TransportSettings::default()
        }
    }
}

/// Parses a node address given as `concord://system@host:port` or `host:port` (then in
/// `system`).
pub fn parse_node_address(s: &str, system: &str) -> Result<Address, String> {
    let s = s.trim();
    if s.starts_with("concord://") {
        return s.parse::<Address>().map_err(|e| e.to_string());
    }
    let (host, port) = parse_host_port(s)
        .map_err(|_| format!("`{s}` is neither `concord://system@host:port` nor `host:port`"))?;
    Ok(Address::new(system, host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_akka() {
        let c = Config::default();
        assert_eq!(c.remote.port, 25520);
        assert_eq!(c.management.port, 8558);
        let s = c.cluster_settings();
        assert_eq!(s, ClusterSettings::default());
        assert_eq!(s.failure_detector.threshold, 8.0);
        assert_eq!(s.weakly_up_after_ms, Some(7000));
    }

    #[test]
    fn file_keys_are_kebab_case_with_duration_strings() {
        let c = Config::from_toml(
            r#"
            system = "shop"
            [remote]
            hostname = "10.0.0.5"
            port = 2552
            [cluster]
            seed-nodes = ["concord://shop@10.0.0.1:2552", "10.0.0.2:2552"]
            gossip-interval = "200ms"
            allow-weakly-up-members = "off"
            [cluster.role.backend]
            min-nr-of-members = 2
            [cluster.failure-detector]
            acceptable-heartbeat-pause = "5s"
            "#,
        )
        .unwrap();
        let s = c.cluster_settings();
        assert_eq!(s.gossip_interval_ms, 200);
        assert_eq!(s.weakly_up_after_ms, None);
        assert_eq!(s.failure_detector.acceptable_heartbeat_pause_ms, 5000);
        assert_eq!(s.min_nr_of_members_of_role["backend"], 2);
        let seeds = c.seed_node_addresses().unwrap();
        assert_eq!(seeds[1], Address::new("shop", "10.0.0.2", 2552));
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = Config::from_toml("[cluster]\ngossip-interval = \"fast\"").unwrap_err();
        assert_eq!(e.key, "cluster.gossip-interval");
        let e = Config::from_toml("[cluster.failure-detector]\nthreshold = -1.0").unwrap_err();
        assert_eq!(e.key, "cluster.failure-detector.threshold");
        let e = Config::from_toml("[cluster]\ngosip-interval = \"1s\"").unwrap_err();
        assert!(e.message.contains("gosip-interval"), "{e}");
        let e = Config::from_toml("[cluster]\nseed-nodes = [\"nonsense\"]").unwrap_err();
        assert_eq!(e.key, "cluster.seed-nodes");
        let e = Config::from_toml("[remote]\nport = 70000").unwrap_err();
        assert_eq!(e.key, "remote.port");
        let e =
            Config::from_toml("[cluster.split-brain-resolver]\nactive-strategy = \"keep-newest\"")
                .unwrap_err();
        assert_eq!(e.key, "cluster.split-brain-resolver.active-strategy");
        let e = Config::from_toml(
            "[cluster.split-brain-resolver]\nactive-strategy = \"static-quorum\"",
        )
        .unwrap_err();
        assert_eq!(
            e.key,
            "cluster.split-brain-resolver.static-quorum.quorum-size"
        );
        let e = Config::from_toml("[cluster]\ndowning-provider = \"auto\"").unwrap_err();
        assert_eq!(e.key, "cluster.downing-provider");
    }

    #[test]
    fn bootstrap_discovery_and_management_bad_values_name_the_key() {
        let cases = [
            (
                "[bootstrap.contact-point-discovery]\ndiscovery-method = \"consul\"",
                "bootstrap.contact-point-discovery.discovery-method",
            ),
            (
                "[bootstrap.contact-point-discovery]\nrequired-contact-point-nr = 0",
                "bootstrap.contact-point-discovery.required-contact-point-nr",
            ),
            (
                "[bootstrap.contact-point-discovery]\nexponential-backoff-random-factor = 1.5",
                "bootstrap.contact-point-discovery.exponential-backoff-random-factor",
            ),
            (
                "[bootstrap.contact-point]\nprobe-interval = \"0s\"",
                "bootstrap.contact-point.probe-interval",
            ),
            (
                "[discovery.dns]\nname-servers = [\"dns.example\"]",
                "discovery.dns.name-servers",
            ),
            (
                "[discovery.aggregate]\ndiscovery-methods = [\"aggregate\"]",
                "discovery.aggregate.discovery-methods",
            ),
            (
                "[management]\nbearer-token = \"\"",
                "management.bearer-token",
            ),
            (
                "[management]\nenabled = false\n[bootstrap.contact-point-discovery]\nservice-name = \"s\"",
                "management.enabled",
            ),
        ];
        for (toml, key) in cases {
            let e = Config::from_toml(toml).unwrap_err();
            assert_eq!(e.key, key, "{toml}: {e}");
        }
        let e =
            Config::from_toml("[discovery.config.services.shop]\nendpoints = [{ hots = \"a\" }]")
                .unwrap_err();
        assert!(e.message.contains("hots"), "{e}");
        let ok = Config::from_toml("[bootstrap.contact-point-discovery]\nservice-name = \"shop\"\n[discovery.config.services.shop]\nendpoints = [{ host = \"10.0.0.1\", port = 8558 }, { host = \"10.0.0.2\" }]").unwrap();
        assert!(ok.bootstrap_enabled());
        assert_eq!(ok.discovery.config.services["shop"].endpoints.len(), 2);
    }

    #[test]
    fn host_address_placeholder_becomes_an_ip() {
        let mut c = Config::default();
        c.remote.hostname = HOST_ADDRESS_PLACEHOLDER.into();
        // A machine without any route cannot resolve it; then the error names the key.
        match c.resolve_host_address() {
            Ok(()) => assert!(c.remote.hostname.parse::<std::net::IpAddr>().is_ok()),
            Err(e) => assert_eq!(e.key, "remote.hostname"),
        }
    }

    #[test]
    fn split_brain_resolver_is_on_by_default_and_can_be_turned_off() {
        let d = Config::default().cluster_settings().downing.unwrap();
        assert_eq!(d.strategy, DowningStrategy::KeepMajority { role: None });
        assert_eq!(d.stable_after_ms, 20_000);
        assert_eq!(d.down_all_when_unstable_ms, Some(15_000));
        let off = Config::from_toml("[cluster]\ndowning-provider = \"none\"").unwrap();
        assert_eq!(off.cluster_settings().downing, None);
        let q = Config::from_toml("[cluster.split-brain-resolver]\nactive-strategy = \"static-quorum\"\nstable-after = \"4s\"\ndown-all-when-unstable = \"off\"\n[cluster.split-brain-resolver.static-quorum]\nquorum-size = 3").unwrap();
        let s = q.cluster_settings().downing.unwrap();
        assert_eq!(
            s.strategy,
            DowningStrategy::StaticQuorum {
                quorum_size: 3,
                role: None
            }
        );
        assert_eq!(s.down_all_when_unstable_ms, None);
    }

    #[test]
    fn environment_overrides_map_to_keys() {
        let o = env_overrides(vec![
            (
                "CONCORD__CLUSTER__GOSSIP_INTERVAL".to_string(),
                "300ms".to_string(),
            ),
            ("CONCORD__REMOTE__PORT".to_string(), "2600".to_string()),
            (
                "CONCORD__CLUSTER__SEED_NODES".to_string(),
                "[\"127.0.0.1:2600\"]".to_string(),
            ),
            ("PATH".to_string(), "/bin".to_string()),
        ]);
        let c = Config::load(None, &o).unwrap();
        assert_eq!(c.cluster.gossip_interval, Duration::from_millis(300));
        assert_eq!(c.remote.port, 2600);
        assert_eq!(c.cluster.seed_nodes, vec!["127.0.0.1:2600".to_string()]);
    }
}
