//! [`KvStorage`]: the ordered tables the key-value store keeps on disk, as the sans-IO core
//! sees them — the runtime implements it with `redb` (one file per node), the simulator and
//! the tests with [`MemoryStorage`].
//!
//! Writes made while handling inputs become durable at [`KvStorage::commit`]; the machine
//! holds every message and answer back until then, so an acknowledgement always means
//! "on disk" (and many writes share one commit under load: group commit).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Table {
    /// Objects: `[segment: u16 BE][bucket: u8][key bytes]` → an encoded
    /// [`super::Versioned`].
    Objects,
    /// The anti-entropy hash tree's leaves: `[segment: u16 BE][n: u8][bucket: u8]` →
    /// `[hash: u64 LE][count: u64 LE]`.
    Buckets,
    /// The store's own records (its replica id, the dots reserved).
    Meta,
    /// The replicated journal's acceptor records
    /// (`crate::persistence::journal`, in a store of its own).
    Journal,
    /// The replicated journal's events-by-type index
    /// (`crate::persistence::journal::stream`, in the journal's store).
    JournalIndex,
    /// The replicated journal's own records about this node (its standing per segment,
    /// `crate::persistence::journal::standing`, in the journal's store).
    JournalMeta,
}

impl Table {
    /// The key-value store's tables.
    pub const KV: [Table; 3] = [Table::Objects, Table::Buckets, Table::Meta];

    /// Its name (the runtime's table name).
    pub fn name(self) -> &'static str {
        match self {
            Table::Objects => "kv-objects",
            Table::Buckets => "kv-buckets",
            Table::Meta => "kv-meta",
            Table::Journal => "journal",
            Table::JournalIndex => "journal-index",
            Table::JournalMeta => "journal-meta",
        }
    }
}

/// A storage failure (disk full, file removed, corrupt page, ...).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("storage: {0}")]
pub struct StorageError(pub String);

/// A record read from a table.
pub type Record = (Vec<u8>, Vec<u8>);

/// Ordered byte tables with transactions; see the module docs.
pub trait KvStorage {
    /// The record at `key`.
    ///
    /// # Errors
    /// The storage failed.
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError>;

    /// Writes the record at `key`.
    ///
    /// # Errors
    /// The storage failed.
    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StorageError>;

    /// Removes the record at `key` (if any).
    ///
    /// # Errors
    /// The storage failed.
    fn remove(&mut self, table: Table, key: &[u8]) -> Result<(), StorageError>;

    /// Records with `start <= key < end`, ascending, at most `limit`.
    ///
    /// # Errors
    /// The storage failed.
    fn range(
        &mut self,
        table: Table,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Record>, StorageError>;

    /// Makes every change since the last commit durable.
    ///
    /// # Errors
    /// The changes could not be made durable (they may be lost).
    fn commit(&mut self) -> Result<(), StorageError>;
}

type Tables = BTreeMap<Table, BTreeMap<Vec<u8>, Vec<u8>>>;

/// An in-memory [`KvStorage`]. Clones share the same tables — a simulated disk that
/// survives the restart of the node using it. Writes are durable at once.
#[derive(Clone, Debug, Default)]
pub struct MemoryStorage {
    tables: Arc<Mutex<Tables>>,
    fail_commits: Arc<Mutex<u32>>,
}

impl MemoryStorage {
    /// Empty tables.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Tables) -> T) -> T {
        // A poisoned lock only means a test panicked while holding it.
        let mut g = match self.tables.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        f(&mut g)
    }

    /// Records in `table`, count.
    pub fn len(&self, table: Table) -> usize {
        self.with(|t| t.get(&table).map_or(0, BTreeMap::len))
    }

    /// Every record of `table`, in key order (for inspection in tests).
    pub fn records(&self, table: Table) -> Vec<Record> {
        self.with(|t| {
            t.get(&table)
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default()
        })
    }

    /// True if `table` holds nothing.
    pub fn is_empty(&self, table: Table) -> bool {
        self.len(table) == 0
    }

    /// Makes the next `count` commits fail (for tests of storage failures).
    pub fn fail_next_commits(&self, count: u32) {
        if let Ok(mut g) = self.fail_commits.lock() {
            *g = count;
        }
    }
}

impl KvStorage for MemoryStorage {
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.with(|t| t.get(&table).and_then(|m| m.get(key)).cloned()))
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        self.with(|t| {
            t.entry(table)
                .or_default()
                .insert(key.to_vec(), value.to_vec());
        });
        Ok(())
    }

    fn remove(&mut self, table: Table, key: &[u8]) -> Result<(), StorageError> {
        self.with(|t| {
            if let Some(m) = t.get_mut(&table) {
                m.remove(key);
            }
        });
        Ok(())
    }

    fn range(
        &mut self,
        table: Table,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Record>, StorageError> {
        if start >= end {
            return Ok(Vec::new());
        }
        Ok(self.with(|t| {
            t.get(&table)
                .map(|m| {
                    m.range(start.to_vec()..end.to_vec())
                        .take(limit)
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default()
        }))
    }

    fn commit(&mut self) -> Result<(), StorageError> {
        let mut g = match self.fail_commits.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if *g > 0 {
            *g -= 1;
            return Err(StorageError("injected commit failure".into()));
        }
        Ok(())
    }
}
