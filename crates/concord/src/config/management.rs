//! `[management]`: the management HTTP API (Akka `akka.management.http`).

use serde::Deserialize;

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
}

impl Default for ManagementConfig {
    fn default() -> Self {
        ManagementConfig {
            enabled: true,
            hostname: "127.0.0.1".into(),
            port: 8558,
            read_only: None,
            bearer_token: None,
        }
    }
}

impl ManagementConfig {
    /// Whether write routes are refused: `read-only` if set, else true unless the API binds
    /// a loopback interface or a bearer token protects it.
    pub fn effective_read_only(&self) -> bool {
        self.read_only.unwrap_or_else(|| {
            let loopback = self.hostname == "localhost"
                || self
                    .hostname
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback());
            !(loopback || self.bearer_token.as_deref().is_some_and(|t| !t.is_empty()))
        })
    }
}
