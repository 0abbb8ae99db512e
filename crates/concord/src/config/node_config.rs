//! [`Config`]: a node's whole configuration file, its defaults, and loading it (file,
//! overrides, validation).

use std::path::{Path, PathBuf};

use concord_core::Address;
use serde::Deserialize;

use super::bootstrap::BootstrapConfig;
use super::cluster::ClusterConfig;
use super::coordinated_shutdown::CoordinatedShutdownConfig;
use super::discovery::DiscoveryConfig;
use super::error::ConfigError;
use super::management::ManagementConfig;
use super::node_address::parse_node_address;
use super::overrides::{parse_override_value, set_path};
use super::remote::RemoteConfig;
use super::testkit::TestkitConfig;

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

/// The whole configuration file: the node's own sections as fields, the layers' sections
/// (see [`super::ConfigSection`]) as TOML in [`Config::sections`].
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", default)]
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
    /// The layers' sections by top-level key (`distributed-data`, `singleton`,
    /// `singleton-proxy`, `sharding`, `kv`, an application layer's), as TOML. Each layer
    /// reads its own with [`Config::section`]; set them with [`Config::set_section`] or
    /// [`Config::update_section`]. A node refuses to start with a section no layer reads.
    #[serde(flatten)]
    pub sections: toml::Table,
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
            sections: toml::Table::new(),
        }
    }
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

    /// The node's data directory: `data-dir`, or `concord-data/<system>-<host>-<port>`
    /// under the working directory (one per node, like Akka's `ddata-<system>-<port>`).
    pub fn data_dir_path(&self) -> PathBuf {
        if self.data_dir.is_empty() {
            PathBuf::from("concord-data").join(format!(
                "{}-{}-{}",
                self.system, self.remote.hostname, self.remote.port
            ))
        } else {
            PathBuf::from(&self.data_dir)
        }
    }
}
