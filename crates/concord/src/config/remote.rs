//! `[remote]`: remoting (Akka `akka.remote.artery`).

use std::time::Duration;

use serde::Deserialize;

use super::{duration, Config};
use crate::remote::TransportSettings;

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
    /// Messages queued per peer on the ordinary lane (3072).
    pub outbound_message_queue_size: usize,
    /// Messages queued per peer on the control lane (20000).
    pub outbound_control_queue_size: usize,
    /// Messages queued per peer on the large lane (256).
    pub outbound_large_message_queue_size: usize,
    /// Most bytes queued per peer and lane (8388608); a lane's queue holds at least one
    /// frame of its limit.
    pub outbound_queue_max_bytes: usize,
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
            outbound_message_queue_size: 3072,
            outbound_control_queue_size: 20_000,
            outbound_large_message_queue_size: 256,
            outbound_queue_max_bytes: 8 * 1024 * 1024,
        }
    }
}

impl RemoteConfig {
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
    /// The transport settings.
    pub fn transport_settings(&self) -> TransportSettings {
        TransportSettings {
            maximum_frame_size: self.remote.maximum_frame_size,
            maximum_large_frame_size: self.remote.maximum_large_frame_size,
            handshake_timeout: self.remote.handshake_timeout,
            outbound_message_queue_size: self.remote.outbound_message_queue_size,
            outbound_control_queue_size: self.remote.outbound_control_queue_size,
            outbound_large_message_queue_size: self.remote.outbound_large_message_queue_size,
            outbound_queue_max_bytes: self.remote.outbound_queue_max_bytes,
            ..TransportSettings::default()
        }
    }
}
