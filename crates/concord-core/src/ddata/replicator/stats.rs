//! [`ReplicatorStats`]: the replicator's counters an operator watches.

/// Counters an operator watches (exported as metrics by the runtime).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicatorStats {
    /// `Status` messages sent.
    pub status_sent: u64,
    /// Envelopes sent in `Gossip` messages.
    pub gossip_entries_sent: u64,
    /// Envelopes merged from `Gossip` messages.
    pub gossip_entries_received: u64,
    /// Deltas sent (one per key and sequence number and node).
    pub deltas_sent: u64,
    /// Deltas applied.
    pub deltas_applied: u64,
    /// Gaps seen in delta sequences (each answered by a full state).
    pub delta_nacks: u64,
    /// Read-repair writes sent to stale replicas.
    pub read_repairs: u64,
    /// Reads that did not reach their consistency in time.
    pub read_timeouts: u64,
    /// Writes (updates, deletes) that did not reach their consistency in time.
    pub write_timeouts: u64,
    /// Values of a type this node has not registered (dropped).
    pub unknown_types: u64,
    /// Values that did not decode, or did not merge (type mismatch) (dropped).
    pub bad_values: u64,
    /// Values larger than `max-value-bytes` (kept local, not replicated).
    pub too_large: u64,
    /// New keys refused because `max-keys` was reached.
    pub keys_refused: u64,
    /// Pruning of a removed replica performed on a key.
    pub pruning_performed: u64,
}
