//! The service discovery interface (Akka Discovery's `ServiceDiscovery`): a [`Lookup`] of a
//! service name resolves to [`Resolved`] targets `{host, port?, address?}`, or a
//! [`DiscoveryError`]; every method implements [`ServiceDiscovery`].

use std::cmp::Ordering;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::time::Duration;

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
