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
    fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            system: "concord".into(),
            remote: RemoteConfig::default(),
            cluster: ClusterConfig::default(),
            management: ManagementConfig::default(),
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
}

impl Default for ManagementConfig {
    fn default() -> Self {
        ManagementConfig {
            enabled: true,
            hostname: "127.0.0.1".into(),
            port: 8558,
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
        Ok(())
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
