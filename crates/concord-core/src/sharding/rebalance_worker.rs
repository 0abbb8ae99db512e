//! The coordinator's side of one handoff: a rebalance worker (Akka's `RebalanceWorker`,
//! reshaped for Concord's order-preserving handoff; the steps are in [`super::rebalance`]).

use std::collections::BTreeSet;

use crate::address::UniqueAddress;

/// Where a handoff worker is (one per shard moving).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum WorkerPhase {
    /// `HostShard { handoff_from }` sent to the new home; waiting for `ShardStarted`.
    WaitingStarted,
    /// `HandOff` sent to the old home; waiting for `ShardStopped`.
    WaitingStopped,
    /// Writing the new home (or the deallocation).
    Writing,
}

/// The coordinator's side of one handoff (Akka's `RebalanceWorker`).
#[derive(Clone, Debug)]
pub(super) struct Worker {
    /// The shard's old home.
    pub(super) from: UniqueAddress,
    /// Its new home (None: the shard is only stopped, and deallocated).
    pub(super) to: Option<UniqueAddress>,
    pub(super) phase: WorkerPhase,
    /// When a phase that waits gives up (`WaitingStarted`) or asks again for good measure,
    /// ms.
    pub(super) deadline_ms: u64,
    /// When the phase's request is sent again (messages between live nodes are not lost
    /// on TCP, but a connection can drop), ms.
    pub(super) resend_ms: u64,
    /// Started by a graceful shutdown (not counted as a rebalance).
    pub(super) graceful: bool,
    /// Regions that asked for the shard's home meanwhile.
    pub(super) deferred: BTreeSet<UniqueAddress>,
}
