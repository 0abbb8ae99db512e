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
//!
//! This module holds the node's own sections. Each layer's section type (`[sharding]`,
//! `[kv]`, `[distributed-data]`, `[singleton]`, `[singleton-proxy]`) lives in the layer's
//! folder and is read through [`ConfigSection`]; configuration imports no runtime module.

mod bootstrap;
mod cluster;
mod coordinated_shutdown;
mod discovery;
pub(crate) mod duration;
mod error;
mod layer_settings;
mod management;
mod node_address;
mod node_config;
mod overrides;
mod remote;
mod section;
mod split_brain_resolver;
mod testkit;
mod tls;
mod validate;

pub use bootstrap::{BootstrapConfig, ContactPointConfig, ContactPointDiscoveryConfig};
pub use cluster::{ClusterConfig, FailureDetectorConfig, RoleConfig};
pub use coordinated_shutdown::{CoordinatedShutdownConfig, Phase, PhaseConfig};
pub(crate) use discovery::unknown_method;
pub use discovery::{
    parse_name_server, AggregateDiscoveryConfig, ConfigDiscoveryConfig, DiscoveryConfig,
    DnsDiscoveryConfig, ServiceEndpoint, ServiceEndpoints, AGGREGATED_METHODS, DISCOVERY_METHODS,
};
pub use error::ConfigError;
pub(crate) use layer_settings::ENVELOPE_OVERHEAD;
pub(crate) use management::validate_http_limits;
pub use management::ManagementConfig;
pub use node_address::parse_node_address;
pub use node_config::{Config, HOST_ADDRESS_PLACEHOLDER};
pub use overrides::{env_overrides, Overrides};
pub use remote::{RemoteConfig, SecretString};
pub use section::ConfigSection;
pub use split_brain_resolver::{
    KeepOldestConfig, LeaseMajorityConfig, RoleOnlyConfig, SplitBrainResolverConfig,
    StaticQuorumConfig,
};
pub use testkit::TestkitConfig;
pub use tls::TlsConfig;

#[cfg(test)]
mod tests;
