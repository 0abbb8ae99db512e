//! [`TransportSettings`]: the knobs of remoting (`[remote]` in the configuration), with
//! Akka Artery's defaults where Artery has the same knob.

use std::time::Duration;

use concord_core::Lane;

/// Transport settings.
#[derive(Clone, Debug)]
pub struct TransportSettings {
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
        }
    }
}

impl TransportSettings {
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
