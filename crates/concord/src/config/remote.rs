//! `[remote]`: remoting (Akka `akka.remote.artery`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{duration, Config, ConfigError, TlsConfig};
use crate::remote::cluster_secret::{ClusterSecret, MIN_SECRET_BYTES};
use crate::remote::TransportSettings;
use crate::tls::TlsContext;

/// A secret from the configuration: its `Debug` form does not show it.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct SecretString(pub String);

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

/// `[remote]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct RemoteConfig {
    /// Host name or IP other nodes use to reach this node (`canonical.hostname`).
    pub hostname: String,
    /// Remoting port (25520).
    pub port: u16,
    /// Interface to bind (default: `hostname`).
    pub bind_hostname: Option<String>,
    /// Largest frame on the control and ordinary lanes, bytes (262144); a larger message
    /// travels on the large lane.
    pub maximum_frame_size: usize,
    /// Largest frame on the large lane, bytes (2097152).
    pub maximum_large_frame_size: usize,
    /// Handshake timeout ("5s").
    #[serde(deserialize_with = "duration::de")]
    pub handshake_timeout: Duration,
    /// An inbound connection must send its first byte within this of its accept ("1s"; at
    /// most `handshake-timeout`).
    #[serde(deserialize_with = "duration::de")]
    pub handshake_first_byte_timeout: Duration,
    /// Most inbound connections in their handshake at once from non-members' addresses (128).
    pub max_pending_handshakes: usize,
    /// Most inbound connections in their handshake at once from one non-member address (8).
    pub max_pending_handshakes_per_address: usize,
    /// Handshake places beyond `max-pending-handshakes` only members' addresses may take (32).
    pub reserved_member_handshakes: usize,
    /// Messages queued per peer on the ordinary lane (3072).
    pub outbound_message_queue_size: usize,
    /// Messages queued per peer on the control lane (20000).
    pub outbound_control_queue_size: usize,
    /// Messages queued per peer on the large lane (256).
    pub outbound_large_message_queue_size: usize,
    /// Most bytes queued per peer and lane (8388608); a lane's queue holds at least one
    /// frame of its limit.
    pub outbound_queue_max_bytes: usize,
    /// TLS 1.3 with mutual authentication on every lane (`[remote.tls]`: `certificate`,
    /// `private-key`, `ca-certificates`, `verify-peer-hostname`); unset: plain TCP.
    pub tls: Option<TlsConfig>,
    /// The cluster secret every node proves in the handshake (Erlang's cookie), for
    /// clusters without TLS; unset or blank: none. Prefer `secret-file`.
    pub secret: Option<SecretString>,
    /// A file holding the cluster secret (surrounding whitespace ignored).
    pub secret_file: Option<PathBuf>,
    /// Allow binding remoting beyond loopback with neither TLS nor a secret (false): anyone
    /// who can reach the port can then join the cluster or disturb it.
    pub insecure: bool,
    /// An inbound frame must arrive completely within this once begun ("10s").
    #[serde(deserialize_with = "duration::de")]
    pub read_timeout: Duration,
    /// Most inbound connections at once (4096), never more than half the process's
    /// file-descriptor limit.
    pub max_inbound_connections: usize,
    /// Most bytes all inbound connections hold in large frames still arriving (67108864).
    pub max_inbound_buffered_bytes: usize,
    /// Largest gossip accepted after decompression, bytes (1048576).
    pub maximum_decompressed_gossip_size: usize,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            hostname: "127.0.0.1".into(),
            port: 25520,
            bind_hostname: None,
            maximum_frame_size: 256 * 1024,
            maximum_large_frame_size: 2 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(5),
            handshake_first_byte_timeout: Duration::from_secs(1),
            max_pending_handshakes: 128,
            max_pending_handshakes_per_address: 8,
            reserved_member_handshakes: 32,
            outbound_message_queue_size: 3072,
            outbound_control_queue_size: 20_000,
            outbound_large_message_queue_size: 256,
            outbound_queue_max_bytes: 8 * 1024 * 1024,
            tls: None,
            secret: None,
            secret_file: None,
            insecure: false,
            read_timeout: Duration::from_secs(10),
            max_inbound_connections: 4096,
            max_inbound_buffered_bytes: 64 * 1024 * 1024,
            maximum_decompressed_gossip_size: 1024 * 1024,
        }
    }
}

impl RemoteConfig {
    /// The interface remoting binds: `bind-hostname`, or `hostname`.
    pub fn bind_host(&self) -> &str {
        self.bind_hostname.as_deref().unwrap_or(&self.hostname)
    }

