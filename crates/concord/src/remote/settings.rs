//! [`TransportSettings`]: the knobs of remoting (`[remote]` in the configuration), with
//! Akka Artery's defaults where Artery has the same knob.

use std::sync::Arc;
use std::time::Duration;

use concord_core::Lane;

use super::cluster_secret::ClusterSecret;
use super::codec::DEFAULT_MAX_DECOMPRESSED_GOSSIP_BYTES;
use crate::config::RemoteConfig;
use crate::tls::TlsContext;

/// Transport settings.
#[derive(Clone, Debug)]
pub struct TransportSettings {
    /// TLS 1.3 with mutual authentication on every lane (`[remote.tls]`); `None`: plain TCP.
    pub tls: Option<Arc<TlsContext>>,
    /// The cluster secret proven in every handshake (`remote.secret`); `None`: no secret.
    pub secret: Option<ClusterSecret>,
    /// An inbound frame must arrive completely within this once its first byte has (default
    /// 10 s); an inbound connection that brings no frame for `2 × idle_timeout` is closed
    /// too. Either closes only that connection (counted).
    pub read_timeout: Duration,
    /// Most inbound connections at once, handshakes included (default 4096; never more
    /// than half the process's file-descriptor limit, so the rest of the node — the
    /// management API, outbound lanes, storage — always has descriptors). More are closed
    /// at once and counted.
    pub max_inbound_connections: usize,
    /// Most inbound connections from one peer address (default 8: three lanes and their
    /// reconnections).
    pub max_inbound_connections_per_peer: usize,
    /// Most inbound connections in their handshake at once from addresses that are not
    /// members' (default 128); each has `handshake_first_byte_timeout` to send its first
    /// byte and `handshake_timeout` to finish.
    pub max_pending_handshakes: usize,
    /// Most inbound connections in their handshake at once from one source address that is
    /// not a member's (default 8: a node opens three lanes, and a few more while
    /// reconnecting). More are closed at accept and counted.
    pub max_pending_handshakes_per_address: usize,
    /// Handshake places beyond `max_pending_handshakes` that only the source addresses of
    /// current members may take, without a per-address limit (default 32): a flood of
    /// strangers never keeps a member — or a member restarted on its address — out.
    pub reserved_member_handshakes: usize,
    /// An inbound connection must send the first byte of its handshake within this of its
    /// accept (default 1 s), or it is closed and counted as a handshake timeout; at most
    /// `handshake_timeout`.
    pub handshake_first_byte_timeout: Duration,
    /// Most bytes all inbound connections together hold beyond [`READ_BUFFER_BYTES`] each
    /// — frames larger than that still arriving — default 64 MiB. A connection that needs
    /// more when the budget is spent is closed and counted.
    pub max_inbound_buffered_bytes: usize,
    /// Largest gossip accepted after decompression, bytes (default 1 MiB).
    pub maximum_decompressed_gossip_size: usize,
    /// Largest frame on the control and ordinary lanes, bytes (default 256 KiB, Artery's
    /// `maximum-frame-size`). A larger message travels on the large lane.
    pub maximum_frame_size: usize,
    /// Largest frame on the large lane, bytes (default 2 MiB, Artery's
    /// `maximum-large-frame-size`). A larger message is dropped and counted.
    pub maximum_large_frame_size: usize,
    /// Time allowed for the handshake (Artery: 20 s; default 5 s).
    pub handshake_timeout: Duration,
    /// Messages queued per peer on the control lane (default 20000, Artery's
    /// `outbound-control-queue-size`); more are dropped and counted.
    pub outbound_control_queue_size: usize,
    /// Messages queued per peer on the ordinary lane (default 3072, Artery's
    /// `outbound-message-queue-size`).
    pub outbound_message_queue_size: usize,
    /// Messages queued per peer on the large lane (default 256, Artery's
    /// `outbound-large-message-queue-size`).
    pub outbound_large_message_queue_size: usize,
    /// First reconnect delay (default 100 ms), doubled up to `connect_backoff_max`.
    pub connect_backoff_min: Duration,
    /// Largest reconnect delay (default 2 s).
    pub connect_backoff_max: Duration,
    /// An association with nothing to send for this long is closed (default 5 min,
    /// Artery's `stop-idle-outbound-after`).
    pub idle_timeout: Duration,
    /// Initial capacity of a lane's buffer, bytes (default 64 KiB); it grows with the
    /// traffic up to the queue's bounds.
    pub lane_buffer_bytes: usize,
    /// Most bytes of frames queued per peer and lane (default 8 MiB); with the frame count
    /// (`outbound-*-queue-size`) this bounds the memory a slow peer can hold, whatever the
    /// message sizes.
    pub outbound_queue_max_bytes: usize,
    /// Inbound messages queued per registered protocol before the connection is slowed
    /// down (backpressure), messages (default 4096).
    pub inbound_queue_size: usize,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            maximum_frame_size: 256 * 1024,
            maximum_large_frame_size: 2 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(5),
            outbound_control_queue_size: 20_000,
            outbound_message_queue_size: 3072,
            outbound_large_message_queue_size: 256,
            connect_backoff_min: Duration::from_millis(100),
            connect_backoff_max: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(300),
            lane_buffer_bytes: 64 * 1024,
            outbound_queue_max_bytes: 8 * 1024 * 1024,
            inbound_queue_size: 4096,
            tls: None,
            secret: None,
            read_timeout: Duration::from_secs(10),
            max_inbound_connections: 4096,
            max_inbound_connections_per_peer: 8,
            max_pending_handshakes: 128,
            max_pending_handshakes_per_address: 8,
            reserved_member_handshakes: 32,
            handshake_first_byte_timeout: Duration::from_secs(1),
            max_inbound_buffered_bytes: 64 * 1024 * 1024,
            maximum_decompressed_gossip_size: DEFAULT_MAX_DECOMPRESSED_GOSSIP_BYTES,
        }
    }
}

