//! `[management]`: the management HTTP API (Akka `akka.management.http`).

use serde::Deserialize;

use super::TlsConfig;

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
