//! [`ReadAggregator`]: the state of a read waiting for a quorum of replies (Akka's
//! `ReadAggregator`); `aggregator.rs` drives it.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;

use super::api::RequestId;
use super::envelope::DataEnvelope;

/// A read waiting for replies.
#[derive(Debug)]
pub(super) struct ReadAggregator {
    pub(super) request: RequestId,
    pub(super) key: String,
    pub(super) needed: usize,
    pub(super) secondaries: Vec<UniqueAddress>,
    pub(super) asked: BTreeSet<UniqueAddress>,
    /// Replies: the envelope (or `None`) and its digest.
    pub(super) replies: BTreeMap<UniqueAddress, Option<DataEnvelope>>,
    /// Answered to the owner (the aggregator stays to repair late replies).
    pub(super) answered: bool,
}
