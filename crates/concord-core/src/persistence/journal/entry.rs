//! What the replicated journal's acceptors store: [`Ballot`]s, accepted writes
//! ([`Entry`]: one Paxos slot) and snapshots ([`StoredSnapshot`]), with their byte
//! stored forms (a format byte, then postcard; validated when decoded: a corrupt record
//! is an error, never a panic).

use serde::{Deserialize, Serialize};

/// A Paxos ballot (Lamport, "Paxos Made Simple", 2001): a round, then the proposer's
/// node uid to break ties. Ordered by round, then node. [`Ballot::ZERO`] is below every
/// ballot a proposer uses.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct Ballot {
    /// The round (proposers start from their clock, ms, so a later incarnation usually wins
    /// at once).
    pub round: u64,
    /// The proposing node's uid.
    pub node: u64,
}

impl Ballot {
    /// Below every used ballot.
    pub const ZERO: Ballot = Ballot { round: 0, node: 0 };
}

/// One accepted write: a Paxos slot of a log, numbered by its first sequence number and
/// holding the events `first_seq ..= last_seq()` (1 to
/// [`crate::persistence::AtomicWrite::MAX_EVENTS`] of them), the ballot it was accepted at
/// and the writer's timestamp (ms since the Unix epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The slot: the first event's sequence number (≥ 1).
    pub first_seq: u64,
    /// The ballot it was accepted at.
    pub ballot: Ballot,
    /// When it was written, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// The encoded events (at least one).
    pub events: Vec<Vec<u8>>,
}

impl Entry {
    /// The last event's sequence number (saturating; [`Entry::is_valid`] rules out
    /// overflow).
    pub fn last_seq(&self) -> u64 {
        let n = u64::try_from(self.events.len()).unwrap_or(u64::MAX);
        self.first_seq.saturating_add(n.saturating_sub(1))
    }

    /// At least one and at most 1000 events, numbered from 1 without overflow.
    pub fn is_valid(&self) -> bool {
        let n = self.events.len();
        self.first_seq >= 1
            && (1..=crate::persistence::AtomicWrite::MAX_EVENTS).contains(&n)
            && u64::try_from(n - 1)
                .ok()
                .and_then(|k| self.first_seq.checked_add(k))
                .is_some()
    }

    /// Bytes of its events.
    pub fn payload_bytes(&self) -> usize {
        self.events.iter().map(Vec::len).sum()
    }

    /// The stored form ([`to_bytes`]).
    pub fn encode(&self) -> Vec<u8> {
        to_bytes(self)
    }

    /// The ballot and last sequence number of an entry's stored form, read without its
    /// events.
    ///
    /// # Errors
    /// The bytes are not an encoded entry.
    pub fn head_of(bytes: &[u8]) -> Result<(Ballot, u64), String> {
        let body = match bytes.split_first() {
            Some((&FORMAT, body)) => body,
            Some((f, _)) => return Err(format!("unknown format {f}")),
            None => return Err("empty".into()),
        };
        let ((first, ballot, _ts), rest) =
            postcard::take_from_bytes::<(u64, Ballot, u64)>(body).map_err(|e| e.to_string())?;
        // The events' count, as postcard writes a sequence's length.
        let (n, _) = postcard::take_from_bytes::<u64>(rest).map_err(|e| e.to_string())?;
        let last = n
            .checked_sub(1)
            .and_then(|k| first.checked_add(k))
            .ok_or_else(|| format!("an entry of {n} events at {first}"))?;
        Ok((ballot, last))
    }

    /// The entry of slot `first_seq` from its stored form.
    ///
    /// # Errors
    /// The bytes are not an encoded entry, or not a valid one of that slot.
    pub fn decode(first_seq: u64, bytes: &[u8]) -> Result<Entry, String> {
        let entry: Entry = from_bytes(bytes)?;
        if entry.first_seq != first_seq || !entry.is_valid() {
            return Err(format!("an invalid entry at {first_seq}"));
        }
        Ok(entry)
    }
}

/// A snapshot as the acceptors keep it: the sequence number of the last event it includes,
/// when it was taken (ms since the Unix epoch) and the encoded state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredSnapshot {
    /// The last event it includes.
    pub seq_nr: u64,
    /// When it was saved, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// The encoded state.
    pub payload: Vec<u8>,
}

impl StoredSnapshot {
    /// The stored form ([`to_bytes`]).
    pub fn encode(&self) -> Vec<u8> {
        to_bytes(self)
    }

    /// From the stored form.
    ///
    /// # Errors
    /// Not an encoded snapshot.
    pub fn decode(bytes: &[u8]) -> Result<StoredSnapshot, String> {
        from_bytes(bytes)
    }
}

/// The format byte of the journal's stored forms.
pub(super) const FORMAT: u8 = 1;

/// A stored form: a format byte, then postcard (as the key-value store's records).
pub(super) fn to_bytes<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![FORMAT];
    // Serializing plain data into a Vec cannot fail.
    out.extend(postcard::to_stdvec(value).unwrap_or_default());
    out
}

/// A value from [`to_bytes`]'s bytes.
pub(super) fn from_bytes<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.split_first() {
        Some((&FORMAT, body)) => postcard::from_bytes(body).map_err(|e| e.to_string()),
        Some((f, _)) => Err(format!("unknown format {f}")),
        None => Err("empty".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn entries_round_trip(first in 1u64..1_000_000, round: u64, node: u64, ts: u64,
                              events in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..20)) {
            let e = Entry { first_seq: first, ballot: Ballot { round, node }, timestamp_ms: ts, events };
            prop_assert_eq!(Entry::head_of(&e.encode()).unwrap(), (e.ballot, e.last_seq()));
            prop_assert_eq!(Entry::decode(first, &e.encode()).unwrap(), e);
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Entry::decode(1, &bytes);
            let _ = StoredSnapshot::decode(&bytes);
        }
    }

    #[test]
    fn invalid_entries_are_refused() {
        let e = Entry {
            first_seq: u64::MAX,
            ballot: Ballot::ZERO,
            timestamp_ms: 0,
            events: vec![vec![], vec![]],
        };
        assert!(!e.is_valid());
        assert!(Entry::decode(u64::MAX, &e.encode()).is_err());
        let empty = Entry {
            events: vec![],
            first_seq: 1,
            ..e
        };
        assert!(!empty.is_valid());
        assert!(Ballot { round: 2, node: 0 } > Ballot { round: 1, node: 9 });
    }
}
