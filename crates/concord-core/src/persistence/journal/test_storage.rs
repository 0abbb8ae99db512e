//! [`TurnStorage`]: a test storage with the LSM tree's turns — writes wait in memory until
//! the commit, and a failed commit drops them — that counts its point reads and notes where
//! its range reads start.

use std::collections::BTreeMap;

use crate::kv::storage::{KvStorage, Record, StorageError, Table};

/// See the module docs.
#[derive(Debug, Default)]
pub(super) struct TurnStorage {
    committed: BTreeMap<(Table, Vec<u8>), Vec<u8>>,
    /// The turn's writes (`None`: a removal), seen by reads.
    pending: BTreeMap<(Table, Vec<u8>), Option<Vec<u8>>>,
    /// Point reads.
    pub(super) gets: u64,
    /// The first key of every range read.
    pub(super) range_starts: Vec<Vec<u8>>,
    /// The next commit fails and drops the turn's writes.
    pub(super) fail_next_commit: bool,
}

impl KvStorage for TurnStorage {
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
        table: Table,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Record>, StorageError> {
        self.range_starts.push(start.to_vec());
        let bounds = (table, start.to_vec())..(table, end.to_vec());
        let mut view: BTreeMap<Vec<u8>, Vec<u8>> = self
            .committed
            .range(bounds.clone())
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect();
        for ((_, k), v) in self.pending.range(bounds) {
            match v {
                Some(v) => view.insert(k.clone(), v.clone()),
                None => view.remove(k),
            };
        }
        Ok(view.into_iter().take(limit).collect())
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
