//! [`RecentEntries`]: the journal's entry records written lately, kept in memory as well
//! (part of [`super::state_cache::StateCache`]).
//!
//! A replica accepts a write (one entry record), and a moment later learns it is chosen:
//! the learn reads the entry back to check its ballot before indexing it
//! ([`super::stream::learn`]). On an LSM tree that read is a skip-list search of the
//! memtable — about 10 % of the persistence benchmark's CPU before this cache
//! (docs/BENCHMARKS.md). Kept here, the entries written lately answer it from a hash map.
//!
//! Write-through like the state records: every write and removal of an entry goes to the
//! storage and here, so a hit is what the storage would return; reads that miss go to the
//! storage and are not kept (only writes fill it). Bounded by records and bytes: the
//! oldest writes go first.

use std::collections::{HashMap, VecDeque};

/// Entry records kept, at most, by default.
pub const DEFAULT_MAX_ENTRIES: usize = 16_384;
/// Bytes of keys and values kept, at most, by default (8 MiB).
pub const DEFAULT_MAX_BYTES: usize = 8 << 20;

/// Entry records written lately, oldest first out; see the module docs.
#[derive(Debug, Default)]
pub struct RecentEntries {
    /// Key → (the write's number in `order`, the record).
    records: HashMap<Vec<u8>, (u64, Vec<u8>)>,
    /// Keys by the number of the write that first kept them, oldest first (a key removed
    /// and written again is there twice: its older number no longer matches, and evicts
    /// nothing).
    order: VecDeque<(u64, Vec<u8>)>,
    /// The number of the next new record.
    next: u64,
    /// Bytes of the keys and values in `records`.
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
}

impl RecentEntries {
    /// Empty, keeping at most `max_entries` records of at most `max_bytes` together (a
    /// record larger than a sixteenth of `max_bytes` is not kept).
    pub fn new(max_entries: usize, max_bytes: usize) -> RecentEntries {
        RecentEntries {
            max_entries,
            max_bytes,
            ..RecentEntries::default()
        }
    }

    /// The record at `key`, if kept.
    pub fn get(&self, key: &[u8]) -> Option<&Vec<u8>> {
        self.records.get(key).map(|(_, v)| v)
    }

    /// Records kept now.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// True if none is kept.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes of the records kept now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// `value` was written at `key` (to the storage).
    pub fn wrote(&mut self, key: &[u8], value: &[u8]) {
        let size = key.len() + value.len();
        if self.max_entries == 0 || size > self.max_bytes / 16 {
            self.forget(key);
            return;
        }
        if let Some((_, old)) = self.records.get_mut(key) {
            self.bytes = self.bytes - old.len() + value.len();
            old.clear();
            old.extend_from_slice(value);
        } else {
            let n = self.next;
            self.next = self.next.wrapping_add(1);
            self.records.insert(key.to_vec(), (n, value.to_vec()));
            self.order.push_back((n, key.to_vec()));
            self.bytes += size;
        }
        while self.bytes > self.max_bytes || self.order.len() > self.max_entries {
            let Some((n, k)) = self.order.pop_front() else {
                break;
            };
            if self.records.get(&k).is_some_and(|(m, _)| *m == n) {
                self.forget(&k);
            }
        }
    }

    /// The record at `key` was removed, or its write refused: not kept any more.
    pub fn forget(&mut self, key: &[u8]) {
        if let Some((_, v)) = self.records.remove(key) {
            self.bytes -= key.len() + v.len();
        }
    }

    /// Forgets everything (the storage dropped writes: a failed commit).
    pub fn clear(&mut self) {
        self.records.clear();
        self.order.clear();
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_records_answer_and_removed_ones_do_not() {
        let mut r = RecentEntries::new(10, 1 << 20);
        r.wrote(b"a", b"1");
        r.wrote(b"b", b"22");
        assert_eq!(r.get(b"a"), Some(&b"1".to_vec()));
        r.wrote(b"a", b"333");
        assert_eq!(r.get(b"a"), Some(&b"333".to_vec()));
        assert_eq!(r.bytes(), 1 + 3 + 1 + 2);
        r.forget(b"a");
        assert_eq!(r.get(b"a"), None);
        assert_eq!(r.bytes(), 3);
        r.clear();
        assert!(r.is_empty());
        assert_eq!(r.bytes(), 0);
    }

    #[test]
    fn the_oldest_go_first_within_both_bounds() {
        let mut r = RecentEntries::new(4, 1 << 20);
        for i in 0..10u8 {
            r.wrote(&[i], &[i; 8]);
            assert!(r.len() <= 4);
        }
        assert_eq!(r.get(&[9]), Some(&vec![9; 8]));
        assert_eq!(r.get(&[5]), None);
        // Bytes: 1 KiB at most, each record 1 + 60 bytes (under a sixteenth).
        let mut r = RecentEntries::new(1000, 1024);
        for i in 0..100u8 {
            r.wrote(&[i], &[0; 60]);
            assert!(r.bytes() <= 1024);
        }
        assert_eq!(r.len(), 1024 / 61);
        assert!(r.get(&[99]).is_some());
        // A record over a sixteenth of the bytes is not kept, and forgets an older copy.
        r.wrote(&[99], &[0; 100]);
        assert_eq!(r.get(&[99]), None);
    }

    #[test]
    fn a_key_written_removed_and_written_again_keeps_the_bounds() {
        let mut r = RecentEntries::new(3, 1 << 20);
        for _ in 0..100 {
            r.wrote(b"k", b"v");
            r.forget(b"k");
        }
        r.wrote(b"k", b"v");
        assert!(r.order.len() <= 3);
        assert_eq!(r.bytes(), 2);
        assert_eq!(r.get(b"k"), Some(&b"v".to_vec()));
        let off = &mut RecentEntries::new(0, 1 << 20);
        off.wrote(b"k", b"v");
        assert!(off.is_empty());
    }
}
