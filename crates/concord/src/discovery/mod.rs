//! Service discovery (Akka Discovery): a [`Lookup`] of a service name, optionally with a
//! port name and protocol, resolves to [`ResolvedTarget`]s `{host, port?, address?}`.
//!
//! Methods: [`ConfigServiceDiscovery`] (a static list in the configuration file),
//! [`DnsServiceDiscovery`] (A/AAAA, or SRV `_<port>._<protocol>.<name>` when both a port name
//! and a protocol are given; hickory-resolver) and [`AggregateServiceDiscovery`] (methods in
//! order, the next one on an empty result or an error). More methods (the Kubernetes API)
//! implement [`ServiceDiscovery`].
//!
//! Source: Akka Discovery documentation (`akka.discovery`), and cluster-bootstrap-details.md
//! ("Contact point discovery").

mod aggregate;
mod config_discovery;
mod dns;

use std::cmp::Ordering;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use aggregate::AggregateServiceDiscovery;
pub use config_discovery::{ConfigServiceDiscovery, ServiceEndpoint};
pub use dns::{parse_name_server, DnsServiceDiscovery, NameServer};

use crate::config::unknown_method;
pub use crate::config::{AGGREGATED_METHODS, DISCOVERY_METHODS};

use crate::config::{Config, ConfigError};

/// What to look up: `service_name`, and for SRV lookups `port_name` and `protocol`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lookup {
    /// Service name, e.g. `concord` or `concord.default.svc.cluster.local`.
    pub service_name: String,
    /// Port name (SRV `_<port_name>`), e.g. `management`.
    pub port_name: Option<String>,
    /// Protocol (SRV `._<protocol>`), e.g. `tcp`.
    pub protocol: Option<String>,
}

impl Lookup {
    /// A lookup of `service_name` alone (A/AAAA for DNS).
    pub fn new(service_name: impl Into<String>) -> Self {
        Lookup {
            service_name: service_name.into(),
            port_name: None,
            protocol: None,
        }
    }

    /// Sets the port name.
    pub fn with_port_name(mut self, port_name: impl Into<String>) -> Self {
        self.port_name = Some(port_name.into());
        self
    }

    /// Sets the protocol.
    pub fn with_protocol(mut self, protocol: impl Into<String>) -> Self {
        self.protocol = Some(protocol.into());
        self
    }

    /// The SRV name `_<port>._<protocol>.<service>` when both port name and protocol are set.
    pub fn srv_name(&self) -> Option<String> {
        match (&self.port_name, &self.protocol) {
            (Some(p), Some(proto)) => Some(format!("_{p}._{proto}.{}", self.service_name)),
            _ => None,
        }
    }
}

/// One resolved instance of a service.
///
/// Targets are totally ordered by IP address (IPv4 before IPv6, then numerically; targets
/// without an address first), then host name, then port (none first) — the order
/// the bootstrap's lowest-address rule uses (Akka's `ResolvedTarget` ordering).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ResolvedTarget {
    /// Host name (or the IP address as text).
    pub host: String,
    /// Port, if the method knows it (SRV, config); otherwise the caller's default.
    pub port: Option<u16>,
    /// IP address, if known.
    pub address: Option<IpAddr>,
}

impl ResolvedTarget {
    /// A target at `host` (its `address` is set when `host` is an IP literal).
    pub fn new(host: impl Into<String>, port: Option<u16>) -> Self {
        let host = host.into();
        let address = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse()
            .ok();
        ResolvedTarget {
            host,
            port,
            address,
        }
    }
}

impl Ord for ResolvedTarget {
    fn cmp(&self, other: &Self) -> Ordering {
        self.address
            .cmp(&other.address)
            .then_with(|| self.host.cmp(&other.host))
            .then_with(|| self.port.cmp(&other.port))
    }
}

