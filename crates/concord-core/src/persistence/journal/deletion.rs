//! Deleting a log's entries up to a sequence number (Akka's `deleteMessages`), and
//! [`DeletionFloors`]: where each log's next deletion may start looking.

use std::collections::HashMap;

use super::acceptor::{key, log_state, page, KIND_ENTRY, MAX_PAGE_BYTES};
use crate::kv::storage::{KvStorage, StorageError, Table};

/// Deletes the committed entries of `log` that end at or before `to`.
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn delete_to<S: KvStorage>(st: &mut S, log: &str, to: u64) -> Result<(), StorageError> {
    delete_from(st, log, 1, to).map(|_| ())
}

/// Deletes the committed entries of `log` that end at or before `to`, looking from slot
/// `from` on (the caller knows no entry starts below it here), and at most
/// [`MAX_PAGE_BYTES`] of their events in one call (but at least one entry; the next call
/// deletes on). Returns the
/// slot the next call may look from: the first entry kept, or the slot after the last
/// one deleted (`from` if none was there).
///
/// Why `from`: on an LSM tree a removed record stays, as a tombstone, until compaction,
/// and a scan from slot 1 stepped over every entry the log ever deleted — a producer's
/// durable queue deletes every few seconds, so each deletion took longer than the one
/// before ([`DeletionFloors`] keeps each log's floor).
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn delete_from<S: KvStorage>(
    st: &mut S,
    log: &str,
    from: u64,
    to: u64,
) -> Result<u64, StorageError> {
    let state = log_state(st, log)?;
    let (entries, _) = page(st, log, from, usize::MAX, MAX_PAGE_BYTES)?;
    let mut next = from.max(1);
    for e in entries {
        if e.first_seq > state.committed || e.last_seq() > to {
            return Ok(e.first_seq);
        }
        st.remove(Table::Journal, &key(log, KIND_ENTRY, e.first_seq))?;
        super::stream::unindex(st, log, e.first_seq)?;
        next = e.last_seq().saturating_add(1);
    }
    Ok(next)
}

/// Logs whose floor is kept, at most (about 100 bytes each); when full, every floor is
/// forgotten and the next deletion of each log looks from slot 1 once more.
pub const MAX_FLOORS: usize = 65_536;

/// Per log, the slot below which this replica holds no entry of it, as its own
/// deletions left it ([`delete_from`]'s answer): kept in memory by
/// [`super::state_cache::StateCache`], which sees every write. An entry written below a
/// log's floor (a handoff's copy, an accept of an older slot) lowers it to that slot; a
/// failed commit (the turn's removals may be undone) forgets every floor. A log without a
/// floor is looked at from slot 1.
#[derive(Debug, Default)]
pub struct DeletionFloors {
    floors: HashMap<String, u64>,
}

impl DeletionFloors {
    /// Where `log`'s next deletion may start looking (1 if not known).
    pub fn floor(&self, log: &str) -> u64 {
        self.floors.get(log).copied().unwrap_or(1)
    }

    /// `log`'s deletion left no entry below `floor`.
    pub fn deleted(&mut self, log: &str, floor: u64) {
        if let Some(f) = self.floors.get_mut(log) {
            *f = floor;
            return;
        }
        if self.floors.len() >= MAX_FLOORS {
            self.floors.clear();
        }
        self.floors.insert(log.to_string(), floor);
    }

    /// An entry of `log` at `slot` was written (or its write tried).
    pub fn wrote(&mut self, log: &str, slot: u64) {
        if let Some(f) = self.floors.get_mut(log) {
            *f = (*f).min(slot);
        }
    }

    /// True if no floor is kept.
    pub fn is_empty(&self) -> bool {
        self.floors.is_empty()
    }

