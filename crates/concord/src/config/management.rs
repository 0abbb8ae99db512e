//! `[management]`: the management HTTP API (Akka `akka.management.http`).

use std::time::Duration;

use serde::Deserialize;

use super::duration;
use super::error::ConfigError;
use super::tls::TlsConfig;

/// `[management]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ManagementConfig {
    /// Serve the management HTTP API (true).
    pub enabled: bool,
    /// Interface to bind ("127.0.0.1").
    pub hostname: String,
    /// Port (8558; 0 picks a free port).
    pub port: u16,
    /// Refuse the write routes (join, leave, down, prepare-for-full-shutdown, fault
    /// injection) with 403. Unset (the default): read-only unless the API is bound to a
    /// loopback interface or a `bearer-token` is set.
    pub read_only: Option<bool>,
    /// When set, write routes require `Authorization: Bearer <token>` (401 otherwise).
    pub bearer_token: Option<String>,
    /// Serve HTTPS (`[management.tls]`: `certificate`, `private-key`, `ca-certificates`,
    /// `verify-peer-hostname`). A client certificate signed by `ca-certificates` then
    /// authorises the write routes like the bearer token; Cluster Bootstrap probes other
    /// nodes over HTTPS, trusting `ca-certificates`.
    pub tls: Option<TlsConfig>,
    /// Extra host names write requests may carry in `Host` and `Origin` (e.g. a load
    /// balancer's or Service's DNS name). Always allowed: `hostname`, the bound address,
    /// the node's `remote.hostname`, and loopback names when the API listens on loopback or
    /// every interface. Protects writes from cross-site requests and DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// Largest request body, bytes (65536); a larger one is answered 413.
    pub max_body_size: usize,
    /// Most connections served at once (256); more are closed at accept (503 over plain
    /// HTTP) and counted. Lowered at start so that this API's, the key-value API's and
    /// remoting's caps leave a quarter of the process's file-descriptor limit free.
    pub max_connections: usize,
    /// Most connections from one source at once (32; an IPv6 source is its /64); more are
    /// closed at accept. Two more connections from 127.0.0.1 or ::1 are admitted beyond
    /// both caps, for an operator on the node's own host.
    pub max_connections_per_source: usize,
    /// A request's head (request line and headers) must arrive complete within this
    /// ("10s"), counted from accept or, on a kept-alive connection, from the end of the
    /// previous response (hyper's `header_read_timeout`); then the connection is closed.
    #[serde(deserialize_with = "duration::de")]
    pub header_read_timeout: Duration,
    /// A connection on which no byte moves in either direction for this long is closed
    /// ("60s"): an idle kept-alive connection, a stalled request body, a client that stopped
    /// reading. Keep it above 15 s, the domain-events stream's keep-alive interval.
    #[serde(deserialize_with = "duration::de")]
    pub idle_timeout: Duration,
}

impl Default for ManagementConfig {
    fn default() -> Self {
        ManagementConfig {
            enabled: true,
            hostname: "127.0.0.1".into(),
            port: 8558,
            read_only: None,
            bearer_token: None,
            tls: None,
            allowed_hosts: Vec::new(),
            max_body_size: 64 * 1024,
            max_connections: 256,
            max_connections_per_source: 32,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

impl ManagementConfig {
    /// Whether write routes are refused: `read-only` if set, else true unless the API binds
    /// a loopback interface or a bearer token or client certificates (`[management.tls]`)
    /// protect it.
    pub fn effective_read_only(&self) -> bool {
        self.read_only.unwrap_or_else(|| {
            let loopback = self.hostname == "localhost"
                || self
                    .hostname
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            !(loopback
                || self.tls.is_some()
                || self.bearer_token.as_deref().is_some_and(|t| !t.is_empty()))
        })
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }
}

/// Checks an HTTP server's connection limits; `prefix` names the keys (`management.`,
/// `kv.http-`).
pub(crate) fn validate_http_limits(
    prefix: &str,
    max_connections: usize,
    per_source: usize,
    header_read_timeout: Duration,
    idle_timeout: Duration,
) -> Result<(), ConfigError> {
    for (key, v) in [
        ("max-connections", max_connections),
        ("max-connections-per-source", per_source),
    ] {
        if v == 0 {
            return Err(ConfigError::new(
                format!("{prefix}{key}"),
                "must be at least 1",
            ));
        }
    }
    for (key, v) in [
        ("header-read-timeout", header_read_timeout),
        ("idle-timeout", idle_timeout),
    ] {
        if v.is_zero() {
            return Err(ConfigError::new(
                format!("{prefix}{key}"),
                "must be greater than zero",
            ));
        }
    }
    Ok(())
}
