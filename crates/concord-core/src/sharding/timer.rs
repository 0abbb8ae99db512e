//! The sharding machine's timers, kept in its one [`crate::timers::TimerTable`].

use crate::address::UniqueAddress;

/// The machine's timers.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum ShardingTimer {
    /// Region: send `Register` again (back-off).
    Register,
    /// Region: ask again for the homes of buffered shards.
    RetryShardHomes,
    /// Coordinator: look for shards to rebalance.
    Rebalance,
    /// Coordinator: a removed region's margin has passed.
    RegionTerminated(UniqueAddress),
    /// Once a second: timeouts of handoffs, `HostShard` re-sends, queries.
    Housekeeping,
    /// Passivate idle entities.
    Passivation,
    /// Start the next batch of remembered entities.
    Recovery,
}

/// Period of [`ShardingTimer::Housekeeping`], ms.
pub(super) const HOUSEKEEPING_MS: u64 = 1_000;
