//! [`JournalSettings`]: the replicated journal's settings (`[persistence]` config,
//! docs/PERSISTENCE.md).

/// Settings of the replicated journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalSettings {
    /// Replicas of each log (Dynamo's N; 3).
    pub n: u8,
    /// Tokens per member on the ring (64, as the key-value store).
    pub virtual_nodes: u32,
    /// A request without a majority's answer by then fails as unavailable, ms (5000).
    pub request_timeout_ms: u64,
    /// Only members with this role host logs (`None`: every Up member).
    pub role: Option<String>,
    /// Logs this node remembers being the writer of (a forgotten one prepares again on
    /// its next append), count (100,000).
    pub max_writers: usize,
    /// Requests of this node in flight at once, at most (more fail at once as
    /// unavailable), count (100,000).
    pub max_in_flight: usize,
    /// Commit after every input (the simulator and tests; the runtime commits once per
    /// turn).
    pub auto_commit: bool,
    /// Events by type are read only up to this long before now, ms (2000): the time a
    /// learn takes to reach the replicas plus the clock skew between nodes
    /// ([`super::stream`]).
    pub stream_delay_ms: u64,
}

impl Default for JournalSettings {
    fn default() -> Self {
        JournalSettings {
            n: 3,
            virtual_nodes: 64,
            request_timeout_ms: 5_000,
            role: None,
            max_writers: 100_000,
            max_in_flight: 100_000,
            auto_commit: false,
            stream_delay_ms: 2_000,
        }
    }
}
