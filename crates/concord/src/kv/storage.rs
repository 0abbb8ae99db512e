//! [`RedbStorage`]: the key-value store's tables in a `redb` database, one file per node
//! (`<data-dir>/kv.redb`), implementing the core's [`KvStorage`].
//!
//! Changes go into one write transaction that the driver commits after each batch of
//! inputs ([`KvStorage::commit`], durability `Immediate`: fsync), before any
//! acknowledgement leaves — so many writes share one fsync under load. Reads between
//! commits go through that transaction (they see its changes) or through a read
//! transaction held until the next commit.

use std::path::{Path, PathBuf};

use concord_core::kv::storage::Record;
use concord_core::kv::{KvStorage, StorageError, Table};
use redb::{
    Database, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};

/// The file name inside the data directory.
pub const STORE_FILE: &str = "kv.redb";

fn definition(t: Table) -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    TableDefinition::new(t.name())
}

fn error(e: impl std::fmt::Display) -> StorageError {
    StorageError(e.to_string())
}

/// The tables in one redb file; see the module docs.
pub struct RedbStorage {
    db: Database,
    file: PathBuf,
    write: Option<WriteTransaction>,
    read: Option<ReadTransaction>,
}

impl std::fmt::Debug for RedbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStorage")
            .field("file", &self.file)
            .finish()
    }
}

impl RedbStorage {
    /// Opens (or creates) `<dir>/kv.redb`, creating `dir` if needed.
    ///
    /// # Errors
    /// The directory cannot be created, or the file is not a redb database (corrupt, or
    /// held by another process); the message names the file.
    pub fn open(dir: &Path) -> Result<RedbStorage, StorageError> {
        Self::open_file(dir, STORE_FILE, &Table::KV)
    }

    /// Opens (or creates) `<dir>/<name>` with `tables`, creating `dir` if needed.
    ///
    /// # Errors
    /// As [`RedbStorage::open`].
    pub fn open_file(
        dir: &Path,
        name: &str,
        tables: &[Table],
    ) -> Result<RedbStorage, StorageError> {
        let file = dir.join(name);
        let named = |e: String| StorageError(format!("{}: {e}", file.display()));
        std::fs::create_dir_all(dir)
            .map_err(|e| named(format!("cannot create the directory: {e}")))?;
        let db = Database::create(&file).map_err(|e| named(format!("cannot open: {e}")))?;
        let tx = db.begin_write().map_err(|e| named(e.to_string()))?;
        for &t in tables {
            tx.open_table(definition(t))
                .map_err(|e| named(e.to_string()))?;
        }
        tx.commit().map_err(|e| named(e.to_string()))?;
        Ok(RedbStorage {
            db,
            file,
            write: None,
            read: None,
        })
    }

    /// The file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Bytes the file takes on disk.
    pub fn file_bytes(&self) -> u64 {
        std::fs::metadata(&self.file).map_or(0, |m| m.len())
    }

    fn writer(&mut self) -> Result<&WriteTransaction, StorageError> {
        if self.write.is_none() {
            self.read = None;
            self.write = Some(self.db.begin_write().map_err(error)?);
        }
        self.write
            .as_ref()
            .ok_or_else(|| StorageError("no write transaction".into()))
    }

    fn reader(&mut self) -> Result<&ReadTransaction, StorageError> {
        if self.read.is_none() {
            self.read = Some(self.db.begin_read().map_err(error)?);
        }
        self.read
            .as_ref()
            .ok_or_else(|| StorageError("no read transaction".into()))
    }
}

impl KvStorage for RedbStorage {
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(w) = &self.write {
            let t = w.open_table(definition(table)).map_err(error)?;
            return Ok(t.get(key).map_err(error)?.map(|v| v.value().to_vec()));
        }
        let t = self
            .reader()?
            .open_table(definition(table))
            .map_err(error)?;
        Ok(t.get(key).map_err(error)?.map(|v| v.value().to_vec()))
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        let mut t = self
            .writer()?
            .open_table(definition(table))
            .map_err(error)?;
        t.insert(key, value).map_err(error)?;
        Ok(())
    }

    fn remove(&mut self, table: Table, key: &[u8]) -> Result<(), StorageError> {
        let mut t = self
            .writer()?
            .open_table(definition(table))
            .map_err(error)?;
        t.remove(key).map_err(error)?;
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
        fn collect<T: ReadableTable<&'static [u8], &'static [u8]>>(
            t: &T,
            start: &[u8],
            end: &[u8],
            limit: usize,
        ) -> Result<Vec<Record>, StorageError> {
            let mut out = Vec::new();
            for item in t.range(start..end).map_err(error)? {
                if out.len() >= limit {
                    break;
                }
                let (k, v) = item.map_err(error)?;
                out.push((k.value().to_vec(), v.value().to_vec()));
            }
            Ok(out)
        }
        if let Some(w) = &self.write {
            let t = w.open_table(definition(table)).map_err(error)?;
            return collect(&t, start, end, limit);
        }
        let t = self
            .reader()?
            .open_table(definition(table))
            .map_err(error)?;
        collect(&t, start, end, limit)
    }

    fn commit(&mut self) -> Result<(), StorageError> {
        self.read = None;
        match self.write.take() {
            Some(w) => w.commit().map_err(error),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use concord_core::kv::ReplicaStore;

    #[test]
    fn a_store_on_redb_keeps_objects_and_its_tree_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let digest;
        {
            let mut s = ReplicaStore::open(RedbStorage::open(dir.path()).unwrap(), 7).unwrap();
            for i in 0..100 {
                s.coordinate(
                    &format!("k{i}"),
                    Default::default(),
                    Some(vec![1; 10]),
                    3,
                    1 << 20,
                )
                .unwrap();
            }
            s.commit().unwrap();
            digest = s.get("k7").unwrap().unwrap().digest();
        }
        let mut s = ReplicaStore::open(RedbStorage::open(dir.path()).unwrap(), 8).unwrap();
        assert_eq!(s.key_count(), 100);
        assert_eq!(s.get("k7").unwrap().unwrap().digest(), digest);
        assert_eq!(s.get("nope").unwrap(), None);
    }

    #[test]
    fn uncommitted_changes_are_gone_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut st = RedbStorage::open(dir.path()).unwrap();
            st.put(Table::Meta, b"a", b"1").unwrap();
            st.commit().unwrap();
            st.put(Table::Meta, b"b", b"2").unwrap();
            assert_eq!(st.get(Table::Meta, b"b").unwrap(), Some(b"2".to_vec()));
            // Dropped without a commit.
        }
        let mut st = RedbStorage::open(dir.path()).unwrap();
        assert_eq!(st.get(Table::Meta, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(st.get(Table::Meta, b"b").unwrap(), None);
        assert_eq!(st.range(Table::Meta, b"", b"\xff", 10).unwrap().len(), 1);
    }

    #[test]
    fn a_corrupt_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(STORE_FILE), b"not a database").unwrap();
        let e = RedbStorage::open(dir.path()).unwrap_err();
        assert!(e.0.contains(STORE_FILE), "{e}");
    }
}