    /// Forgets every floor.
    pub fn clear(&mut self) {
        self.floors.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::storage::MemoryStorage;
    use crate::persistence::journal::acceptor::{
        accept, merge_record, parse_key, read, KIND_SNAPSHOT,
    };
    use crate::persistence::journal::entry::{Ballot, Entry};
    use crate::persistence::journal::message::JournalMessage;
    use crate::persistence::journal::state_cache::StateCache;
    use crate::persistence::journal::test_storage::TurnStorage;

    /// The first slot of every range read of `log`'s entries since the last call.
    fn starts(st: &mut StateCache<TurnStorage>, log: &str) -> Vec<u64> {
        std::mem::take(&mut st.inner_mut().range_starts)
            .iter()
            .filter_map(|k| match parse_key(k) {
                Some((_, l, KIND_ENTRY, slot)) if l == log => Some(slot),
                _ => None,
            })
            .collect()
    }

    fn entry(first: u64) -> Entry {
        Entry {
            first_seq: first,
            ballot: Ballot { round: 1, node: 1 },
            timestamp_ms: 5,
            events: vec![vec![first as u8; 3]],
        }
    }

    /// Writes one-event entries at `slots` of `log`, all committed.
    fn write<S: KvStorage>(st: &mut S, log: &str, slots: impl Iterator<Item = u64>) {
        let writes: Vec<Entry> = slots.map(entry).collect();
        let committed = writes.last().map_or(0, |e| e.first_seq);
        let b = Ballot { round: 1, node: 1 };
        assert!(matches!(
            accept(st, 1, log, b, committed, false, &writes).unwrap(),
            JournalMessage::Accepted { .. }
        ));
        st.commit().unwrap();
    }

    fn slots<S: KvStorage>(st: &mut S, log: &str) -> Vec<u64> {
        let JournalMessage::ReadReply { page, .. } = read(st, 9, log, 1, 1000).unwrap() else {
            panic!("not a read reply")
        };
        page.iter().map(|e| e.first_seq).collect()
    }

    #[test]
    fn a_deletion_looks_from_where_the_last_one_left_off() {
        let mut st = StateCache::new(TurnStorage::default(), 100);
        write(&mut st, "elog", 1..=30);
        st.delete_to("elog", 10).unwrap();
        st.commit().unwrap();
        assert_eq!(slots(&mut st, "elog"), (11..=30).collect::<Vec<_>>());
        starts(&mut st, "elog");
        st.delete_to("elog", 20).unwrap();
        st.commit().unwrap();
        assert_eq!(starts(&mut st, "elog"), vec![11], "not from slot 1");
        assert_eq!(slots(&mut st, "elog"), (21..=30).collect::<Vec<_>>());
        // Another log has no floor: it is looked at from slot 1.
        write(&mut st, "other", 1..=3);
        starts(&mut st, "other");
        st.delete_to("other", 2).unwrap();
        assert_eq!(starts(&mut st, "other"), vec![1]);
        // Without a cache (or a floor) the same deletions happen from slot 1.
        let mut plain = TurnStorage::default();
        write(&mut plain, "elog", 1..=30);
        assert_eq!(delete_from(&mut plain, "elog", 1, 10).unwrap(), 11);
        assert_eq!(
            delete_from(&mut plain, "elog", 11, 40).unwrap(),
            31,
            "the slot after the last"
        );
        assert_eq!(slots(&mut plain, "elog"), Vec::<u64>::new());
    }

    #[test]
    fn an_entry_written_below_the_floor_is_deleted_by_the_next_deletion() {
        let mut st = StateCache::new(TurnStorage::default(), 100);
        write(&mut st, "elog", 1..=30);
        st.delete_to("elog", 20).unwrap();
        st.commit().unwrap();
        // A handoff brings back an entry this replica had deleted (another replica did not).
        let mut other = MemoryStorage::new();
        write(&mut other, "elog", 5..=5);
        let (k, v) = other
            .range(
                Table::Journal,
                &key("elog", KIND_ENTRY, 1),
                &key("elog", KIND_SNAPSHOT, 0),
                10,
            )
            .unwrap()
            .remove(0);
        assert!(merge_record(&mut st, &k, &v).unwrap());
        st.commit().unwrap();
        assert_eq!(slots(&mut st, "elog")[0], 5);
        st.delete_to("elog", 25).unwrap();
        st.commit().unwrap();
        assert_eq!(slots(&mut st, "elog"), (26..=30).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_commit_forgets_the_floors() {
        let mut st = StateCache::new(TurnStorage::default(), 100);
        write(&mut st, "elog", 1..=30);
        st.delete_to("elog", 20).unwrap();
        st.inner_mut().fail_next_commit = true;
        assert!(st.commit().is_err());
        // The removals were dropped: the entries are there again, and found.
        assert_eq!(slots(&mut st, "elog")[0], 1);
        starts(&mut st, "elog");
        st.delete_to("elog", 10).unwrap();
        assert_eq!(starts(&mut st, "elog"), vec![1]);
        st.commit().unwrap();
        assert_eq!(slots(&mut st, "elog")[0], 11);
    }

    #[test]
    fn a_deletion_stops_at_a_page_of_events_and_the_next_goes_on() {
        let mut st = MemoryStorage::new();
        let big = |first: u64| Entry {
            first_seq: first,
            ballot: Ballot { round: 1, node: 1 },
            timestamp_ms: 5,
            events: vec![vec![0; MAX_PAGE_BYTES / 4]],
        };
        let writes: Vec<Entry> = (1..=10).map(big).collect();
        let b = Ballot { round: 1, node: 1 };
        accept(&mut st, 1, "elog", b, 10, false, &writes).unwrap();
        let floor = delete_from(&mut st, "elog", 1, 10).unwrap();
        assert!((2..10).contains(&floor), "stopped at {floor}");
        assert_eq!(slots(&mut st, "elog")[0], floor);
        let mut from = floor;
        while from <= 10 {
            from = delete_from(&mut st, "elog", from, 10).unwrap();
        }
        assert_eq!(slots(&mut st, "elog"), Vec::<u64>::new());
    }

    #[test]
    fn floors_are_bounded_and_lowered_by_writes() {
        let mut f = DeletionFloors::default();
        assert_eq!(f.floor("a"), 1);
        f.deleted("a", 50);
        f.wrote("a", 70);
        assert_eq!(f.floor("a"), 50);
        f.wrote("a", 7);
        assert_eq!(f.floor("a"), 7);
        f.wrote("b", 3);
        assert_eq!(f.floor("b"), 1, "no floor is made by a write");
        for i in 0..MAX_FLOORS {
            f.deleted(&format!("log{i}"), 2);
        }
        assert!(f.floors.len() <= MAX_FLOORS);
    }
}
