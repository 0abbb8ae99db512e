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

impl Quorum {
    /// A label for metrics: `local`, `n`, `majority`, `majority-plus`, `all`.
    fn label(self) -> &'static str {
        match self {
            Quorum::Local => "local",
            Quorum::From(_) => "n",
            Quorum::Majority { additional: 0, .. } => "majority",
            Quorum::Majority { .. } => "majority-plus",
            Quorum::All => "all",
        }
    }
}

/// The accessors both levels share, in terms of their `parts`.
macro_rules! consistency_accessors {
    ($t:ident) => {
        impl $t {
            /// Majority with the given timeout and no minimum.
            pub fn majority(timeout_ms: u64) -> Self {
                $t::Majority {
                    timeout_ms,
                    min_cap: 0,
                }
            }

            pub(crate) fn quorum(self) -> Quorum {
                self.parts().0
            }

            /// The timeout, ms (0 for local).
            pub fn timeout_ms(self) -> u64 {
                self.parts().1
            }

            /// A label for metrics: `local`, `n`, `majority`, `majority-plus`, `all`.
            pub fn label(self) -> &'static str {
                self.parts().0.label()
            }
        }
    };
}

consistency_accessors!(ReadConsistency);
consistency_accessors!(WriteConsistency);

impl ReadConsistency {
    /// The quorum and the timeout (ms).
    fn parts(self) -> (Quorum, u64) {
        match self {
            ReadConsistency::Local => (Quorum::Local, 0),
            ReadConsistency::From { n, timeout_ms } => (Quorum::From(n), timeout_ms),
            ReadConsistency::Majority {
                timeout_ms,
                min_cap,
            } => (
                Quorum::Majority {
                    additional: 0,
                    min_cap,
                },
                timeout_ms,
            ),
            ReadConsistency::MajorityPlus {
                additional,
                timeout_ms,
                min_cap,
            } => (
                Quorum::Majority {
                    additional,
                    min_cap,
                },
                timeout_ms,
            ),
            ReadConsistency::All { timeout_ms } => (Quorum::All, timeout_ms),
        }
    }
}

impl WriteConsistency {
    /// The quorum and the timeout (ms).
    fn parts(self) -> (Quorum, u64) {
        // The same levels as reads.
        let read = match self {
            WriteConsistency::Local => ReadConsistency::Local,
            WriteConsistency::To { n, timeout_ms } => ReadConsistency::From { n, timeout_ms },
            WriteConsistency::Majority {
                timeout_ms,
                min_cap,
            } => ReadConsistency::Majority {
                timeout_ms,
                min_cap,
            },
            WriteConsistency::MajorityPlus {
                additional,
                timeout_ms,
                min_cap,
            } => ReadConsistency::MajorityPlus {
                additional,
                timeout_ms,
                min_cap,
            },
            WriteConsistency::All { timeout_ms } => ReadConsistency::All { timeout_ms },
        };
        read.parts()
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
        assert_eq!(WriteConsistency::majority(5).timeout_ms(), 5);
        assert_eq!(
            ReadConsistency::MajorityPlus {
                additional: 1,
                timeout_ms: 1,
                min_cap: 0
            }
            .label(),
            "majority-plus"
        );
        assert_eq!(
            WriteConsistency::To {
                n: 2,
                timeout_ms: 1
            }
            .label(),
            "n"
        );
    }
}
