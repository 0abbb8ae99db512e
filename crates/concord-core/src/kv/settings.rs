//! [`KvSettings`]: the key-value store's configuration (`[kv]`), with Riak KV's defaults
//! where Riak has one (N = 3, R = W = quorum) and [`Quorum`], how many replicas a request
//! waits for.

use crate::kv::object::MAX_N;

/// How many replicas a read or write waits for (Riak's `r`/`w` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quorum {
    /// One replica.
    One,
    /// A majority of the `n` replicas: `n / 2 + 1`.
    Quorum,
    /// All `n` replicas.
    All,
    /// This many (1..=`n`).
    Count(u8),
}

impl Quorum {
    /// The number of replicas for replication factor `n`; `None` if it is 0 or above `n`.
    pub fn resolve(self, n: u8) -> Option<u8> {
        let k = match self {
            Quorum::One => 1,
            Quorum::Quorum => n / 2 + 1,
            Quorum::All => n,
            Quorum::Count(k) => k,
        };
        (k >= 1 && k <= n).then_some(k)
    }

    /// Parses `one`, `quorum`, `all` or a number.
    ///
    /// # Errors
    /// Anything else.
    pub fn parse(s: &str) -> Result<Quorum, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "one" => Ok(Quorum::One),
            "quorum" => Ok(Quorum::Quorum),
            "all" => Ok(Quorum::All),
            other => other
                .parse::<u8>()
                .ok()
                .filter(|k| (1..=MAX_N).contains(k))
                .map(Quorum::Count)
                .ok_or_else(|| {
                    format!("`{s}` is not one, quorum, all or a number from 1 to {MAX_N}")
                }),
        }
    }
}

impl std::fmt::Display for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Quorum::One => f.write_str("one"),
            Quorum::Quorum => f.write_str("quorum"),
            Quorum::All => f.write_str("all"),
            Quorum::Count(k) => write!(f, "{k}"),
        }
    }
}

/// The store's settings; see docs/KV_STORE.md and docs/CONFIGURATION.md (`[kv]`).
#[derive(Clone, Debug, PartialEq)]
pub struct KvSettings {
    /// Default replication factor N (`kv.n`, 3).
    pub n: u8,
    /// Default read quorum R (`kv.r`, quorum).
    pub r: Quorum,
    /// Default write quorum W (`kv.w`, quorum).
    pub w: Quorum,
    /// Count acknowledgements of fallback replicas (hinted writes) towards W, and their
    /// answers towards R (`kv.sloppy-quorum`, off: W and R count primaries only; hinted
    /// writes are made and handed back either way).
    pub sloppy_quorum: bool,
    /// A request's deadline, ms (`kv.request-timeout`, 5 s).
    pub request_timeout_ms: u64,
    /// Largest value, bytes (`kv.max-value-size`, 512 KiB).
    pub max_value_bytes: usize,
    /// Largest object — a value's siblings together — a write may make, bytes
    /// (`kv.max-object-size`, 1.5 MiB; must fit `remote.maximum-large-frame-size`).
    pub max_object_bytes: usize,
    /// Longest key, bytes (1024).
    pub max_key_bytes: usize,
    /// How long after every replica acknowledged a delete its tombstone is removed, ms
    /// (`kv.tombstone-grace`, 10 s).
    pub tombstone_grace_ms: u64,
    /// Interval of anti-entropy exchanges with each peer, ms (`kv.anti-entropy-interval`,
    /// 1 s); exchanges that find differences are followed at once by the next.
    pub anti_entropy_interval_ms: u64,
    /// Groups of keys handed off at once (`kv.handoff-concurrency`, 2).
    pub handoff_concurrency: usize,
    /// Values per transfer message, bytes (`kv.transfer-batch-size`, 1 MiB).
    pub transfer_batch_bytes: usize,
    /// Tokens per member on the ring (`kv.virtual-nodes`, 64; the same on every node).
    pub virtual_nodes: u32,
    /// Only members with this role hold data (`kv.role`; all members when unset).
    pub role: Option<String>,
    /// Requests coordinated at once; more are refused as overloaded
    /// (`kv.max-pending-requests`, 10 000).
    pub max_pending_requests: usize,
    /// Commit after every input instead of when the runtime calls
    /// [`crate::kv::KvMachine::commit`] (the simulator and tests).
    pub auto_commit: bool,
}

impl Default for KvSettings {
    fn default() -> Self {
        KvSettings {
            n: 3,
            r: Quorum::Quorum,
            w: Quorum::Quorum,
            sloppy_quorum: false,
            request_timeout_ms: 5_000,
            max_value_bytes: 512 * 1024,
            max_object_bytes: 3 * 512 * 1024,
            max_key_bytes: 1_024,
            tombstone_grace_ms: 10_000,
            anti_entropy_interval_ms: 1_000,
            handoff_concurrency: 2,
            transfer_batch_bytes: 1024 * 1024,
            virtual_nodes: 64,
            role: None,
            max_pending_requests: 10_000,
            auto_commit: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorums() {
        assert_eq!(Quorum::Quorum.resolve(3), Some(2));
        assert_eq!(Quorum::Quorum.resolve(4), Some(3));
        assert_eq!(Quorum::Quorum.resolve(1), Some(1));
        assert_eq!(Quorum::All.resolve(5), Some(5));
        assert_eq!(Quorum::One.resolve(3), Some(1));
        assert_eq!(Quorum::Count(4).resolve(3), None);
        assert_eq!(Quorum::Count(0).resolve(3), None);
        assert_eq!(Quorum::parse("QUORUM"), Ok(Quorum::Quorum));
        assert_eq!(Quorum::parse("2"), Ok(Quorum::Count(2)));
        assert!(Quorum::parse("0").is_err());
        assert!(Quorum::parse("10").is_err());
        assert!(Quorum::parse("most").is_err());
        assert_eq!(Quorum::parse(&Quorum::All.to_string()), Ok(Quorum::All));
    }
}
