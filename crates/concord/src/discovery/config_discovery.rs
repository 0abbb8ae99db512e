//! `config` discovery: a static list of endpoints per service in the configuration file
//! (`[discovery.config.services.<name>] endpoints = [{ host = "...", port = 8558 }]`), as
//! Akka's `ConfigServiceDiscovery`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::service_discovery::{Lookup, LookupFuture, Resolved, ResolvedTarget, ServiceDiscovery};
pub use crate::config::ServiceEndpoint;

/// Discovery from a static map service name → endpoints.
#[derive(Clone, Debug, Default)]
pub struct ConfigServiceDiscovery {
    services: BTreeMap<String, Vec<ServiceEndpoint>>,
}

impl ConfigServiceDiscovery {
    /// Discovery over `services`.
    pub fn new(services: BTreeMap<String, Vec<ServiceEndpoint>>) -> Self {
        ConfigServiceDiscovery { services }
    }
}

impl ServiceDiscovery for ConfigServiceDiscovery {
    /// An unknown service resolves to no targets (not an error), as in Akka.
    fn lookup<'a>(&'a self, lookup: &'a Lookup, _timeout: Duration) -> LookupFuture<'a> {
        let addresses = self
            .services
            .get(&lookup.service_name)
            .map(|eps| {
                eps.iter()
                    .map(|e| ResolvedTarget::new(e.host.clone(), e.port))
                    .collect()
            })
            .unwrap_or_default();
        Box::pin(std::future::ready(Ok(Resolved {
            service_name: lookup.service_name.clone(),
            addresses,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_configured_endpoints_and_nothing_for_unknown_services() {
        let mut services = BTreeMap::new();
        services.insert(
            "shop".to_string(),
            vec![
                ServiceEndpoint {
                    host: "10.0.0.2".into(),
                    port: Some(8558),
                },
                ServiceEndpoint {
                    host: "node-b".into(),
                    port: None,
                },
            ],
        );
        let d = ConfigServiceDiscovery::new(services);
        let r = d
            .lookup(&Lookup::new("shop"), Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(r.addresses.len(), 2);
        assert_eq!(r.addresses[0].address, Some("10.0.0.2".parse().unwrap()));
        assert_eq!(r.addresses[1].address, None);
        assert_eq!(r.addresses[1].port, None);
        let none = d
            .lookup(&Lookup::new("other"), Duration::from_secs(1))
            .await
            .unwrap();
        assert!(none.addresses.is_empty());
    }
}
