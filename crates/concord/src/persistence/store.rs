//! The store traits — [`Journal`], [`SnapshotStore`], [`DurableStateStore`] — that a
//! persistent entity writes through (Akka's `AsyncWriteJournal`, `SnapshotStore` and
//! `DurableStateUpdateStore` plugin APIs as the model), and what they return.
//!
//! Implementations: `crate::persistence::ReplicatedStore` (the built-in replicated
//! store), `crate::persistence::PostgresStore` (PostgreSQL) and
//! [`crate::persistence::InMemoryStore`] (tests). Every method is object-safe and
//! returns a boxed future, so a node picks its store from configuration.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::sync::Arc;

use concord_core::persistence::{AtomicWrite, PersistenceId, PersistentEvent};
use futures_util::future::BoxFuture;

use super::PersistenceError;

/// A store call's future.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, PersistenceError>>;

/// A position in the stream of an entity type's events (what a projection stores to
/// resume): `transaction` orders commits and `ordering` events within them. Written
/// `<transaction>.<ordering>`; [`Offset::START`] is before every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset {
    /// The commit's position (the store's own clock: PostgreSQL's transaction id, the
    /// in-memory store's counter).
    pub transaction: u64,
    /// The event's position within or after it.
    pub ordering: u64,
}

impl Offset {
    /// Before every event.
    pub const START: Offset = Offset {
        transaction: 0,
        ordering: 0,
    };
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.transaction, self.ordering)
    }
}

impl FromStr for Offset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("an offset is <transaction>.<ordering> (two integers): {s:?}");
        if s == "0" {
            return Ok(Offset::START);
        }
        let (t, o) = s.split_once('.').ok_or_else(bad)?;
        Ok(Offset {
            transaction: t.parse().map_err(|_| bad())?,
            ordering: o.parse().map_err(|_| bad())?,
        })
    }
}

/// An event with its offset in its entity type's stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventEnvelope {
    /// Resume after this to get the events that follow.
    pub offset: Offset,
    /// The event.
    pub event: PersistentEvent,
}

/// Which events of an entity type a query reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsQuery {
    /// The entity type.
    pub entity_type: String,
    /// The slices of persistence ids (0..=1023 for all).
    pub slices: RangeInclusive<u16>,
    /// Events after this offset.
    pub after: Offset,
    /// At most this many events.
    pub limit: usize,
}

/// The event journal.
///
/// **Single writer.** [`Journal::append`] stores an [`AtomicWrite`] only if its first
/// sequence number follows the highest stored one of its persistence id (so none of its
/// numbers exists, and no gap opens), atomically with that check; otherwise it fails with
/// [`PersistenceError::Conflict`] and stores nothing. So every stored event
/// `n` was written by a writer whose state was the fold of events `1..n` — two writers'
/// events can never interleave into one history.
pub trait Journal: Send + Sync + 'static {
    /// Stores `write` (all its events or none).
    ///
    /// # Errors
    /// [`PersistenceError::Conflict`] if its first sequence number is not the highest + 1;
    /// [`PersistenceError::Rejected`] if it cannot be stored (nothing was);
    /// [`PersistenceError::Unavailable`] if it is unknown whether it was stored.
    fn append(&self, write: AtomicWrite) -> StoreFuture<'_, ()>;

    /// The highest sequence number of `pid` (0 if it has none), deleted events included.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn highest_seq_nr<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, u64>;

    /// Up to `max` events of `pid` from `from_seq_nr` on, ascending.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn replay<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from_seq_nr: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<PersistentEvent>>;

    /// [`Journal::highest_seq_nr`] and the first page of [`Journal::replay`] together (what
    /// a recovery starts with); a store may answer both with one query.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn replay_with_highest<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from_seq_nr: u64,
        max: usize,
    ) -> StoreFuture<'a, (Vec<PersistentEvent>, u64)> {
        Box::pin(async move {
            let highest = self.highest_seq_nr(pid).await?;
            let events = self.replay(pid, from_seq_nr, max).await?;
            Ok((events, highest))
        })
    }

    /// A recovery's start in one query: the newest snapshot of `pid`, up to `max` events
    /// after it, and the highest sequence number. Offered by a journal that keeps the
    /// snapshots too, used only where it is also the snapshot store
    /// ([`Stores::snapshots_in_journal`]). `Ok(None)`, the default: not offered — the caller
    /// loads the snapshot from its snapshot store, then calls
    /// [`Journal::replay_with_highest`].
    ///
    /// The events may start later than the snapshot's next number, or be empty while the
    /// highest is above it: the caller reads on with [`Journal::replay`].
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn replay_from_snapshot<'a>(
        &'a self,
        _pid: &'a PersistenceId,
        _max: usize,
    ) -> StoreFuture<'a, Option<RecoveryStart>> {
        Box::pin(async { Ok(None) })
    }

    /// Deletes the events of `pid` up to `to_seq_nr` inclusive; the highest sequence
    /// number stays what it was.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, to_seq_nr: u64) -> StoreFuture<'a, ()>;

    /// Events of an entity type after an offset, in offset order, such that resuming after
    /// the last offset read misses nothing: an event becomes readable only once every event
    /// with a smaller offset is readable too (or will never be). Events deleted meanwhile
    /// are skipped. Offsets follow the store's own order:
    ///
    /// - PostgreSQL: (transaction id, ordering); every event appears **once**.
    /// - The replicated store: (stream time ms, ordering), read up to `events-delay` before
    ///   now; **at least once** — a write one replica learned late may appear a second
    ///   time at a later offset (a projection that must not apply it twice keeps the
    ///   highest sequence number it applied per persistence id).
    /// - In memory: a counter; once.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn events_by_slices<'a>(
        &'a self,
        query: &'a EventsQuery,
    ) -> StoreFuture<'a, Vec<EventEnvelope>>;
}