/// The read buffer a busy inbound connection keeps, bytes; only what a connection holds
/// beyond this counts against `max_inbound_buffered_bytes`.
pub const READ_BUFFER_BYTES: usize = 64 * 1024;

impl TransportSettings {
    /// True if peers are authenticated (TLS or the cluster secret).
    pub fn authenticates_peers(&self) -> bool {
        self.tls.is_some() || self.secret.is_some()
    }

    /// The frame limit of `lane`, bytes.
    pub fn frame_limit(&self, lane: Lane) -> usize {
        match lane {
            Lane::Control | Lane::Ordinary => self.maximum_frame_size,
            Lane::Large => self.maximum_large_frame_size,
        }
    }

    /// The outbound queue size of `lane`, messages.
    pub fn queue_size(&self, lane: Lane) -> usize {
        match lane {
            Lane::Control => self.outbound_control_queue_size,
            Lane::Ordinary => self.outbound_message_queue_size,
            Lane::Large => self.outbound_large_message_queue_size,
        }
        .max(1)
    }
}

impl TransportSettings {
    /// The transport settings of `[remote]`, without the TLS context and cluster secret
    /// (which read files: see [`TlsContext::for_remote_config`] and
    /// [`ClusterSecret::from_config`]).
    pub fn from_config(remote: &RemoteConfig) -> TransportSettings {
        TransportSettings {
            maximum_frame_size: remote.maximum_frame_size,
            maximum_large_frame_size: remote.maximum_large_frame_size,
            handshake_timeout: remote.handshake_timeout,
            handshake_first_byte_timeout: remote.handshake_first_byte_timeout,
            max_pending_handshakes: remote.max_pending_handshakes,
            max_pending_handshakes_per_address: remote.max_pending_handshakes_per_address,
            reserved_member_handshakes: remote.reserved_member_handshakes,
            outbound_message_queue_size: remote.outbound_message_queue_size,
            outbound_control_queue_size: remote.outbound_control_queue_size,
            outbound_large_message_queue_size: remote.outbound_large_message_queue_size,
            outbound_queue_max_bytes: remote.outbound_queue_max_bytes,
            read_timeout: remote.read_timeout,
            max_inbound_connections: remote.max_inbound_connections,
            max_inbound_buffered_bytes: remote.max_inbound_buffered_bytes,
            maximum_decompressed_gossip_size: remote.maximum_decompressed_gossip_size,
            ..TransportSettings::default()
        }
    }
}
