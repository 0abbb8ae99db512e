//! `dns` discovery (hickory-resolver): A/AAAA records of the service name, or — when the
//! lookup has a port name and a protocol — SRV records of `_<port>._<protocol>.<name>`, whose
//! targets carry the port and are resolved to addresses from the answer's additional
//! section or by a further A/AAAA lookup (Akka's `DnsServiceDiscovery`).
//!
//! Answers are not cached beyond 1 s: Docker's and Kubernetes' DNS give long TTLs, and the
//! bootstrap must see nodes come and go.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;

use super::service_discovery::{
    DiscoveryError, Lookup, LookupFuture, Resolved, ResolvedTarget, ServiceDiscovery,
};
use crate::config::{ConfigError, DnsDiscoveryConfig};

/// A DNS server to ask instead of the system's (`/etc/resolv.conf`).
pub type NameServer = SocketAddr;

pub use crate::config::parse_name_server;

/// DNS discovery.
#[derive(Clone)]
pub struct DnsServiceDiscovery {
    resolver: TokioResolver,
}

impl DnsServiceDiscovery {
    /// Uses the system resolver configuration, or `name_servers` when not empty.
    ///
    /// Errors when the system configuration cannot be read.
    pub fn new(name_servers: &[NameServer]) -> Result<Self, String> {
        let mut builder = if name_servers.is_empty() {
            TokioResolver::builder_tokio().map_err(|e| e.to_string())?
        } else {
            let mut config = ResolverConfig::default();
            for ns in name_servers {
                let mut c = NameServerConfig::udp_and_tcp(ns.ip());
                for conn in &mut c.connections {
                    conn.port = ns.port();
                }
                config.add_name_server(c);
            }
            TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
        };
        let opts = builder.options_mut();
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        opts.positive_max_ttl = Some(Duration::from_secs(1));
        opts.negative_max_ttl = Some(Duration::from_secs(1));
        opts.timeout = Duration::from_secs(2);
        let resolver = builder.build().map_err(|e| e.to_string())?;
        Ok(DnsServiceDiscovery { resolver })
    }

    /// From `[discovery.dns]`.
    pub fn from_config(c: &DnsDiscoveryConfig) -> Result<Self, ConfigError> {
        let key = "discovery.dns.name-servers";
        let mut servers = Vec::new();
        for s in &c.name_servers {
            let ns = parse_name_server(s).ok_or_else(|| {
                ConfigError::new(key, format!("`{s}` is not an IP address or IP:port"))
            })?;
            servers.push(ns);
        }
        DnsServiceDiscovery::new(&servers).map_err(|e| ConfigError::new(key, e))
    }

    fn failed(service: &str, e: impl std::fmt::Display) -> DiscoveryError {
        DiscoveryError::Failed {
            service: service.to_string(),
            message: e.to_string(),
        }
    }

    async fn lookup_ip(&self, lookup: &Lookup) -> Result<Resolved, DiscoveryError> {
        let name = &lookup.service_name;
        let ips = self
            .resolver
            .lookup_ip(name.as_str())
            .await
            .map_err(|e| Self::failed(name, e))?;
        let mut addresses: Vec<ResolvedTarget> = ips
            .iter()
            .map(|ip| ResolvedTarget {
                host: ip.to_string(),
                port: None,
                address: Some(ip),
            })
            .collect();
        addresses.dedup();
        Ok(Resolved {
            service_name: name.clone(),
            addresses,
        })
    }

    async fn lookup_srv(
        &self,
        lookup: &Lookup,
        srv_name: &str,
    ) -> Result<Resolved, DiscoveryError> {
        let answer = self
            .resolver
            .srv_lookup(srv_name)
            .await
            .map_err(|e| Self::failed(srv_name, e))?;
        // Addresses the server volunteered in the additional section.
        let mut known: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
        for r in answer.additionals() {
            let ip = match &r.data {
                RData::A(a) => IpAddr::V4(a.0),
                RData::AAAA(a) => IpAddr::V6(a.0),
                _ => continue,
            };
            known.entry(r.name.to_ascii()).or_default().push(ip);
        }
        let mut addresses = Vec::new();
        for r in answer.answers() {
            if r.record_type() != RecordType::SRV {
                continue;
            }
            let RData::SRV(srv) = &r.data else { continue };
            let target = srv.target.to_ascii();
            let ips = match known.get(&target) {
                Some(ips) => ips.clone(),
                None => match self.resolver.lookup_ip(target.as_str()).await {
                    Ok(l) => l.iter().collect(),
                    Err(_) => Vec::new(),
                },
            };
            let host = target.trim_end_matches('.').to_string();
            if ips.is_empty() {
                addresses.push(ResolvedTarget {
                    host: host.clone(),
                    port: Some(srv.port),
                    address: None,
                });
            }
            for ip in ips {
                addresses.push(ResolvedTarget {
                    host: host.clone(),
                    port: Some(srv.port),
                    address: Some(ip),
                });
            }
        }
        Ok(Resolved {
            service_name: lookup.service_name.clone(),
            addresses,
        })
    }
}

impl ServiceDiscovery for DnsServiceDiscovery {
    fn lookup<'a>(&'a self, lookup: &'a Lookup, timeout: Duration) -> LookupFuture<'a> {
        Box::pin(async move {
            let work = async {
                match lookup.srv_name() {
                    Some(srv) => self.lookup_srv(lookup, &srv).await,
                    None => self.lookup_ip(lookup).await,
                }
            };
            tokio::time::timeout(timeout, work)
                .await
                .map_err(|_| DiscoveryError::Timeout(lookup.service_name.clone()))?
        })
    }
}
