//! `[discovery]`: service discovery methods (Akka `akka.discovery`).

use std::collections::BTreeMap;

use serde::Deserialize;

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
