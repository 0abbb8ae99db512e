//! [`SbrDecisionRecord`]: a split brain resolver decision a node carried out, and how many
//! of the latest it keeps ([`SBR_DECISIONS_KEPT`]).

use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::split_brain_resolver::{Decision, DecisionCause};

/// How many recent resolver decisions a node keeps for inspection.
pub const SBR_DECISIONS_KEPT: usize = 16;

/// A split brain resolver decision this node carried out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbrDecisionRecord {
    /// When, ms.
    pub at_ms: u64,
    /// The decision.
    pub decision: Decision,
    /// The members it marked Down.
    pub nodes: BTreeSet<UniqueAddress>,
    /// Why it was taken.
    pub cause: DecisionCause,
}
