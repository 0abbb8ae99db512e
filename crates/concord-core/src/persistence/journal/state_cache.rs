//! [`StateCache`]: the journal machine's storage with the logs' state records
//! ([`super::acceptor::LogState`]) kept in memory as well.
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

use std::collections::HashMap;

use crate::kv::storage::{KvStorage, Record, StorageError, Table};

use super::acceptor::is_state_key;

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
}

impl<S: KvStorage> StateCache<S> {
    /// `inner` with an empty cache of at most `capacity` records (0: no caching).
    pub fn new(inner: S, capacity: usize) -> Self {
        StateCache {
            inner,
            states: HashMap::new(),
            capacity,
            hits: 0,
        }
    }

    /// Reads answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.hits
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
        if !Self::cached(table, key) {
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

    fn remove(&mut self, table: Table, key: &[u8]) -> Result<(), StorageError> {
        if !Self::cached(table, key) {
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
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::storage::MemoryStorage;
    use crate::persistence::journal::acceptor::{log_state, put_state, LogState};

    /// A storage that counts its point reads and can drop its uncommitted writes when a
    /// commit fails (as the LSM tree does).
    #[derive(Default)]
    struct Counting {
        committed: std::collections::BTreeMap<(Table, Vec<u8>), Vec<u8>>,
        pending: std::collections::BTreeMap<(Table, Vec<u8>), Option<Vec<u8>>>,
        gets: u64,
        fail_next_commit: bool,
    }

    impl KvStorage for Counting {
        fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
            self.gets += 1;
            let k = (table, key.to_vec());
            Ok(match self.pending.get(&k) {
                Some(v) => v.clone(),
                None => self.committed.get(&k).cloned(),
            })
        }
        fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
            self.pending
                .insert((table, key.to_vec()), Some(value.to_vec()));
            Ok(())
        }
        fn remove(&mut self, table: Table, key: &[u8]) -> Result<(), StorageError> {
            self.pending.insert((table, key.to_vec()), None);
            Ok(())
        }
        fn range(
            &mut self,
            _: Table,
            _: &[u8],
            _: &[u8],
            _: usize,
        ) -> Result<Vec<Record>, StorageError> {
            Ok(Vec::new())
        }
        fn commit(&mut self) -> Result<(), StorageError> {
            let pending = std::mem::take(&mut self.pending);
            if std::mem::take(&mut self.fail_next_commit) {
                return Err(StorageError("disk full".into()));
            }
            for (k, v) in pending {
                match v {
                    Some(v) => self.committed.insert(k, v),
                    None => self.committed.remove(&k),
                };
            }
            Ok(())
        }
    }

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
        let mut c = StateCache::new(Counting::default(), 10);
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
        // Other records are not cached.
        c.put(
            Table::Journal,
            b"\x00\x01log-a\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01",
            b"e",
        )
        .unwrap();
        c.get(
            Table::Journal,
            b"\x00\x01log-a\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01",
        )
        .unwrap();
        assert_eq!(c.inner.gets, 2);
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
                }
            }
        }
        assert!(!is_state_key(&[0; 12]), "no log name");
    }

    #[test]
    fn a_failed_commit_forgets_what_the_storage_dropped() {
        let mut c = StateCache::new(Counting::default(), 10);
        put_state(&mut c, "log", &state(1, 1)).unwrap();
        c.commit().unwrap();
        put_state(&mut c, "log", &state(2, 5)).unwrap();
        assert_eq!(log_state(&mut c, "log").unwrap(), state(2, 5));
        c.inner.fail_next_commit = true;
        assert!(c.commit().is_err());
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
}
