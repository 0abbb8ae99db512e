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

mod bootstrap;
mod cluster;
mod coordinated_shutdown;
mod discovery;
mod distributed_data;
mod duration;
mod kv;
mod management;
mod remote;
mod sharding;
mod split_brain_resolver;
mod testkit;
mod tls;
mod validate;

use std::path::Path;

use concord_core::address::parse_host_port;
use concord_core::Address;
use serde::Deserialize;

pub use bootstrap::{BootstrapConfig, ContactPointConfig, ContactPointDiscoveryConfig};
pub use cluster::{ClusterConfig, FailureDetectorConfig, RoleConfig};
pub use coordinated_shutdown::{CoordinatedShutdownConfig, Phase, PhaseConfig};
pub(crate) use discovery::unknown_method;
pub use discovery::{
    parse_name_server, AggregateDiscoveryConfig, ConfigDiscoveryConfig, DiscoveryConfig,
    DnsDiscoveryConfig, ServiceEndpoint, ServiceEndpoints, AGGREGATED_METHODS, DISCOVERY_METHODS,
};
pub use distributed_data::{
    DeltaCrdtConfig, DistributedDataConfig, DurableConfig, SingletonConfig, SingletonProxyConfig,
};
pub use kv::KvConfig;
pub use management::ManagementConfig;
pub use remote::{RemoteConfig, SecretString};
pub use sharding::{
    AllocationConfig, CoordinatorStateConfig, PassivationConfig, RecoveryRateConfig, ShardingConfig,
};
pub use split_brain_resolver::{
    KeepOldestConfig, LeaseMajorityConfig, RoleOnlyConfig, SplitBrainResolverConfig,
    StaticQuorumConfig,
};
pub use testkit::TestkitConfig;
pub use tls::TlsConfig;

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
    /// Coordinated shutdown phase timeouts (`akka.coordinated-shutdown`).
    pub coordinated_shutdown: CoordinatedShutdownConfig,
    /// Test and chaos tooling (`[testkit]`).
    pub testkit: TestkitConfig,
    /// Where the node keeps its files (durable Distributed Data); "" =
    /// `concord-data/<system>-<host>-<port>` under the working directory.
    pub data_dir: String,
    /// Distributed Data (`akka.cluster.distributed-data`).
    pub distributed_data: DistributedDataConfig,
    /// Cluster Singleton managers (`akka.cluster.singleton`).
    pub singleton: SingletonConfig,
    /// Cluster Singleton proxies (`akka.cluster.singleton-proxy`).
    pub singleton_proxy: SingletonProxyConfig,
    /// Cluster Sharding (`akka.cluster.sharding`).
    pub sharding: ShardingConfig,
    /// The key-value store (`[kv]`).
    pub kv: KvConfig,
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
            coordinated_shutdown: CoordinatedShutdownConfig::default(),
            testkit: TestkitConfig::default(),
            data_dir: String::new(),
            distributed_data: DistributedDataConfig::default(),
            singleton: SingletonConfig::default(),
            singleton_proxy: SingletonProxyConfig::default(),
            sharding: ShardingConfig::default(),
            kv: KvConfig::default(),
        }
    }
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
mod tests;
