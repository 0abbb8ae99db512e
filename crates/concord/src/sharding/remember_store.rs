//! [`RememberStore`]: remembered entities in a local `redb` file
//! (`<data-dir>/sharding-remember.redb`), the store chosen with
//! `sharding.remember-entities-store = "redb"`. One record per (entity type, shard): the
//! ids of its started entities. It survives restarts of this node; unlike the default
//! Distributed Data store it is not replicated, so a shard that starts on another node
//! after a crash finds nothing there — choose it for a node whose shards come back to it
//! (a single node, or a fixed placement).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("remembered-entities");

/// The store's file name in the data directory.
pub const REMEMBER_FILE: &str = "sharding-remember.redb";

/// A store that cannot be used (the file and what went wrong).
#[derive(Debug, thiserror::Error)]
#[error("remember-entities store {}: {message}", file.display())]
pub struct RememberStoreError {
    /// The file.
    pub file: PathBuf,
    /// What went wrong.
    pub message: String,
}

/// Remembered entities on local disk.
pub struct RememberStore {
    db: Database,
    file: PathBuf,
}

impl RememberStore {
    /// Opens (or creates) `<dir>/sharding-remember.redb`.
    ///
    /// # Errors
    /// The directory cannot be created, or the file is not a redb database.
    pub fn open(dir: &Path) -> Result<RememberStore, RememberStoreError> {
        let file = dir.join(REMEMBER_FILE);
        let err = |message: String| RememberStoreError {
            file: file.clone(),
            message,
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| err(format!("cannot create the directory: {e}")))?;
        let db = Database::create(&file).map_err(|e| err(format!("cannot open: {e}")))?;
        let s = RememberStore { db, file };
        let tx = s.db.begin_write().map_err(|e| s.error(e))?;
        tx.open_table(TABLE).map_err(|e| s.error(e))?;
        tx.commit().map_err(|e| s.error(e))?;
        Ok(s)
    }

    fn error(&self, e: impl std::fmt::Display) -> RememberStoreError {
        RememberStoreError {
            file: self.file.clone(),
            message: e.to_string(),
        }
    }

    fn key(type_name: &str, shard: &str) -> String {
        format!("{type_name}\u{0}{shard}")
    }

    fn decode(&self, bytes: &[u8]) -> Result<BTreeSet<String>, RememberStoreError> {
        postcard::from_bytes(bytes)
            .map_err(|e| self.error(format!("a record does not decode: {e}")))
    }

    /// The remembered entities of `shard` of `type_name`.
    ///
    /// # Errors
    /// The file cannot be read, or the record does not decode.
    pub fn load(&self, type_name: &str, shard: &str) -> Result<Vec<String>, RememberStoreError> {
        let tx = self.db.begin_read().map_err(|e| self.error(e))?;
        let t = tx.open_table(TABLE).map_err(|e| self.error(e))?;
        match t
            .get(Self::key(type_name, shard).as_str())
            .map_err(|e| self.error(e))?
        {
            Some(v) => Ok(self.decode(v.value())?.into_iter().collect()),
            None => Ok(Vec::new()),
        }
    }

    /// Records `started` and forgets `stopped` (committed when this returns).
    ///
    /// # Errors
    /// The write or commit failed.
    pub fn update(
        &self,
        type_name: &str,
        shard: &str,
        started: &[String],
        stopped: &[String],
    ) -> Result<(), RememberStoreError> {
        let key = Self::key(type_name, shard);
        let tx = self.db.begin_write().map_err(|e| self.error(e))?;
        {
            let mut t = tx.open_table(TABLE).map_err(|e| self.error(e))?;
            let mut set = match t.get(key.as_str()).map_err(|e| self.error(e))? {
                Some(v) => self.decode(v.value())?,
                None => BTreeSet::new(),
            };
            for s in stopped {
                set.remove(s);
            }
            set.extend(started.iter().cloned());
            let bytes = postcard::to_stdvec(&set).map_err(|e| self.error(e))?;
            t.insert(key.as_str(), bytes.as_slice())
                .map_err(|e| self.error(e))?;
        }
        tx.commit().map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = RememberStore::open(dir.path()).unwrap();
            s.update("counter", "7", &["a".into(), "b".into()], &[])
                .unwrap();
            s.update("counter", "7", &["c".into()], &["a".into()])
                .unwrap();
            s.update("log", "7", &["x".into()], &[]).unwrap();
        }
        let s = RememberStore::open(dir.path()).unwrap();
        assert_eq!(s.load("counter", "7").unwrap(), vec!["b", "c"]);
        assert_eq!(s.load("log", "7").unwrap(), vec!["x"]);
        assert!(s.load("counter", "8").unwrap().is_empty());
    }

    #[test]
    fn a_corrupt_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(REMEMBER_FILE), b"not a database").unwrap();
        let e = RememberStore::open(dir.path()).err().expect("refused");
        assert!(e.to_string().contains(REMEMBER_FILE));
    }
}
