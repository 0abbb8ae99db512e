//! What a journal holds: [`PersistentEvent`]s, written in [`AtomicWrite`]s, and the check
//! that a replay is one gap-free history ([`ReplayCheck`]).

use serde::{Deserialize, Serialize};

use super::PersistenceId;

/// One stored event: its persistence id, sequence number (from 1, without gaps), the
/// event's bytes (the entity's serde type, MessagePack with field names) and the time it
/// was written (ms since the Unix epoch, the writer's clock).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PersistentEvent {
    /// Whose event.
    pub persistence_id: PersistenceId,
    /// Its sequence number, ≥ 1.
    pub seq_nr: u64,
    /// The encoded event.
    pub payload: Vec<u8>,
    /// When it was written, ms since the Unix epoch.
    pub timestamp_ms: u64,
}

/// Why an [`AtomicWrite`] cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AtomicWriteError {
    /// No events.
    #[error("an atomic write needs at least one event")]
    Empty,
    /// More than [`AtomicWrite::MAX_EVENTS`] events.
    #[error("an atomic write holds at most {max} events (it has {len})")]
    TooMany {
        /// The limit.
        max: usize,
        /// The events given.
        len: usize,
    },
    /// The first sequence number is 0, or the last does not fit a `u64`.
    #[error("sequence numbers start at 1 and end below 2^64 (first {0})")]
    BadSequence(u64),
}

/// Events of one persistence id stored all or none (Akka's `AtomicWrite`): sequence
/// numbers `first_seq_nr ..= last_seq_nr()`. A journal stores it only if `first_seq_nr` is
/// its persistence id's highest stored number + 1 — the single-writer condition
/// (docs/PERSISTENCE.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AtomicWrite {
    persistence_id: PersistenceId,
    first_seq_nr: u64,
    payloads: Vec<Vec<u8>>,
    timestamp_ms: u64,
}

impl AtomicWrite {
    /// Most events in one atomic write (a command persisting more is refused before it
    /// reaches a journal).
    pub const MAX_EVENTS: usize = 1000;

    /// Events `payloads` of `persistence_id` from `first_seq_nr`, written at `timestamp_ms`.
    ///
    /// # Errors
    /// [`AtomicWriteError`]: no events, more than [`AtomicWrite::MAX_EVENTS`], a first
    /// sequence number of 0, or a last one beyond `u64::MAX`.
    pub fn new(
        persistence_id: PersistenceId,
        first_seq_nr: u64,
        payloads: Vec<Vec<u8>>,
        timestamp_ms: u64,
    ) -> Result<Self, AtomicWriteError> {
        if payloads.is_empty() {
            return Err(AtomicWriteError::Empty);
        }
        if payloads.len() > Self::MAX_EVENTS {
            return Err(AtomicWriteError::TooMany {
                max: Self::MAX_EVENTS,
                len: payloads.len(),
            });
        }
        if first_seq_nr == 0
            || first_seq_nr
                .checked_add(payloads.len() as u64 - 1)
                .is_none()
        {
            return Err(AtomicWriteError::BadSequence(first_seq_nr));
        }
        Ok(AtomicWrite {
            persistence_id,
            first_seq_nr,
            payloads,
            timestamp_ms,
        })
    }

    /// Whose events.
    pub fn persistence_id(&self) -> &PersistenceId {
        &self.persistence_id
    }

    /// The first sequence number.
    pub fn first_seq_nr(&self) -> u64 {
        self.first_seq_nr
    }

    /// The last sequence number (checked at construction not to overflow).
    pub fn last_seq_nr(&self) -> u64 {
        self.first_seq_nr + (self.payloads.len() as u64 - 1)
    }

    /// The number of events.
    pub fn len(&self) -> usize {
        self.payloads.len()
    }

    /// Never true (an atomic write has at least one event); for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.payloads.is_empty()
    }

    /// The encoded events, in order.
    pub fn payloads(&self) -> &[Vec<u8>] {
        &self.payloads
    }

    /// When it was written, ms since the Unix epoch.
    pub fn timestamp_ms(&self) -> u64 {
        self.timestamp_ms
    }

    /// The events as the journal stores them.
    pub fn events(&self) -> impl Iterator<Item = PersistentEvent> + '_ {
        self.payloads
            .iter()
            .enumerate()
            .map(move |(i, p)| PersistentEvent {
                persistence_id: self.persistence_id.clone(),
                seq_nr: self.first_seq_nr + i as u64,
                payload: p.clone(),
                timestamp_ms: self.timestamp_ms,
            })
    }
}

/// A replay that is not one gap-free history of its persistence id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("replay of {persistence_id}: expected sequence number {expected}, found {found}")]
pub struct ReplayError {
    /// The persistence id replayed.
    pub persistence_id: String,
    /// The sequence number that should have come.
    pub expected: u64,
    /// What came (an event of another id counts as 0).
    pub found: u64,
}

