//! Where the replicated journal keeps a node's share: `<data-dir>/journal/`, an LSM tree
//! ([`LsmStorage`]) with the tables `journal`, `journal-index` and `journal-meta`.
//!
//! Earlier versions kept it in one redb file, `<data-dir>/journal.redb`. On start, if
//! that file exists, every record of its three tables is copied into the
//! tree (committed and fsynced in pages), then the file is renamed
//! `journal.redb.migrated` (kept, not deleted: the operator removes it). A crash during
//! the copy leaves the file in place, and the next start copies it again (the same
//! records, written again).

use std::path::Path;

use concord_core::kv::{KvStorage, StorageError, Table};
use tracing::info;

use crate::kv::lsm_storage::LsmStorage;
use crate::kv::storage::RedbStorage;

/// The journal's directory inside the data directory.
pub const JOURNAL_DIR: &str = "journal";
/// The file earlier versions kept the journal in.
pub const LEGACY_JOURNAL_FILE: &str = "journal.redb";
/// What the legacy file is renamed to once copied.
pub const MIGRATED_JOURNAL_FILE: &str = "journal.redb.migrated";

/// The journal's tables.
pub const TABLES: [Table; 3] = [Table::Journal, Table::JournalIndex, Table::JournalMeta];

/// Records copied per commit during a migration.
const COPY_PAGE: usize = 4096;

/// Opens (or creates) the journal's storage in `data_dir`, first copying a legacy
/// `journal.redb` into it; returns the storage and the records copied (0: none).
///
/// # Errors
/// The directory cannot be opened, or the legacy file cannot be read or renamed (the
/// message names it; nothing is lost: the file stays).
pub fn open(data_dir: &Path) -> Result<(LsmStorage, u64), StorageError> {
    let mut lsm = LsmStorage::open(&data_dir.join(JOURNAL_DIR), &TABLES)?;
    let legacy = data_dir.join(LEGACY_JOURNAL_FILE);
    if !legacy.exists() {
        return Ok((lsm, 0));
    }
    let mut old = RedbStorage::open_file(data_dir, LEGACY_JOURNAL_FILE, &TABLES)?;
    let mut copied = 0u64;
    for table in TABLES {
        copied += copy_table(&mut old, &mut lsm, table)?;
    }
    drop(old);
    std::fs::rename(&legacy, data_dir.join(MIGRATED_JOURNAL_FILE)).map_err(|e| {
        StorageError(format!(
            "{}: copied, but cannot rename it: {e}",
            legacy.display()
        ))
    })?;
    info!(
        records = copied,
        from = %legacy.display(),
        to = %lsm.dir().display(),
        "replicated journal: copied the journal of an earlier version"
    );
    Ok((lsm, copied))
}

/// Copies every record of `table`, a page per commit.
fn copy_table(
    from: &mut RedbStorage,
    to: &mut LsmStorage,
    table: Table,
) -> Result<u64, StorageError> {
    let end = vec![0xff; crate::kv::lsm_storage::MAX_KEY_BYTES];
    let mut start = Vec::new();
    let mut copied = 0u64;
    loop {
        let page = from.range(table, &start, &end, COPY_PAGE)?;
        let Some((last, _)) = page.last() else {
            return Ok(copied);
        };
        start = last.clone();
        start.push(0);
        for (k, v) in &page {
            to.put(table, k, v)?;
        }
        to.commit()?;
        copied += page.len() as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_legacy_journal_file_is_copied_once_and_kept_renamed() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut old = RedbStorage::open_file(dir.path(), LEGACY_JOURNAL_FILE, &TABLES).unwrap();
            for i in 0..5_000u32 {
                old.put(Table::Journal, &i.to_be_bytes(), b"entry").unwrap();
            }
            old.put(Table::JournalIndex, b"\xff\xff\xff\x01", b"index")
                .unwrap();
            old.put(Table::JournalMeta, b"standing", b"marks").unwrap();
            old.commit().unwrap();
        }
        let (mut st, copied) = open(dir.path()).unwrap();
        assert_eq!(copied, 5_002);
        assert!(!dir.path().join(LEGACY_JOURNAL_FILE).exists());
        assert!(dir.path().join(MIGRATED_JOURNAL_FILE).exists());
        assert_eq!(
            st.get(Table::Journal, &4_999u32.to_be_bytes()).unwrap(),
            Some(b"entry".to_vec())
        );
        assert_eq!(
            st.get(Table::JournalIndex, b"\xff\xff\xff\x01").unwrap(),
            Some(b"index".to_vec())
        );
        assert_eq!(
            st.get(Table::JournalMeta, b"standing").unwrap(),
            Some(b"marks".to_vec())
        );
        st.put(Table::Journal, b"new", b"after").unwrap();
        st.commit().unwrap();
        drop(st);
        // The next start finds nothing to copy and keeps what was written since.
        let (mut st, copied) = open(dir.path()).unwrap();
        assert_eq!(copied, 0);
        assert_eq!(
            st.get(Table::Journal, b"new").unwrap(),
            Some(b"after".to_vec())
        );
        assert_eq!(
            st.range(Table::Journal, b"", b"\xff", 10_000)
                .unwrap()
                .len(),
            5_001
        );
    }
}