impl PartialOrd for ResolvedTarget {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The answer to a [`Lookup`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The service name looked up.
    pub service_name: String,
    /// Its instances, in the order the method returned them.
    pub addresses: Vec<ResolvedTarget>,
}

/// Why a lookup failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DiscoveryError {
    /// The lookup did not finish within the timeout.
    #[error("lookup of `{0}` timed out")]
    Timeout(String),
    /// The method failed (DNS error, ...).
    #[error("lookup of `{service}` failed: {message}")]
    Failed {
        /// Service name.
        service: String,
        /// What went wrong.
        message: String,
    },
}

/// A boxed future of a lookup.
pub type LookupFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Resolved, DiscoveryError>> + Send + 'a>>;

/// A service discovery method (Akka's `ServiceDiscovery`).
pub trait ServiceDiscovery: Send + Sync {
    /// Resolves `lookup`, giving up after `timeout`.
    fn lookup<'a>(&'a self, lookup: &'a Lookup, timeout: Duration) -> LookupFuture<'a>;
}

/// Builds the discovery method named `method` (`config`, `dns` or `aggregate`) from the
/// `[discovery]` configuration.
///
/// Errors: an unknown method name or a bad DNS name-server setting, naming the key.
pub fn from_config(
    config: &Config,
    method: &str,
) -> Result<Arc<dyn ServiceDiscovery>, ConfigError> {
    let key = "bootstrap.contact-point-discovery.discovery-method";
    match method {
        "config" => Ok(Arc::new(ConfigServiceDiscovery::new(
            config
                .discovery
                .config
                .services
                .iter()
                .map(|(k, v)| (k.clone(), v.endpoints.clone()))
                .collect(),
        ))),
        "dns" => Ok(Arc::new(DnsServiceDiscovery::from_config(
            &config.discovery.dns,
        )?)),
        "aggregate" => {
            let mut methods = Vec::new();
            for m in &config.discovery.aggregate.discovery_methods {
                if m == "aggregate" {
                    return Err(ConfigError::new(
                        "discovery.aggregate.discovery-methods",
                        "cannot contain `aggregate`",
                    ));
                }
                methods.push(from_config(config, m).map_err(|e| {
                    ConfigError::new("discovery.aggregate.discovery-methods", e.message)
                })?);
            }
            if methods.is_empty() {
                return Err(ConfigError::new(
                    "discovery.aggregate.discovery-methods",
                    "must name at least one method",
                ));
            }
            Ok(Arc::new(AggregateServiceDiscovery::new(methods)))
        }
        other => Err(ConfigError::new(
            key,
            unknown_method(other, &DISCOVERY_METHODS),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_order_by_ip_then_host_then_port() {
        let mut v = [
            ResolvedTarget::new("10.0.0.10", Some(8558)),
            ResolvedTarget::new("10.0.0.9", Some(8558)),
            ResolvedTarget::new("::1", Some(8558)),
            ResolvedTarget::new("10.0.0.9", Some(8557)),
            ResolvedTarget::new("b.example", Some(1)),
            ResolvedTarget::new("a.example", Some(2)),
            ResolvedTarget::new("a.example", None),
        ];
        v.sort();
        let got: Vec<(String, Option<u16>)> = v.iter().map(|t| (t.host.clone(), t.port)).collect();
        assert_eq!(
            got,
            vec![
                ("a.example".into(), None),
                ("a.example".into(), Some(2)),
                ("b.example".into(), Some(1)),
                ("10.0.0.9".into(), Some(8557)),
                ("10.0.0.9".into(), Some(8558)),
                ("10.0.0.10".into(), Some(8558)),
                ("::1".into(), Some(8558)),
            ]
        );
    }

    #[test]
    fn srv_name_needs_port_name_and_protocol() {
        assert_eq!(Lookup::new("svc").srv_name(), None);
        assert_eq!(
            Lookup::new("svc").with_port_name("management").srv_name(),
            None
        );
        assert_eq!(
            Lookup::new("svc.ns.svc.cluster.local")
                .with_port_name("management")
                .with_protocol("tcp")
                .srv_name()
                .as_deref(),
            Some("_management._tcp.svc.ns.svc.cluster.local")
        );
    }
}
