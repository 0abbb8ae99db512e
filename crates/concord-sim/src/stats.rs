//! [`SimStats`]: the counters of one simulated run.

/// Counters of one run.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimStats {
    /// Messages handed to the network.
    pub sent: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Full gossip envelopes delivered.
    pub gossip_envelopes: u64,
    /// Gossip status messages delivered.
    pub gossip_status: u64,
    /// Messages of hosted protocols delivered.
    pub protocol_delivered: u64,
    /// Messages of a protocol the receiver does not run, or of a type it does not know:
    /// dropped, like the runtime drops them.
    pub unknown_dropped: u64,
    /// Messages refused because their sender is quarantined by the receiver.
    pub quarantine_refused: u64,
}
