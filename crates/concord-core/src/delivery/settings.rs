//! [`DeliverySettings`]: the knobs of reliable delivery, with Akka's defaults
//! (`akka.reliable-delivery` in Akka's `reference.conf`; research notes §2.2).

/// Settings of producer and consumer controllers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliverySettings {
    /// Messages a consumer lets a producer send beyond the last one it confirmed
    /// (Akka's `consumer-controller.flow-control-window`, 50). A slow consumer's
    /// confirmations come slowly, so its producer waits instead of filling its mailbox.
    pub flow_control_window: u32,
    /// First resend after this long without a confirmation, ms (Akka's
    /// `resend-interval-min`, 2 s).
    pub resend_interval_min_ms: u64,
    /// The resend interval doubles while nothing is confirmed, up to this, ms (Akka's
    /// `resend-interval-max`, 30 s).
    pub resend_interval_max_ms: u64,
    /// Messages a producer holds unconfirmed at most, over all its consumers (Akka's
    /// `sharding.producer-controller.buffer-size`, 1000); a `send` beyond it is refused.
    pub buffer_size: u32,
    /// A sharded producer forgets an entity's controller after this long with nothing
    /// unconfirmed, ms (Akka's `cleanup-unused-after`, 120 s); the next message to that
    /// entity starts a new one (a new incarnation, numbered from 1).
    pub cleanup_unused_after_ms: u64,
    /// Producers a consumer remembers (the highest sequence number delivered of each); the
    /// least recently seen is forgotten beyond it (a message of a forgotten producer that
    /// was delivered but not confirmed may then be delivered again: counted).
    pub max_producers_per_consumer: u32,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        DeliverySettings {
            flow_control_window: 50,
            resend_interval_min_ms: 2_000,
            resend_interval_max_ms: 30_000,
            buffer_size: 1_000,
            cleanup_unused_after_ms: 120_000,
            max_producers_per_consumer: 1_000,
        }
    }
}

impl DeliverySettings {
    /// The window, at least 1.
    pub fn window(&self) -> u64 {
        u64::from(self.flow_control_window.max(1))
    }
}
