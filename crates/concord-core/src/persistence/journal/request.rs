//! A proposer's requests in flight: what each asked, which replicas answered and how.

use std::collections::BTreeMap;

use super::chain::Answer;
use super::entry::{Ballot, Entry, StoredSnapshot};
use super::unable::UnableReason;
use crate::address::UniqueAddress;

/// What a caller asked.
#[derive(Debug, Clone)]
pub enum Op {
    /// Become the log's writer and read from `from` (with `snapshot`: from the newest
    /// snapshot's next number if that is later, the snapshot answered too).
    Recover {
        /// First sequence number of the page.
        from: u64,
        /// Events of the page, at most.
        max_events: u32,
        /// Load the newest snapshot in the same round.
        snapshot: bool,
    },
    /// Append `write` (its ballot is the writer's).
    Append {
        /// The write.
        write: Entry,
        /// Durable state: keep only the newest write.
        compact: bool,
    },
    /// Read from `from` up to `to`.
    Read {
        /// First sequence number.
        from: u64,
        /// Last sequence number wanted.
        to: u64,
        /// Events, at most.
        max_events: u32,
    },
    /// Save a snapshot.
    SaveSnapshot(StoredSnapshot),
    /// Load the newest snapshot.
    LoadSnapshot,
    /// Delete up to a sequence number.
    Delete(u64),
}

/// Where a request is.
#[derive(Debug, Clone)]
pub enum Phase {
    /// Phase 1 at `ballot` (attempt `attempt`).
    Preparing {
        /// The ballot.
        ballot: Ballot,
        /// Attempts so far (from 1).
        attempt: u32,
    },
    /// Phase 2 at `ballot`; on success the log's highest number is `highest`, and a
    /// recovery answers `page`.
    Accepting {
        /// The ballot.
        ballot: Ballot,
        /// The highest sequence number once accepted.
        highest: u64,
        /// A recovery's page.
        page: Vec<Entry>,
        /// (slot, ballot) of the writes chosen once accepted (told to the replicas).
        learn: Vec<(u64, Ballot)>,
        /// What the accept carries — its committed prefix, whether it compacts, its
        /// writes — kept to send it again when held.
        accept: AcceptContent,
    },
    /// Reads, snapshot loads and saves, deletes: one round.
    Single,
}

/// The content of an accept round (see [`Phase::Accepting`]).
#[derive(Debug, Clone)]
pub struct AcceptContent {
    /// The committed prefix it states.
    pub committed: u64,
    /// Whether it compacts the log.
    pub compact: bool,
    /// The writes.
    pub writes: Vec<Entry>,
}

/// A request in flight.
#[derive(Debug, Clone)]
pub struct Request {
    /// The caller's request id.
    pub caller: u64,
    /// The log.
    pub log: String,
    /// What was asked.
    pub op: Op,
    /// Where it is.
    pub phase: Phase,
    /// The log's replicas for this request.
    pub replicas: Vec<UniqueAddress>,
    /// `replicas_digest(&replicas)`, which the answers' replica lists must match.
    pub replicas_digest: u64,
    /// Answers of this round, by replica.
    pub answers: BTreeMap<UniqueAddress, Answer>,
    /// Snapshots answered this round.
    pub snapshots: BTreeMap<UniqueAddress, Option<StoredSnapshot>>,
    /// The newest snapshot the promises of this phase 1 sent (a recovery with `snapshot`).
    pub newest_snapshot: Option<StoredSnapshot>,
    /// Replicas that refused or could not answer this round.
    pub refused: BTreeMap<UniqueAddress, Option<Ballot>>,
    /// Replicas that answered `Unable` this round, and why (named if the round fails).
    pub unable: BTreeMap<UniqueAddress, UnableReason>,
    /// Fails as unavailable at this time, ms.
    pub deadline_ms: u64,
    /// The turn (the machine's commits so far) in which this node's own replica last
    /// answered a round of it: while that turn is not committed, neither is the answer.
    pub local_turn: Option<u64>,
    /// Times this request was held ([`super::JournalMachine`] waits longer each time).
    pub holds: u32,
    /// An accept of this request may be stored on a replica although the request is not
    /// answered: one of its accept rounds was held, or a replica accepted it (in another
    /// view, or short of a majority). A refused append is then answered unavailable (the
    /// write may be stored), not as a conflict.
    pub maybe_stored: bool,
}

impl Request {
    /// Answers needed: a majority of the replicas.
    pub fn quorum(&self) -> usize {
        self.replicas.len() / 2 + 1
    }

    /// Answers (of any kind) of this round.
    pub fn answered(&self) -> usize {
        self.answers.len() + self.snapshots.len()
    }

    /// True once a majority can no longer answer yes.
    pub fn lost(&self) -> bool {
        self.replicas.len().saturating_sub(self.refused.len()) < self.quorum()
    }

    /// The highest ballot a refusal named.
    pub fn highest_refusal(&self) -> Ballot {
        self.refused
            .values()
            .flatten()
            .copied()
            .max()
            .unwrap_or(Ballot::ZERO)
    }

    /// Why replicas answered `Unable` this round, for an error: empty if none did, else
    /// e.g. ` (node@host:1 is still synchronising the log's segment after a ring change)`.
    pub fn unable_reasons(&self) -> String {
        if self.unable.is_empty() {
            return String::new();
        }
        let each: Vec<String> = self
            .unable
            .iter()
            .map(|(node, why)| format!("{} {}", node.address, why.describe()))
            .collect();
        format!(" ({})", each.join("; "))
    }

    /// Clears the round's answers for the next round.
    pub fn next_round(&mut self) {
        self.answers.clear();
        self.snapshots.clear();
        self.refused.clear();
        self.unable.clear();
    }
}
