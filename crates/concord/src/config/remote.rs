//! `[remote]`: remoting (Akka `akka.remote.artery`).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::duration;
use super::tls::TlsConfig;

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
    pub fn secret(&self) -> Option<&str> {
        self.secret
            .as_ref()
            .map(|s| s.0.trim())
            .filter(|s| !s.is_empty())
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
