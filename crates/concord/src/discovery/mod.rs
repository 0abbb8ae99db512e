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
mod service_discovery;

use std::sync::Arc;

pub use aggregate::AggregateServiceDiscovery;
pub use config_discovery::{ConfigServiceDiscovery, ServiceEndpoint};
pub use dns::{parse_name_server, DnsServiceDiscovery, NameServer};
pub use service_discovery::{
    DiscoveryError, Lookup, LookupFuture, Resolved, ResolvedTarget, ServiceDiscovery,
};

use crate::config::unknown_method;
pub use crate::config::{AGGREGATED_METHODS, DISCOVERY_METHODS};

use crate::config::{Config, ConfigError};

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
