//! [`StateCache`]: the journal machine's storage with the logs' state records
//! ([`super::acceptor::LogState`]) kept in memory as well, and the entries written lately
//! ([`RecentEntries`]).
//!
//! Every accept and every learn reads its log's state record and writes it back, so on an
//! LSM tree each event cost each replica two point reads of the memtable (a skip-list
//! search over long keys: about 13 % of a journal host thread's time under the persistence
//! benchmark's write load, docs/BENCHMARKS.md). The cache answers those reads from a hash
//! map instead.
//!
//! It is a write-through cache of the records themselves, not of decoded states: every
//! write and removal of a state record goes to the storage and to the cache, every other
//! record and every range read goes straight to the storage, so what a read returns is
//! what the storage would return. A failed [`KvStorage::commit`] empties the cache (the
//! storage may have dropped the turn's writes). Bounded: at most `capacity` records; when
//! full, it is emptied and fills again from the reads that follow.
//!
//! Entry records are kept the same way, but only as they are written (a learn reads back
//! the entry its replica accepted a moment before), within [`RecentEntries`]' bounds.
//!
//! It keeps each log's deletion floor ([`DeletionFloors`]) for [`StateCache::delete_to`].
//!
//! It also notes the segment of every journal record written ([`HeldIndex`]), for
//! [`StateCache::held_segments_where`], and keeps the holdings of the segments read
//! up to date ([`LiveHoldings`]), for [`StateCache::holding`] and
//! [`StateCache::handoff_page_lacking`].

use std::collections::HashMap;

use crate::kv::storage::{KvStorage, Record, StorageError, Table};

use super::acceptor::{held_segments, is_entry_key, is_state_key, parse_key, segment_bounds};
use super::deletion::{delete_from, DeletionFloors};
use super::held_index::HeldIndex;
use super::live_holdings::LiveHoldings;
use super::recent_entries::{self, RecentEntries};
use super::segment_writes::SegmentWrites;

#[path = "state_cache_holdings.rs"]
mod holdings;

/// State records cached, at most, by default (about 100 bytes each: a key of the log's
/// name and a value of four numbers).
pub const DEFAULT_CAPACITY: usize = 100_000;

/// Storage `S` with a cache of the logs' state records; see the module docs.
#[derive(Debug)]
pub struct StateCache<S> {
    inner: S,
    /// Key → the record (`None`: known to be absent).
    states: HashMap<Vec<u8>, Option<Vec<u8>>>,
    capacity: usize,
    hits: u64,
    /// Entry records written lately.
    entries: RecentEntries,
    entry_hits: u64,
    /// The segments that may hold journal records (a superset).
    held: HeldIndex,
    /// The holdings of the segments read, kept up to date.
    live: LiveHoldings,
    /// When each segment was last written.
    writes: SegmentWrites,
    /// Where each log's next deletion may start looking.
    floors: DeletionFloors,
}

impl<S: KvStorage> StateCache<S> {
    /// `inner` with an empty cache of at most `capacity` state records (0: none cached)
    /// and of the entries written lately within [`recent_entries::DEFAULT_MAX_ENTRIES`]
    /// and [`recent_entries::DEFAULT_MAX_BYTES`] (none when `capacity` is 0).
    pub fn new(inner: S, capacity: usize) -> Self {
        let entries = if capacity == 0 {
            RecentEntries::new(0, 0)
        } else {
            RecentEntries::new(
                recent_entries::DEFAULT_MAX_ENTRIES,
                recent_entries::DEFAULT_MAX_BYTES,
            )
        };
        StateCache {
            inner,
            states: HashMap::new(),
            capacity,
            hits: 0,
            entries,
            entry_hits: 0,
            held: HeldIndex::default(),
            live: LiveHoldings::default(),
            writes: SegmentWrites::default(),
            floors: DeletionFloors::default(),
        }
    }

    /// The storage under the cache (tests look at it).
    #[cfg(test)]
    pub(super) fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Deletes the committed entries of `log` that end at or before `to`
    /// ([`delete_from`]), looking from where its last deletion here left off.
    ///
    /// # Errors
    /// The storage failed or holds a corrupt record.
    pub fn delete_to(&mut self, log: &str, to: u64) -> Result<(), StorageError> {
        let from = self.floors.floor(log);
        let floor = delete_from(self, log, from, to)?;
        self.floors.deleted(log, floor);
        Ok(())
    }

