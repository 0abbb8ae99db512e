//! [`Handoffs`]: the groups one node is handing off, each with its owners and the page in
//! flight; `handoff.rs` runs the handoffs.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::kv::object::Versioned;
use crate::kv::store::Group;

/// One page in flight.
pub(crate) struct Page {
    pub(crate) id: u64,
    pub(crate) objects: Vec<(String, Versioned)>,
    pub(crate) acked: BTreeSet<UniqueAddress>,
    pub(crate) sent_ms: u64,
    /// The scan ended with this page.
    pub(crate) last: bool,
}

/// The handoff of one group.
pub(crate) struct Session {
    pub(crate) targets: Vec<UniqueAddress>,
    pub(crate) cursor: Option<Vec<u8>>,
    pub(crate) page: Option<Page>,
}

/// The handoffs of one node.
#[derive(Default)]
pub(crate) struct Handoffs {
    pub(crate) sessions: BTreeMap<Group, Session>,
    pub(crate) next_page: u64,
}

impl Handoffs {
    /// Groups being handed off, count.
    pub(crate) fn in_progress(&self) -> usize {
        self.sessions.len()
    }
}
