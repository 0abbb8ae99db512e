//! [`WriteRequest`]: a write in progress, its targets and which of them acknowledged.

use crate::address::UniqueAddress;
use crate::kv::object::Versioned;

use super::outcome::{Client, Outcome};

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum TargetState {
    Waiting,
    Acked,
    Failed(String),
}

pub(crate) struct WriteTarget {
    pub(crate) node: UniqueAddress,
    pub(crate) primary: bool,
    pub(crate) state: TargetState,
}

pub(crate) struct WriteRequest {
    pub(crate) client: Client,
    pub(crate) key: String,
    /// The version after the write (its clock is what a reap of a tombstone needs).
    pub(crate) object: Versioned,
    pub(crate) needed: u8,
    /// The key's whole preference list (for reaping a tombstone every primary has).
    pub(crate) primaries: Vec<UniqueAddress>,
    pub(crate) targets: Vec<WriteTarget>,
    pub(crate) answered: bool,
    pub(crate) deadline: u64,
}

impl WriteTarget {
    pub(crate) fn outcome(&self, sloppy: bool) -> Outcome {
        match &self.state {
            TargetState::Acked if self.primary || sloppy => Outcome::Counted,
            TargetState::Acked => Outcome::Uncounted,
            TargetState::Failed(why) => Outcome::Failed(why.clone()),
            TargetState::Waiting => Outcome::Waiting,
        }
    }
}