    /// True if remoting binds only a loopback interface (`localhost`, 127.0.0.0/8, ::1).
    pub fn binds_loopback_only(&self) -> bool {
        let host = self.bind_host();
        host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    /// True if peers must authenticate: TLS or a cluster secret is configured.
    pub fn authenticates_peers(&self) -> bool {
        self.tls.is_some() || self.secret().is_some() || self.secret_file.is_some()
    }

    /// `secret`, unless unset or blank (an empty `CONCORD__REMOTE__SECRET` means none).
    fn secret(&self) -> Option<&str> {
        self.secret
            .as_ref()
            .map(|s| s.0.trim())
            .filter(|s| !s.is_empty())
    }

    /// The cluster secret of `secret` or `secret-file`, if any.
    ///
    /// # Errors
    /// Both keys set, an unreadable file, an empty secret, or one shorter than 16 bytes
    /// (128 bits) without `remote.insecure` (with it: a warning).
    pub fn cluster_secret(&self) -> Result<Option<ClusterSecret>, ConfigError> {
        let (key, value) = match (self.secret(), &self.secret_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "remote.secret-file",
                    "set either remote.secret or remote.secret-file, not both",
                ))
            }
            (Some(s), None) => ("remote.secret", s.to_string()),
            (None, Some(path)) => (
                "remote.secret-file",
                std::fs::read_to_string(path)
                    .map_err(|e| {
                        ConfigError::new(
                            "remote.secret-file",
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?
                    .trim()
                    .to_string(),
            ),
            (None, None) => return Ok(None),
        };
        if value.len() < MIN_SECRET_BYTES && !value.is_empty() {
            if !self.insecure {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "the cluster secret is {} bytes; it must be at least {MIN_SECRET_BYTES} \
                         bytes (128 bits): use a long random one (e.g. `head -c 32 /dev/urandom \
                         | base64`), or set remote.insecure = true to accept a short one",
                        value.len()
                    ),
                ));
            }
            tracing::warn!(
                key,
                "the cluster secret is shorter than {MIN_SECRET_BYTES} bytes (accepted because remote.insecure = true); use a long random one (e.g. `head -c 32 /dev/urandom | base64`)"
            );
        }
        ClusterSecret::new(value.as_bytes())
            .map(Some)
            .map_err(|e| ConfigError::new(key, e))
    }

    /// The TLS context of `[remote.tls]`, if configured (files loaded now).
    ///
    /// # Errors
    /// A file that cannot be read or used, naming the key: among them a certificate that is
    /// not a node certificate, and — with `verify-peer-hostname` in effect — one that does
    /// not name `hostname` (peers would refuse either).
    pub fn tls_context(&self) -> Result<Option<Arc<TlsContext>>, ConfigError> {
        let Some(t) = &self.tls else {
            return Ok(None);
        };
        let ctx = TlsContext::for_remoting(t)
            .map_err(|e| ConfigError::new("remote.tls", e.to_string()))?;
        if ctx.verify_peer_hostname() {
            let own = ctx.own_certificate();
            let named = own
                .as_ref()
                .map(|c| crate::tls::context::certificate_names_host(c, &self.hostname));
            if let Some(Err(_)) = named {
                return Err(ConfigError::new(
                    "remote.tls.certificate",
                    format!(
                        "{} does not name `{}`, this node's remote.hostname: peers checking \
                         host names (remote.tls.verify-peer-hostname, on by default) would \
                         refuse it. Name the host in `concord certs create-node`, or set \
                         verify-peer-hostname = false if the nodes share one certificate that \
                         cannot name their hosts",
                        t.certificate.display(),
                        self.hostname
                    ),
                ));
            }
        }
        Ok(Some(ctx))
    }

    /// The socket address to bind: `bind-hostname` (default `hostname`) and `port`.
    pub fn bind_address(&self) -> String {
        let host = self.bind_hostname.as_deref().unwrap_or(&self.hostname);
        if host.contains(':') {
            format!("[{host}]:{}", self.port)
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl Config {
    /// Warnings about this configuration's security, for the log and `GET /cluster/members`.
    pub fn security_warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if !self.remote.binds_loopback_only() && !self.remote.authenticates_peers() {
            w.push(format!(
                "remote.insecure: remoting listens on {} beyond loopback with neither TLS nor a cluster secret; anyone who reaches the port can join or disturb the cluster",
                self.remote.bind_host()
            ));
        }
        w
    }

    /// The transport settings, without the TLS context and cluster secret (which read
    /// files: see [`RemoteConfig::tls_context`] and [`RemoteConfig::cluster_secret`]).
    pub fn transport_settings(&self) -> TransportSettings {
        TransportSettings {
            maximum_frame_size: self.remote.maximum_frame_size,
            maximum_large_frame_size: self.remote.maximum_large_frame_size,
            handshake_timeout: self.remote.handshake_timeout,
            handshake_first_byte_timeout: self.remote.handshake_first_byte_timeout,
            max_pending_handshakes: self.remote.max_pending_handshakes,
            max_pending_handshakes_per_address: self.remote.max_pending_handshakes_per_address,
            reserved_member_handshakes: self.remote.reserved_member_handshakes,
            outbound_message_queue_size: self.remote.outbound_message_queue_size,
            outbound_control_queue_size: self.remote.outbound_control_queue_size,
            outbound_large_message_queue_size: self.remote.outbound_large_message_queue_size,
            outbound_queue_max_bytes: self.remote.outbound_queue_max_bytes,
            read_timeout: self.remote.read_timeout,
            max_inbound_connections: self.remote.max_inbound_connections,
            max_inbound_buffered_bytes: self.remote.max_inbound_buffered_bytes,
            maximum_decompressed_gossip_size: self.remote.maximum_decompressed_gossip_size,
            ..TransportSettings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_secret(secret: &str, insecure: bool) -> RemoteConfig {
        RemoteConfig {
            secret: Some(SecretString(secret.into())),
            insecure,
            ..RemoteConfig::default()
        }
    }

    #[test]
    fn a_secret_under_128_bits_is_refused_unless_insecure() {
        let e = with_secret("fifteen-bytes!!", false)
            .cluster_secret()
            .unwrap_err();
        assert_eq!(e.key, "remote.secret");
        assert!(e.message.contains("16 bytes"), "{e}");
        assert!(with_secret("fifteen-bytes!!", true)
            .cluster_secret()
            .unwrap()
            .is_some());
        assert!(with_secret("sixteen-bytes!!!", false)
            .cluster_secret()
            .unwrap()
            .is_some());
        // From a file: the same rule, naming the file's key.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "short\n").unwrap();
        let r = RemoteConfig {
            secret_file: Some(file),
            ..RemoteConfig::default()
        };
        assert_eq!(r.cluster_secret().unwrap_err().key, "remote.secret-file");
    }
}