/// What [`Journal::replay_from_snapshot`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryStart {
    /// The newest snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// Events after it (or from 1), ascending; at most the `max` asked for.
    pub events: Vec<PersistentEvent>,
    /// The highest sequence number (0: none).
    pub highest: u64,
}

/// A saved snapshot of an event-sourced entity's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The sequence number of the last event it includes.
    pub seq_nr: u64,
    /// When it was saved, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// The encoded state.
    pub payload: Vec<u8>,
}

/// Snapshots of event-sourced entities (several per persistence id, by sequence number).
pub trait SnapshotStore: Send + Sync + 'static {
    /// Saves `snapshot` of `pid` (replacing one at the same sequence number).
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`], [`PersistenceError::Rejected`].
    fn save<'a>(&'a self, pid: &'a PersistenceId, snapshot: Snapshot) -> StoreFuture<'a, ()>;

    /// The newest snapshot of `pid`.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn load_latest<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, Option<Snapshot>>;

    /// Deletes the snapshots of `pid` with sequence numbers up to `max_seq_nr` inclusive.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, max_seq_nr: u64) -> StoreFuture<'a, ()>;
}

/// A durable-state entity's stored state: its revision (0 if never written; each write
/// adds 1, a delete too) and its encoded state (`None` if never written or deleted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredState {
    /// The revision.
    pub revision: u64,
    /// The encoded state.
    pub payload: Option<Vec<u8>>,
}

/// Durable state: one value per persistence id, written whole, with a revision as the
/// optimistic lock (Akka's `DurableStateUpdateStore`; r2dbc's `assert-single-writer`).
pub trait DurableStateStore: Send + Sync + 'static {
    /// The state of `pid`.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`].
    fn get<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, StoredState>;

    /// Stores `payload` (`None`: deletes) as revision `revision` of `pid`, only if the
    /// stored revision is `revision − 1`.
    ///
    /// # Errors
    /// [`PersistenceError::Conflict`] if the stored revision is another;
    /// [`PersistenceError::Rejected`] for revision 0; [`PersistenceError::Unavailable`].
    fn upsert<'a>(
        &'a self,
        pid: &'a PersistenceId,
        revision: u64,
        payload: Option<Vec<u8>>,
    ) -> StoreFuture<'a, ()>;
}

/// The three stores a node's persistent entities use.
#[derive(Clone)]
pub struct Stores {
    /// Events.
    pub journal: Arc<dyn Journal>,
    /// Snapshots.
    pub snapshots: Arc<dyn SnapshotStore>,
    /// Durable state.
    pub state: Arc<dyn DurableStateStore>,
    /// True if `journal` and `snapshots` are one store (as [`Stores::of`] makes them): a
    /// recovery then asks [`Journal::replay_from_snapshot`] for both at once.
    pub snapshots_in_journal: bool,
}

impl Stores {
    /// One store that is all three (the in-memory and PostgreSQL stores are).
    pub fn of<S: Journal + SnapshotStore + DurableStateStore>(store: S) -> Stores {
        let s = Arc::new(store);
        Stores {
            journal: s.clone(),
            snapshots: s.clone(),
            state: s,
            snapshots_in_journal: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_print_and_parse() {
        let o = Offset {
            transaction: 17,
            ordering: 4,
        };
        assert_eq!(o.to_string(), "17.4");
        assert_eq!("17.4".parse::<Offset>().unwrap(), o);
        assert_eq!("0".parse::<Offset>().unwrap(), Offset::START);
        assert!("x".parse::<Offset>().is_err());
        assert!("1.-2".parse::<Offset>().is_err());
        assert!(Offset::START < o);
    }
}
