//! [`DurableStore`]: durable keys of Distributed Data on disk, in a `redb` database
//! (`<data-dir>/ddata.redb`; Akka uses LMDB). Each record is a key's envelope in its wire
//! form (`DdEnvelope`). Every change of a durable key is written (and committed) before the
//! replicator answers the update; at start every record is loaded before the replicator
//! serves anything. A file that cannot be opened or a record that does not decode fails
//! start-up with an error naming the file — nothing is silently lost.

use std::path::{Path, PathBuf};

use concord_core::ddata::replicator::SerializedEnvelope;
use prost::Message;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::codec::{envelope_from_wire, envelope_to_wire};
use crate::remote::wire;

const TABLE: TableDefinition<&str, &[u8]> = TableDefinition::new("ddata");

/// The file name of the store inside the data directory.
pub const STORE_FILE: &str = "ddata.redb";

/// A durable store that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("durable store {}: {message}", file.display())]
pub struct DurableError {
    /// The store's file.
    pub file: PathBuf,
    /// What went wrong.
    pub message: String,
}

/// The durable keys of one node.
pub struct DurableStore {
    db: Database,
    file: PathBuf,
}

impl std::fmt::Debug for DurableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DurableStore")
            .field("file", &self.file)
            .finish()
    }
}

impl DurableStore {
    /// Opens (or creates) `<dir>/ddata.redb`, creating `dir` if needed.
    ///
    /// # Errors
    /// The directory cannot be created, or the file is not a redb database (corrupt, or
    /// held by another process).
    pub fn open(dir: &Path) -> Result<DurableStore, DurableError> {
        Self::open_file(dir, STORE_FILE)
    }

    /// Opens (or creates) `<dir>/<file_name>` (another replicator's durable keys, e.g. the
    /// sharding layer's).
    ///
    /// # Errors
    /// As [`DurableStore::open`].
    pub fn open_file(dir: &Path, file_name: &str) -> Result<DurableStore, DurableError> {
        let file = dir.join(file_name);
        let err = |message: String| DurableError {
            file: file.clone(),
            message,
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| err(format!("cannot create the directory: {e}")))?;
        let db = Database::create(&file).map_err(|e| err(format!("cannot open: {e}")))?;
        let store = DurableStore { db, file };
        // Make sure the table exists, so a fresh store reads as empty.
        let tx = store.db.begin_write().map_err(|e| store.error(e))?;
        tx.open_table(TABLE).map_err(|e| store.error(e))?;
        tx.commit().map_err(|e| store.error(e))?;
        Ok(store)
    }

    /// The store's file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    fn error(&self, e: impl std::fmt::Display) -> DurableError {
        DurableError {
            file: self.file.clone(),
            message: e.to_string(),
        }
    }

    /// Every stored key and envelope.
    ///
    /// # Errors
    /// The file cannot be read, or a record does not decode (named by its key).
    pub fn load_all(&self) -> Result<Vec<(String, SerializedEnvelope)>, DurableError> {
        let tx = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = tx.open_table(TABLE).map_err(|e| self.error(e))?;
        let mut out = Vec::new();
        for item in table.iter().map_err(|e| self.error(e))? {
            let (k, v) = item.map_err(|e| self.error(e))?;
            let key = k.value().to_string();
            let envelope = wire::DdEnvelope::decode(v.value())
                .map_err(|e| e.to_string())
                .and_then(|w| envelope_from_wire(&w).map_err(|e| e.to_string()))
                .map_err(|e| self.error(format!("record `{key}` does not decode: {e}")))?;
            out.push((key, envelope));
        }
        Ok(out)
    }

    /// Stores `envelope` under `key` (committed when this returns).
    ///
    /// # Errors
    /// The write or the commit failed (disk full, file removed, ...).
    pub fn store(&self, key: &str, envelope: &SerializedEnvelope) -> Result<(), DurableError> {
        let bytes = envelope_to_wire(envelope).encode_to_vec();
        let tx = self.db.begin_write().map_err(|e| self.error(e))?;
        {
            let mut t = tx.open_table(TABLE).map_err(|e| self.error(e))?;
            t.insert(key, bytes.as_slice()).map_err(|e| self.error(e))?;
        }
        tx.commit().map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use concord_core::ddata::replicator::DataTypeId;

    #[test]
    fn stores_and_loads_and_names_the_file_when_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let env = SerializedEnvelope {
            data_type: DataTypeId(3),
            data: Some(vec![1, 2]),
            pruning: vec![],
            delta_versions: vec![],
        };
        {
            let s = DurableStore::open(dir.path()).unwrap();
            assert!(s.load_all().unwrap().is_empty());
            s.store("a", &env).unwrap();
            s.store("a", &env).unwrap();
            s.store(
                "b",
                &SerializedEnvelope {
                    data: None,
                    ..env.clone()
                },
            )
            .unwrap();
        }
        let s = DurableStore::open(dir.path()).unwrap();
        let all = s.load_all().unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0], ("a".to_string(), env));
        drop(s);
        std::fs::write(
            dir.path().join(STORE_FILE),
            b"not a database at all, just junk bytes",
        )
        .unwrap();
        let e = DurableStore::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains(STORE_FILE), "{e}");
    }
}
