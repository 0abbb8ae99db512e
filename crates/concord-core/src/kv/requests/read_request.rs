//! [`ReadRequest`]: a read in progress, its targets and what each answered.

use crate::address::UniqueAddress;
use crate::kv::api::WriteOptions;
use crate::kv::object::Versioned;

use super::outcome::Outcome;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum ReadState {
    Waiting,
    Replied {
        object: Option<Versioned>,
        complete: bool,
    },
    Failed(String),
}

pub(crate) struct ReadTarget {
    pub(crate) node: UniqueAddress,
    pub(crate) primary: bool,
    pub(crate) state: ReadState,
}

/// What a read is for.
#[derive(Clone, Copy)]
pub(crate) enum Then {
    /// Answer the client.
    Answer,
    /// A delete without a context: write a tombstone over what the read found.
    Delete(WriteOptions),
}

pub(crate) struct ReadRequest {
    pub(crate) client: u64,
    pub(crate) key: String,
    pub(crate) needed: u8,
    pub(crate) primaries: Vec<UniqueAddress>,
    pub(crate) targets: Vec<ReadTarget>,
    pub(crate) answered: bool,
    pub(crate) deadline: u64,
    pub(crate) then: Then,
}

/// The merge of every version the replicas answered.
pub(crate) fn merge_replies(targets: &[ReadTarget]) -> Option<Versioned> {
    targets
        .iter()
        .filter_map(|t| match &t.state {
            ReadState::Replied {
                object: Some(o), ..
            } => Some(o),
            _ => None,
        })
        .fold(None::<Versioned>, |acc, o| {
            Some(match acc {
                Some(mut a) => {
                    a.merge(o);
                    a
                }
                None => o.clone(),
            })
        })
}

impl ReadTarget {
    pub(crate) fn outcome(&self, sloppy: bool) -> Outcome {
        match &self.state {
            ReadState::Replied {
                object: Some(_), ..
            } if self.primary || sloppy => Outcome::Counted,
            ReadState::Replied {
                object: None,
                complete: true,
            } if self.primary => Outcome::Counted,
            ReadState::Replied { .. } => Outcome::Uncounted,
            ReadState::Failed(why) => Outcome::Failed(why.clone()),
            ReadState::Waiting => Outcome::Waiting,
        }
    }
}