    /// The segments holding journal records here among those `want` picks, ascending.
    ///
    /// The first call scans the storage (one range seek per segment held, and one more:
    /// what the storage holds then, committed or not); later ones seek only the segments
    /// `want` picks among those that may hold records ([`HeldIndex`]: written since, or
    /// found by the scan), one seek each.
    ///
    /// # Errors
    /// The storage failed (the index is kept: the next call seeks again).
    pub fn held_segments_where(
        &mut self,
        mut want: impl FnMut(u16) -> bool,
    ) -> Result<Vec<u16>, StorageError> {
        if !self.held.scanned() {
            let mut all = held_segments(&mut self.inner)?;
            self.held.scanned_all(&all);
            all.retain(|s| want(*s));
            return Ok(all);
        }
        let mut out = Vec::new();
        for s in self.held.segments() {
            if !want(s) {
                continue;
            }
            let (start, end) = segment_bounds(s);
            if self
                .inner
                .range(Table::Journal, &start, &end, 1)?
                .is_empty()
            {
                self.held.emptied(s);
            } else {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// False only if no journal record of `segment` is here: the index was scanned and
    /// nothing of the segment written since (no seek).
    pub fn may_hold(&self, segment: u16) -> bool {
        self.held.may_hold(segment)
    }

    /// The number of `segment`'s last write here ([`SegmentWrites::last_write`]).
    pub fn last_write(&self, segment: u16) -> u64 {
        self.writes.last_write(segment)
    }

    fn put_through(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        if !Self::cached(table, key) {
            if table == Table::Journal && is_entry_key(key) {
                // Forgotten first: no stale copy stays beside a write the storage refused.
                self.entries.forget(key);
                self.inner.put(table, key, value)?;
                self.entries.wrote(key, value);
                return Ok(());
            }
            return self.inner.put(table, key, value);
        }
        match self.inner.put(table, key, value) {
            Ok(()) => {
                self.keep(key, Some(value.to_vec()));
                Ok(())
            }
            Err(e) => {
                // No stale copy stays beside a write the storage refused.
                self.states.remove(key);
                Err(e)
            }
        }
    }

    /// Reads of state records answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Reads of entry records answered from the entries written lately, so far.
    pub fn entry_hits(&self) -> u64 {
        self.entry_hits
    }

    /// Records cached now.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// True if nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.states.is_empty()
    }

    fn cached(table: Table, key: &[u8]) -> bool {
        table == Table::Journal && is_state_key(key)
    }

    fn keep(&mut self, key: &[u8], value: Option<Vec<u8>>) {
        if let Some(cached) = self.states.get_mut(key) {
            *cached = value;
            return;
        }
        if self.capacity == 0 {
            return;
        }
        if self.states.len() >= self.capacity {
            self.states.clear();
        }
        self.states.insert(key.to_vec(), value);
    }
}

impl<S: KvStorage> KvStorage for StateCache<S> {
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if !Self::cached(table, key) {
            if table == Table::Journal && is_entry_key(key) {
                if let Some(v) = self.entries.get(key) {
                    self.entry_hits += 1;
                    return Ok(Some(v.clone()));
                }
            }
            return self.inner.get(table, key);
        }
        if let Some(v) = self.states.get(key) {
            self.hits += 1;
            return Ok(v.clone());
        }
        let v = self.inner.get(table, key)?;
        self.keep(key, v.clone());
        Ok(v)
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        let r = self.put_through(table, key, value);
        if table == Table::Journal && !self.floors.is_empty() && is_entry_key(key) {
            if let Some((_, log, _, slot)) = parse_key(key) {
                self.floors.wrote(log, slot);
            }
        }
        if table == Table::Journal {
            if let Some(segment) = HeldIndex::segment_of_key(key) {
                self.writes.wrote(segment);
                if r.is_ok() {
                    self.held.wrote(segment);
                    self.live.noted(segment, key, Some(value));
                } else {
                    self.live.drop_segment(segment);
                }
            }
        }
        r
    }

    fn remove(&mut self, table: Table, key: &[u8]) -> Result<(), StorageError> {
        let r = self.remove_through(table, key);
        if table == Table::Journal {
            if let Some(segment) = HeldIndex::segment_of_key(key) {
                self.writes.wrote(segment);
                if r.is_ok() {
                    self.live.noted(segment, key, None);
                } else {
                    self.live.drop_segment(segment);
                }
            }
        }
        r
    }

    fn range(
        &mut self,
        table: Table,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Record>, StorageError> {
        self.inner.range(table, start, end, limit)
    }

    fn commit(&mut self) -> Result<(), StorageError> {
        let r = self.inner.commit();
        if r.is_err() {
            self.states.clear();
            self.entries.clear();
            // The turn's removals may be undone too: a segment the index found empty may
            // hold records again. Scanned again at the next look.
            self.held = HeldIndex::default();
            self.live.clear();
            self.writes.all_changed();
            self.floors.clear();
        }
        r
    }
}

impl<S: KvStorage> StateCache<S> {
    fn remove_through(&mut self, table: Table, key: &[u8]) -> Result<(), StorageError> {
        if !Self::cached(table, key) {
            if table == Table::Journal && is_entry_key(key) {
                self.entries.forget(key);
            }
            return self.inner.remove(table, key);
        }
        match self.inner.remove(table, key) {
            Ok(()) => {
                self.keep(key, None);
                Ok(())
            }
            Err(e) => {
                self.states.remove(key);
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::storage::MemoryStorage;
    use crate::persistence::journal::acceptor::{log_state, put_state, LogState};
    use crate::persistence::journal::test_storage::TurnStorage;

    fn state(promised_round: u64, committed: u64) -> LogState {
        LogState {
            promised: crate::persistence::journal::Ballot {
                round: promised_round,
                node: 1,
            },
            committed,
            ..LogState::default()
        }
    }

    #[test]
    fn a_state_read_twice_is_read_from_the_storage_once() {
        let mut c = StateCache::new(TurnStorage::default(), 10);
        put_state(&mut c, "log-a", &state(1, 3)).unwrap();
        c.commit().unwrap();
        assert_eq!(log_state(&mut c, "log-a").unwrap(), state(1, 3));
        assert_eq!(log_state(&mut c, "log-a").unwrap(), state(1, 3));
        assert_eq!(c.inner.gets, 0, "written through: known without a read");
        // An absent state is read once, then known absent.
        assert_eq!(log_state(&mut c, "log-b").unwrap(), LogState::default());
        assert_eq!(log_state(&mut c, "log-b").unwrap(), LogState::default());
        assert_eq!(c.inner.gets, 1);
        assert_eq!(c.hits(), 3);
        // Other records are not cached (a mark, kind 3).
        c.put(
            Table::Journal,
            b"\x00\x01log-a\x00\x03\x00\x00\x00\x00\x00\x00\x00\x01",
            b"m",
        )
        .unwrap();
        c.get(
            Table::Journal,
            b"\x00\x01log-a\x00\x03\x00\x00\x00\x00\x00\x00\x00\x01",
        )
        .unwrap();
        assert_eq!(c.inner.gets, 2);
    }

    #[test]
    fn an_entry_written_is_read_back_from_memory_until_removed_or_dropped() {
        let mut c = StateCache::new(TurnStorage::default(), 10);
        let k = super::super::acceptor::key("log", super::super::acceptor::KIND_ENTRY, 4);
        c.put(Table::Journal, &k, b"entry").unwrap();
        c.commit().unwrap();
        assert_eq!(c.get(Table::Journal, &k).unwrap(), Some(b"entry".to_vec()));
        assert_eq!((c.inner.gets, c.entry_hits()), (0, 1));
        // A failed commit drops the turn's writes: the entry is read from the storage.
        c.put(Table::Journal, &k, b"newer").unwrap();
        c.inner.fail_next_commit = true;
        assert!(c.commit().is_err());
        assert!(c.may_hold(13), "unknown until scanned again");
        assert_eq!(c.get(Table::Journal, &k).unwrap(), Some(b"entry".to_vec()));
        assert_eq!(c.inner.gets, 1);
        // A read that missed is not kept; a removal forgets.
        c.get(Table::Journal, &k).unwrap();
        assert_eq!(c.inner.gets, 2);
        c.put(Table::Journal, &k, b"again").unwrap();
        c.remove(Table::Journal, &k).unwrap();
        assert_eq!(c.get(Table::Journal, &k).unwrap(), None);
        assert_eq!(c.inner.gets, 3);
    }

    #[test]
    fn only_state_record_keys_are_cached() {
        use super::super::acceptor::key;
        for log in ["a", "ebench|e1", "log\u{0}with a nul"] {
            for kind in 0..4u8 {
                for seq in [0, 1, 256, u64::MAX] {
                    assert_eq!(
                        is_state_key(&key(log, kind, seq)),
                        kind == 0 && seq == 0,
                        "{log} {kind} {seq}"
                    );
                    assert_eq!(is_entry_key(&key(log, kind, seq)), kind == 1);
                }
            }
        }
        assert!(!is_state_key(&[0; 12]), "no log name");
    }

    #[test]
    fn a_failed_commit_forgets_what_the_storage_dropped() {
        let mut c = StateCache::new(TurnStorage::default(), 10);
        put_state(&mut c, "log", &state(1, 1)).unwrap();
        c.commit().unwrap();
        put_state(&mut c, "log", &state(2, 5)).unwrap();
        assert_eq!(log_state(&mut c, "log").unwrap(), state(2, 5));
        c.inner.fail_next_commit = true;
        assert!(c.commit().is_err());
        assert!(c.may_hold(13), "unknown until scanned again");
        // The storage dropped the write; the cache must not answer with it.
        assert_eq!(log_state(&mut c, "log").unwrap(), state(1, 1));
        assert!(c.inner.gets > 0);
    }

    #[test]
    fn the_cache_stays_within_its_capacity_and_answers_as_the_storage_does() {
        let mut plain = MemoryStorage::new();
        let mut c = StateCache::new(MemoryStorage::new(), 8);
        for i in 0..100u64 {
            let log = format!("log-{}", i % 13);
            let s = state(i, i / 2);
            if i % 5 == 0 {
                let k = super::super::acceptor::key(&log, 0, 0);
                plain.remove(Table::Journal, &k).unwrap();
                c.remove(Table::Journal, &k).unwrap();
            } else {
                put_state(&mut plain, &log, &s).unwrap();
                put_state(&mut c, &log, &s).unwrap();
            }
            for j in 0..13 {
                let log = format!("log-{j}");
                assert_eq!(
                    log_state(&mut c, &log).unwrap(),
                    log_state(&mut plain, &log).unwrap()
                );
            }
            assert!(c.len() <= 8);
        }
        assert!(c.hits() > 0);
        let mut off = StateCache::new(MemoryStorage::new(), 0);
        put_state(&mut off, "log", &state(1, 1)).unwrap();
        assert_eq!(log_state(&mut off, "log").unwrap(), state(1, 1));
        assert!(off.is_empty());
    }

    /// A storage that counts its range reads.
    struct Ranges {
        inner: MemoryStorage,
        ranges: u64,
    }

    impl KvStorage for Ranges {
        fn get(&mut self, t: Table, k: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
            self.inner.get(t, k)
        }
        fn put(&mut self, t: Table, k: &[u8], v: &[u8]) -> Result<(), StorageError> {
            self.inner.put(t, k, v)
        }
        fn remove(&mut self, t: Table, k: &[u8]) -> Result<(), StorageError> {
            self.inner.remove(t, k)
        }
        fn range(
            &mut self,
            t: Table,
            a: &[u8],
            b: &[u8],
            limit: usize,
        ) -> Result<Vec<Record>, StorageError> {
            self.ranges += 1;
            self.inner.range(t, a, b, limit)
        }
        fn commit(&mut self) -> Result<(), StorageError> {
            self.inner.commit()
        }
    }

    #[test]
    fn held_segments_are_scanned_once_then_sought_only_where_asked() {
        let seg_key = |s: u16, rest: &[u8]| [&s.to_be_bytes()[..], rest].concat();
        let mut inner = MemoryStorage::new();
        // On disk before the cache exists (a restart): segments 3, 7 and 900.
        for s in [3u16, 7, 900] {
            inner
                .put(Table::Journal, &seg_key(s, b"old"), b"v")
                .unwrap();
        }
        inner
            .put(Table::JournalMeta, &seg_key(5, b"meta"), b"v")
            .unwrap();
        let mut c = StateCache::new(Ranges { inner, ranges: 0 }, 8);
        assert_eq!(c.held_segments_where(|_| true).unwrap(), vec![3, 7, 900]);
        // The scan: one seek per segment held, and one that finds no more.
        assert_eq!(c.inner.ranges, 4);
        // Written since: found without a scan; emptied: dropped; only asked ones sought.
        c.put(Table::Journal, &seg_key(12, b"new"), b"v").unwrap();
        c.remove(Table::Journal, &seg_key(7, b"old")).unwrap();
        c.inner.ranges = 0;
        assert_eq!(c.held_segments_where(|_| true).unwrap(), vec![3, 12, 900]);
        assert_eq!(c.inner.ranges, 4, "3, 7 (found empty), 12, 900");
        c.inner.ranges = 0;
        assert_eq!(c.held_segments_where(|s| s > 10).unwrap(), vec![12, 900]);
        assert_eq!(c.inner.ranges, 2);
        assert!(c.may_hold(12) && !c.may_hold(7) && !c.may_hold(13));
        c.inner.ranges = 0;
        assert!(c.held_segments_where(|_| false).unwrap().is_empty());
        assert_eq!(c.inner.ranges, 0);
        // A failed commit may undo removals: the next look scans again.
        c.inner.inner.fail_next_commits(1);
        assert!(c.commit().is_err());
        assert!(c.may_hold(13), "unknown until scanned again");
        c.inner.ranges = 0;
        assert_eq!(c.held_segments_where(|_| true).unwrap(), vec![3, 12, 900]);
        assert_eq!(c.inner.ranges, 4, "a scan of 3 held and one more");
    }
}
