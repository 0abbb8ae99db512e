//! [`SingletonTimer`]: the timers of one singleton's manager and proxy, kept in the shared
//! [`crate::outputs::Outputs`] timer table (deadlines in ms).

use crate::address::UniqueAddress;

/// The singleton machine's timers (the manager's, then the proxy's).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SingletonTimer {
    /// Hand-over (or take-over) retry (Akka's `HandOverRetry` / `TakeOverRetry`).
    Retry,
    /// A removed member counts as gone from now on (Akka's `DelayedMemberRemoved`).
    DelayedMemberRemoved(UniqueAddress),
    /// Retry acquiring the lease (Akka's `LeaseRetry`).
    LeaseRetry,
    /// Forget removed members remembered for 15 minutes (Akka's `Cleanup`).
    CleanupRemoved,
    /// The proxy's identification (`ClusterSingletonProxy`'s `TryToIdentifySingleton`).
    Identify,
}
