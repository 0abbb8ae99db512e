//! [`SingletonSettings`]: Akka's `akka.cluster.singleton` and `singleton-proxy` settings,
//! same defaults.

/// Settings of one named singleton (manager and proxy). Durations in ms.
#[derive(Clone, Debug, PartialEq)]
pub struct SingletonSettings {
    /// The singleton's name (Akka `singleton-name`, "singleton").
    pub name: String,
    /// Run it only on members with this role (`None`: any member).
    pub role: Option<String>,
    /// How often the new oldest asks the previous one to hand over, ms (Akka 1 s).
    pub hand_over_retry_interval_ms: u64,
    /// Least number of hand-over retries (Akka 15); the retries are
    /// `max(this, removal-margin / interval + 3)`, take-over retries 3 fewer.
    pub min_number_of_hand_over_retries: u32,
    /// How long after a crashed oldest's removal the new oldest waits before it starts
    /// the instance, ms: the time the removed node needs to notice and stop (Akka: the
    /// downing provider's `down-removal-margin`; Concord's node sets it to the split brain
    /// resolver's `stable-after` when that is on).
    pub removal_margin_ms: u64,
    /// Start the instance only while holding a lease (Akka `use-lease`).
    pub use_lease: bool,
    /// How often to retry acquiring the lease, ms (Akka 5 s).
    pub lease_retry_interval_ms: u64,
    /// The proxy's identification of the instance, ms (Akka 1 s).
    pub singleton_identification_interval_ms: u64,
    /// Messages the proxy buffers while the instance is unknown, count (Akka 1000; 0
    /// drops at once). When full, the oldest is dropped and counted.
    pub buffer_size: usize,
}

impl Default for SingletonSettings {
    fn default() -> Self {
        SingletonSettings {
            name: "singleton".into(),
            role: None,
            hand_over_retry_interval_ms: 1_000,
            min_number_of_hand_over_retries: 15,
            removal_margin_ms: 0,
            use_lease: false,
            lease_retry_interval_ms: 5_000,
            singleton_identification_interval_ms: 1_000,
            buffer_size: 1_000,
        }
    }
}

impl SingletonSettings {
    /// Most hand-over retries: `max(min, removal-margin / interval + 3)`.
    pub fn max_hand_over_retries(&self) -> u32 {
        let by_margin = self.removal_margin_ms / self.hand_over_retry_interval_ms.max(1) + 3;
        self.min_number_of_hand_over_retries
            .max(u32::try_from(by_margin).unwrap_or(u32::MAX))
    }

    /// Most take-over retries: three fewer than hand-over retries.
    pub fn max_take_over_retries(&self) -> u32 {
        self.max_hand_over_retries().saturating_sub(3)
    }
}
