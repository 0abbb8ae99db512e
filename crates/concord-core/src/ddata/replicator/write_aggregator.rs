//! [`WriteAggregator`]: the state of a write waiting for a quorum of acks (Akka's
//! `WriteAggregator`), and [`WriteKind`], what it reports when it completes;
//! `aggregator.rs` drives it.

use std::collections::BTreeSet;

use crate::address::UniqueAddress;

use super::api::RequestId;
use super::messages::ReplicatorMessage;

/// What a write carries to the owner when it completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteKind {
    Update,
    Delete,
}

/// A write waiting for acks.
#[derive(Debug)]
pub(super) struct WriteAggregator {
    pub(super) request: RequestId,
    pub(super) key: String,
    pub(super) kind: WriteKind,
    pub(super) needed: usize,
    pub(super) secondaries: Vec<UniqueAddress>,
    pub(super) asked: BTreeSet<UniqueAddress>,
    pub(super) acks: BTreeSet<UniqueAddress>,
    pub(super) nacks: BTreeSet<UniqueAddress>,
    pub(super) message: ReplicatorMessage,
}
