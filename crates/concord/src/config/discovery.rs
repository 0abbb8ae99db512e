//! `[discovery]`: service discovery methods (Akka `akka.discovery`).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;

/// The method names `bootstrap.contact-point-discovery.discovery-method` accepts.
pub const DISCOVERY_METHODS: [&str; 3] = ["config", "dns", "aggregate"];

/// The methods `discovery.aggregate.discovery-methods` may list.
pub const AGGREGATED_METHODS: [&str; 2] = ["config", "dns"];

/// "`x` is not one of "a", "b"" for an unknown method name.
pub(crate) fn unknown_method(name: &str, known: &[&str]) -> String {
    let list: Vec<String> = known.iter().map(|m| format!("\"{m}\"")).collect();
    format!("`{name}` is not one of {}", list.join(", "))
}

/// Parses a `discovery.dns.name-servers` entry: `"IP"` (port 53) or `"IP:port"`.
pub fn parse_name_server(s: &str) -> Option<SocketAddr> {
    s.parse::<SocketAddr>()
        .ok()
        .or_else(|| s.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53)))
}

/// One configured endpoint.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct ServiceEndpoint {
    /// Host name or IP.
    pub host: String,
    /// Port (the contact point's management port), if not the default.
    #[serde(default)]
    pub port: Option<u16>,
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
    pub endpoints: Vec<ServiceEndpoint>,
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