/// Checks, event by event, that a replay from `from_seq_nr` is consecutive and belongs to
/// its persistence id, and at the end that it reached the journal's highest sequence
/// number: recovery folds only whole histories.
#[derive(Debug, Clone)]
pub struct ReplayCheck {
    persistence_id: PersistenceId,
    expected: u64,
}

impl ReplayCheck {
    /// A check of `persistence_id`'s events from `from_seq_nr` (≥ 1).
    pub fn new(persistence_id: PersistenceId, from_seq_nr: u64) -> Self {
        ReplayCheck {
            persistence_id,
            expected: from_seq_nr.max(1),
        }
    }

    fn error(&self, found: u64) -> ReplayError {
        ReplayError {
            persistence_id: self.persistence_id.to_string(),
            expected: self.expected,
            found,
        }
    }

    /// Accepts the next event.
    ///
    /// # Errors
    /// [`ReplayError`] if it is not the expected sequence number of this id.
    pub fn next(&mut self, event: &PersistentEvent) -> Result<(), ReplayError> {
        if event.persistence_id != self.persistence_id {
            return Err(self.error(0));
        }
        if event.seq_nr != self.expected {
            return Err(self.error(event.seq_nr));
        }
        self.expected = self.expected.saturating_add(1);
        Ok(())
    }

    /// The replay ended; `highest` is the journal's highest sequence number of the id.
    ///
    /// # Errors
    /// [`ReplayError`] if events up to `highest` are missing.
    pub fn finish(&self, highest: u64) -> Result<u64, ReplayError> {
        let last = self.expected - 1;
        if highest > last {
            return Err(self.error(highest));
        }
        Ok(last.max(highest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pid() -> PersistenceId {
        PersistenceId::new("t", "1").unwrap()
    }

    #[test]
    fn atomic_writes_are_bounded_and_numbered() {
        assert_eq!(
            AtomicWrite::new(pid(), 1, vec![], 0),
            Err(AtomicWriteError::Empty)
        );
        assert!(matches!(
            AtomicWrite::new(pid(), 1, vec![vec![]; 1001], 0),
            Err(AtomicWriteError::TooMany { .. })
        ));
        assert!(AtomicWrite::new(pid(), 0, vec![vec![1]], 0).is_err());
        assert!(AtomicWrite::new(pid(), u64::MAX, vec![vec![1], vec![2]], 0).is_err());
        let w = AtomicWrite::new(pid(), u64::MAX, vec![vec![1]], 0).unwrap();
        assert_eq!(w.last_seq_nr(), u64::MAX);
        let w = AtomicWrite::new(pid(), 5, vec![vec![1], vec![2], vec![3]], 9).unwrap();
        assert_eq!(w.last_seq_nr(), 7);
        let seqs: Vec<u64> = w.events().map(|e| e.seq_nr).collect();
        assert_eq!(seqs, vec![5, 6, 7]);
    }

    #[test]
    fn a_replay_with_a_gap_a_repeat_or_a_missing_tail_is_refused() {
        let ev = |s| PersistentEvent {
            persistence_id: pid(),
            seq_nr: s,
            payload: vec![],
            timestamp_ms: 0,
        };
        let mut c = ReplayCheck::new(pid(), 3);
        c.next(&ev(3)).unwrap();
        assert_eq!(c.next(&ev(5)).unwrap_err().expected, 4);
        c.next(&ev(4)).unwrap();
        assert_eq!(c.next(&ev(4)).unwrap_err().found, 4);
        assert_eq!(c.finish(4), Ok(4));
        assert_eq!(c.finish(6).unwrap_err().found, 6);
        let other = PersistentEvent {
            persistence_id: PersistenceId::new("t", "2").unwrap(),
            ..ev(5)
        };
        assert_eq!(c.next(&other).unwrap_err().found, 0);
        assert_eq!(ReplayCheck::new(pid(), 1).finish(0), Ok(0));
    }

    proptest! {
        #[test]
        fn only_consecutive_replays_pass(from in 1u64..100, seqs in proptest::collection::vec(1u64..120, 0..30), highest in 0u64..130) {
            let mut c = ReplayCheck::new(pid(), from);
            let mut ok = true;
            let mut expected = from;
            for s in &seqs {
                let e = PersistentEvent { persistence_id: pid(), seq_nr: *s, payload: vec![], timestamp_ms: 0 };
                let r = c.next(&e);
                if *s == expected && ok {
                    prop_assert!(r.is_ok());
                    expected += 1;
                } else {
                    prop_assert!(r.is_err());
                    ok = false;
                    break;
                }
            }
            if ok {
                prop_assert_eq!(c.finish(highest).is_ok(), highest < expected);
            }
        }
    }
}
