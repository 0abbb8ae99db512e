//! Read and write consistency levels (Akka's `ReadLocal`, `ReadFrom`, `ReadMajority`,
//! `ReadMajorityPlus`, `ReadAll` and the `Write*` twins) and their quorum sizes.

/// How many replicas a read must hear from (this node counts as one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadConsistency {
    /// Only the local replica.
    Local,
    /// `n` replicas (including this one), within `timeout_ms`.
    From {
        /// Replicas, including this one.
        n: usize,
        /// Timeout, ms.
        timeout_ms: u64,
    },
    /// A majority: `N/2 + 1`, at least `min_cap` (capped at N), within `timeout_ms`.
    Majority {
        /// Timeout, ms.
        timeout_ms: u64,
        /// The least number of replicas for a small cluster (Akka `majority-min-cap`).
        min_cap: usize,
    },
    /// A majority plus `additional` (`N/2 + 1 + additional`, at least `min_cap`, capped
    /// at N); Exiting nodes do not count.
    MajorityPlus {
        /// Replicas beyond a majority.
        additional: usize,
        /// Timeout, ms.
        timeout_ms: u64,
        /// See [`ReadConsistency::Majority`].
        min_cap: usize,
    },
    /// Every replica (Exiting nodes excluded), within `timeout_ms`.
    All {
        /// Timeout, ms.
        timeout_ms: u64,
    },
}

/// How many replicas a write must reach (this node counts as one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteConsistency {
    /// Only the local replica; the write spreads by gossip and delta propagation.
    Local,
    /// `n` replicas (including this one), within `timeout_ms`.
    To {
        /// Replicas, including this one.
        n: usize,
        /// Timeout, ms.
        timeout_ms: u64,
    },
    /// A majority; see [`ReadConsistency::Majority`].
    Majority {
        /// Timeout, ms.
        timeout_ms: u64,
        /// See [`ReadConsistency::Majority`].
        min_cap: usize,
    },
    /// A majority plus `additional`; see [`ReadConsistency::MajorityPlus`].
    MajorityPlus {
        /// Replicas beyond a majority.
        additional: usize,
        /// Timeout, ms.
        timeout_ms: u64,
        /// See [`ReadConsistency::Majority`].
        min_cap: usize,
    },
    /// Every replica (Exiting nodes excluded).
    All {
        /// Timeout, ms.
        timeout_ms: u64,
    },
}

/// The common shape of both: what a read or write must reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Quorum {
    Local,
    From(usize),
    Majority { additional: usize, min_cap: usize },
    All,
}

impl Quorum {
    /// True if Exiting nodes are left out (Akka: the `*Plus` and `*All` levels).
    pub(crate) fn skips_exiting(self) -> bool {
        matches!(
            self,
            Quorum::All
                | Quorum::Majority {
                    additional: 1..,
                    ..
                }
        )
    }

    /// Replicas needed out of `n` (this node included): Akka's
    /// `min(N, max(N/2 + 1 + additional, min_cap))` for majorities.
    pub(crate) fn needed(self, n: usize) -> usize {
        match self {
            Quorum::Local => 1,
            Quorum::From(k) => k.max(1),
            Quorum::Majority {
                additional,
                min_cap,
            } => (n / 2 + 1).saturating_add(additional).max(min_cap).min(n),
            Quorum::All => n,
        }
    }
}

impl ReadConsistency {
    /// Majority with the given timeout and no minimum.
    pub fn majority(timeout_ms: u64) -> Self {
        ReadConsistency::Majority {
            timeout_ms,
            min_cap: 0,
        }
    }

    pub(crate) fn quorum(self) -> Quorum {
        match self {
            ReadConsistency::Local => Quorum::Local,
            ReadConsistency::From { n, .. } => Quorum::From(n),
            ReadConsistency::Majority { min_cap, .. } => Quorum::Majority {
                additional: 0,
                min_cap,
            },
            ReadConsistency::MajorityPlus {
                additional,
                min_cap,
                ..
            } => Quorum::Majority {
                additional,
                min_cap,
            },
            ReadConsistency::All { .. } => Quorum::All,
        }
    }

    /// The timeout, ms (0 for local).
    pub fn timeout_ms(self) -> u64 {
        match self {
            ReadConsistency::Local => 0,
            ReadConsistency::From { timeout_ms, .. }
            | ReadConsistency::Majority { timeout_ms, .. }
            | ReadConsistency::MajorityPlus { timeout_ms, .. }
            | ReadConsistency::All { timeout_ms } => timeout_ms,
        }
    }

    /// A label for metrics: `local`, `from`, `majority`, `majority-plus`, `all`.
    pub fn label(self) -> &'static str {
        match self {
            ReadConsistency::Local => "local",
            ReadConsistency::From { .. } => "from",
            ReadConsistency::Majority { .. } => "majority",
            ReadConsistency::MajorityPlus { .. } => "majority-plus",
            ReadConsistency::All { .. } => "all",
        }
    }
}

impl WriteConsistency {
    /// Majority with the given timeout and no minimum.
    pub fn majority(timeout_ms: u64) -> Self {
        WriteConsistency::Majority {
            timeout_ms,
            min_cap: 0,
        }
    }

    pub(crate) fn quorum(self) -> Quorum {
        match self {
            WriteConsistency::Local => Quorum::Local,
            WriteConsistency::To { n, .. } => Quorum::From(n),
            WriteConsistency::Majority { min_cap, .. } => Quorum::Majority {
                additional: 0,
                min_cap,
            },
            WriteConsistency::MajorityPlus {
                additional,
                min_cap,
                ..
            } => Quorum::Majority {
                additional,
                min_cap,
            },
            WriteConsistency::All { .. } => Quorum::All,
        }
    }

    /// The timeout, ms (0 for local).
    pub fn timeout_ms(self) -> u64 {
        match self {
            WriteConsistency::Local => 0,
            WriteConsistency::To { timeout_ms, .. }
            | WriteConsistency::Majority { timeout_ms, .. }
            | WriteConsistency::MajorityPlus { timeout_ms, .. }
            | WriteConsistency::All { timeout_ms } => timeout_ms,
        }
    }

    /// A label for metrics: `local`, `to`, `majority`, `majority-plus`, `all`.
    pub fn label(self) -> &'static str {
        match self {
            WriteConsistency::Local => "local",
            WriteConsistency::To { .. } => "to",
            WriteConsistency::Majority { .. } => "majority",
            WriteConsistency::MajorityPlus { .. } => "majority-plus",
            WriteConsistency::All { .. } => "all",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quorum_sizes_follow_akka() {
        let m = |additional, min_cap| Quorum::Majority {
            additional,
            min_cap,
        };
        assert_eq!(m(0, 0).needed(5), 3);
        assert_eq!(m(0, 0).needed(4), 3);
        assert_eq!(m(0, 0).needed(1), 1);
        assert_eq!(m(1, 0).needed(5), 4);
        assert_eq!(m(0, 5).needed(3), 3, "min-cap is capped at N");
        assert_eq!(m(0, 5).needed(7), 5);
        assert_eq!(m(0, 5).needed(20), 11);
        assert_eq!(m(usize::MAX, 0).needed(3), 3, "no overflow");
        assert_eq!(Quorum::All.needed(4), 4);
        assert_eq!(Quorum::From(2).needed(9), 2);
        assert!(Quorum::All.skips_exiting());
        assert!(m(1, 0).skips_exiting());
        assert!(!m(0, 0).skips_exiting());
    }
}
