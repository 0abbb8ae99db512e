//! [`LsmStorage`]: tables in a log-structured merge tree (`fjall`, one directory per
//! store), implementing the core's [`KvStorage`] — the replicated journal's storage
//! (`<data-dir>/journal/`).
//!
//! A journal's acceptors write small records at random keys of many logs and make each
//! turn's writes durable at once. On a copy-on-write B-tree (redb, [`super::storage`])
//! every commit rewrites each touched page and the path above it; in an LSM tree a commit
//! appends one batch to the write-ahead journal and fsyncs it (the memtables are flushed
//! and compacted in the background), which is what journals of databases built for writes
//! do (Cassandra, RocksDB). Measured in docs/BENCHMARKS.md ("Persistence").
//!
//! Changes since the last [`KvStorage::commit`] are kept in memory (reads see them) and
//! written at the commit as **one atomic batch**, then fsynced (`PersistMode::SyncData`)
//! before the commit returns; changes not committed are gone after a crash or a reopen,
//! as with [`super::storage::RedbStorage`].

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use concord_core::kv::storage::Record;
use concord_core::kv::{KvStorage, StorageError, Table};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

/// Background threads (flushes, compactions) per store.
const WORKER_THREADS: usize = 1;
/// Block cache per store, bytes.
const CACHE_BYTES: u64 = 32 << 20;
/// Memtable size per table, bytes: fjall's default, 64 MiB, set explicitly (fjall keeps it
/// with the table when the table is created).
///
/// A memtable keeps every version of a key written since its last flush (a flush keeps
/// only the newest), and a range read walks them all: a log's state record is written
/// again at each accept and learn, so late in a rolling upgrade a handoff's reads of whole
/// segments stepped over thousands of versions. 16 MiB shortened those reads but made the
/// persistence benchmark's flushes four times as frequent: its p99 rose from 12–16 ms to
/// 50–98 ms (docs/BENCHMARKS.md, "Rolling upgrade", 2026-12-07), so the default stays.
pub const MEMTABLE_BYTES: u64 = 64 << 20;
/// The longest key the tree takes, bytes (longer ones are refused with an error).
pub const MAX_KEY_BYTES: usize = u16::MAX as usize;

/// Reads the bytes an [`LsmStorage`] takes on disk (its write-ahead journal and tables).
#[derive(Clone)]
pub struct DiskUsage(Database);

impl DiskUsage {
    /// Bytes on disk (0 if they cannot be counted).
    pub fn bytes(&self) -> u64 {
        self.0.disk_space().unwrap_or(0)
    }
}

impl std::fmt::Debug for DiskUsage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DiskUsage").field(&self.bytes()).finish()
    }
}

/// The nice value of the tree's background threads (flushes, compactions): the lowest
/// priority, so that they take the CPU the node's own threads leave idle.
pub const BACKGROUND_NICE: i32 = 19;

/// Opens the database on a thread of its own whose nice value is [`BACKGROUND_NICE`], so
/// that the background threads the database starts (which inherit it, as every thread
/// does its creator's on Linux) run at that priority, while no thread of the node does.
///
/// Why: a flush encodes a whole memtable (64 MiB, ~1 s of one core) at once; at the
/// default priority it takes a core from the threads that answer writes, and on a loaded
/// machine every write waits for it (docs/BENCHMARKS.md, "The flush burst"). RocksDB's
/// `Env::LowerThreadPoolCPUPriority` does the same. Where the nice value cannot be set (or
/// on systems other than Linux), the threads run at the default priority.
///
/// The cost: the opening itself — replaying the write-ahead journal into memtables after a
/// crash — runs at that priority too (the workers start inside it), so a node restarting on
/// a machine whose cores other busy processes hold replays more slowly than they run; on a
/// node's own machine, where nothing else competes while it starts, it does not.
fn open_with_background_niced(
    builder: fjall::DatabaseBuilder<Database>,
) -> Result<Database, String> {
    std::thread::Builder::new()
        .name("concord-lsm-open".into())
        .spawn(move || {
            set_own_nice(BACKGROUND_NICE);
            builder.open().map_err(|e| format!("cannot open: {e}"))
        })
        .map_err(|e| format!("cannot start the opening thread: {e}"))?
        .join()
        .unwrap_or_else(|_| Err("the opening thread panicked".into()))
}

/// Sets the calling thread's nice value; a failure is logged (debug) and otherwise
/// ignored. Linux only: there `setpriority(PRIO_PROCESS, 0, ..)` names the calling thread,
/// where other systems would renice the whole process.
fn set_own_nice(nice: i32) {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(None, nice) {
        tracing::debug!(nice, error = %e, "cannot lower the storage engine's background threads' priority");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

fn error(e: impl std::fmt::Display) -> StorageError {
    StorageError(e.to_string())
}

/// Tables in one LSM tree directory; see the module docs.
pub struct LsmStorage {
    db: Database,
    dir: PathBuf,
    tables: BTreeMap<Table, Keyspace>,
    /// Changes since the last commit, per table (`None`: removed).
    pending: BTreeMap<Table, BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
}

impl std::fmt::Debug for LsmStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LsmStorage")
            .field("dir", &self.dir)
            .field(
                "pending",
                &self.pending.values().map(BTreeMap::len).sum::<usize>(),
            )
            .finish()
    }
}

impl LsmStorage {
    /// Opens (or creates) the store in directory `dir` with `tables`.
    ///
    /// # Errors
    /// The directory cannot be created or is not a store (corrupt, or held by another
    /// process); the message names the directory.
    pub fn open(dir: &Path, tables: &[Table]) -> Result<LsmStorage, StorageError> {
        let named = |e: String| StorageError(format!("{}: {e}", dir.display()));
        std::fs::create_dir_all(dir)
            .map_err(|e| named(format!("cannot create the directory: {e}")))?;
        let builder = Database::builder(dir)
            .manual_journal_persist(true)
            .worker_threads(WORKER_THREADS)
            .cache_size(CACHE_BYTES);
        let db = open_with_background_niced(builder).map_err(named)?;
        let mut opened = BTreeMap::new();
        for &t in tables {
            let ks = db
                .keyspace(t.name(), || {
                    KeyspaceCreateOptions::default().max_memtable_size(MEMTABLE_BYTES)
                })
                .map_err(|e| named(e.to_string()))?;
            opened.insert(t, ks);
        }
        Ok(LsmStorage {
            db,
            dir: dir.to_path_buf(),
            tables: opened,
            pending: BTreeMap::new(),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A handle that reads the bytes this store takes on disk, for a gauge.
    pub fn disk_usage(&self) -> DiskUsage {
        DiskUsage(self.db.clone())
    }

    fn table(&self, t: Table) -> Result<&Keyspace, StorageError> {
        self.tables
            .get(&t)
            .ok_or_else(|| StorageError(format!("table {} is not open", t.name())))
    }
}

impl KvStorage for LsmStorage {
    fn get(&mut self, table: Table, key: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        if let Some(v) = self.pending.get(&table).and_then(|t| t.get(key)) {
            return Ok(v.clone());
        }
        Ok(self
            .table(table)?
            .get(key)
            .map_err(error)?
            .map(|v| v.to_vec()))
    }

    fn put(&mut self, table: Table, key: &[u8], value: &[u8]) -> Result<(), StorageError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(StorageError(format!(
                "a key of {} bytes (1 to {MAX_KEY_BYTES})",
                key.len()
            )));
        }
        if u32::try_from(value.len()).is_err() {
            return Err(StorageError(format!("a value of {} bytes", value.len())));
        }
        self.table(table)?;
        self.pending
            .entry(table)
            .or_default()
            .insert(key.to_vec(), Some(value.to_vec()));
        Ok(())
    }

    fn remove(&mut self, table: Table, key: &[u8]) -> Result<(), StorageError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            // No such record can exist.
            return Ok(());
        }
        self.table(table)?;
        self.pending
            .entry(table)
            .or_default()
            .insert(key.to_vec(), None);
        Ok(())
    }

    fn range(
        &mut self,
        table: Table,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> Result<Vec<Record>, StorageError> {
        if start >= end || limit == 0 {
            return Ok(Vec::new());
        }
        let mut disk = self.table(table)?.range(start..end);
        let mut next_disk = || -> Result<Option<Record>, StorageError> {
            match disk.next() {
                Some(g) => {
                    let (k, v) = g.into_inner().map_err(error)?;
                    Ok(Some((k.to_vec(), v.to_vec())))
                }
                None => Ok(None),
            }
        };
        let mut changes = self
            .pending
            .get(&table)
            .into_iter()
            .flat_map(|t| t.range::<[u8], _>((Bound::Included(start), Bound::Excluded(end))))
            .peekable();
        let mut out = Vec::new();
        let mut on_disk = next_disk()?;
        while out.len() < limit {
            let changed_first = match (&on_disk, changes.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((dk, _)), Some((ck, _))) => *ck <= dk,
            };
            if changed_first {
                let Some((ck, cv)) = changes.next() else {
                    break;
                };
                if on_disk.as_ref().is_some_and(|(dk, _)| dk == ck) {
                    // The change replaces the record on disk.
                    on_disk = next_disk()?;
                }
                if let Some(v) = cv {
                    out.push((ck.clone(), v.clone()));
                }
            } else if let Some(r) = on_disk.take() {
                out.push(r);
                on_disk = next_disk()?;
            }
        }
        Ok(out)
    }

    fn commit(&mut self) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut batch = self.db.batch();
        for (t, changes) in std::mem::take(&mut self.pending) {
            let ks = self.table(t)?;
            for (k, v) in changes {
                match v {
                    Some(v) => batch.insert(ks, k, v),
                    None => batch.remove(ks, k),
                }
            }
        }
        batch.commit().map_err(error)?;
        self.db.persist(PersistMode::SyncData).map_err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLES: [Table; 2] = [Table::Journal, Table::JournalMeta];

    #[test]
    fn committed_records_survive_a_reopen_and_uncommitted_ones_do_not() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut st = LsmStorage::open(dir.path(), &TABLES).unwrap();
            st.put(Table::Journal, b"a", b"1").unwrap();
            st.put(Table::JournalMeta, b"a", b"meta").unwrap();
            st.commit().unwrap();
            st.put(Table::Journal, b"b", b"2").unwrap();
            assert_eq!(st.get(Table::Journal, b"b").unwrap(), Some(b"2".to_vec()));
            // Dropped without a commit.
        }
        let mut st = LsmStorage::open(dir.path(), &TABLES).unwrap();
        assert_eq!(st.get(Table::Journal, b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(st.get(Table::Journal, b"b").unwrap(), None);
        assert_eq!(
            st.get(Table::JournalMeta, b"a").unwrap(),
            Some(b"meta".to_vec())
        );
        assert_eq!(st.range(Table::Journal, b"", b"\xff", 10).unwrap().len(), 1);
        assert!(st.disk_usage().bytes() > 0);
    }

    #[test]
    fn a_range_merges_uncommitted_changes_over_the_records_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = LsmStorage::open(dir.path(), &TABLES).unwrap();
        for k in [b"a", b"c", b"e", b"g"] {
            st.put(Table::Journal, k, b"disk").unwrap();
        }
        st.put(Table::JournalMeta, b"d", b"other table").unwrap();
        st.commit().unwrap();
        st.put(Table::Journal, b"b", b"new").unwrap();
        st.put(Table::Journal, b"c", b"changed").unwrap();
        st.remove(Table::Journal, b"e").unwrap();
        st.put(Table::Journal, b"h", b"new").unwrap();
        let all = st.range(Table::Journal, b"a", b"z", 100).unwrap();
        let want: Vec<Record> = [
            ("a", "disk"),
            ("b", "new"),
            ("c", "changed"),
            ("g", "disk"),
            ("h", "new"),
        ]
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect();
        assert_eq!(all, want);
        assert_eq!(
            st.range(Table::Journal, b"b", b"g", 100).unwrap(),
            want[1..3]
        );
        assert_eq!(st.range(Table::Journal, b"a", b"z", 2).unwrap(), want[..2]);
        assert_eq!(st.get(Table::Journal, b"e").unwrap(), None);
        st.commit().unwrap();
        assert_eq!(st.range(Table::Journal, b"a", b"z", 100).unwrap(), want);
    }

    #[test]
    fn a_key_the_tree_cannot_hold_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = LsmStorage::open(dir.path(), &TABLES).unwrap();
        assert!(st.put(Table::Journal, b"", b"v").is_err());
        assert!(st
            .put(Table::Journal, &vec![1; MAX_KEY_BYTES + 1], b"v")
            .is_err());
        assert!(
            st.put(Table::Meta, b"k", b"v").is_err(),
            "a table not opened"
        );
        st.remove(Table::Journal, b"").unwrap();
        st.commit().unwrap();
        assert_eq!(st.range(Table::Journal, b"", b"\xff", 10).unwrap(), vec![]);
    }

    /// The names of this process's threads (Linux).
    fn thread_names() -> Vec<String> {
        threads().into_iter().map(|(_, name)| name).collect()
    }

    /// Each thread's id and name.
    fn threads() -> Vec<(i32, String)> {
        std::fs::read_dir("/proc/self/task")
            .map(|d| {
                d.filter_map(|t| {
                    let t = t.ok()?;
                    let tid = t.file_name().to_str()?.parse().ok()?;
                    let name = std::fs::read_to_string(t.path().join("comm")).ok()?;
                    Some((tid, name.trim().to_string()))
                })
                .collect()
            })
            .unwrap_or_default()
    }

    /// The tree's background threads (flushes, compactions) run at the lowest priority;
    /// the thread that opened the store keeps its own.
    #[test]
    #[cfg(target_os = "linux")]
    fn background_threads_run_at_the_lowest_priority_and_the_opener_keeps_its_own() {
        use rustix::process::{getpriority_process, Pid};
        let before = getpriority_process(None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let _st = LsmStorage::open(dir.path(), &TABLES).unwrap();
        assert_eq!(getpriority_process(None).unwrap(), before);
        // A worker names itself once it runs: wait for it (the wait is the test's only
        // clock; a worker that never appears fails it).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let workers = loop {
            let w: Vec<i32> = threads()
                .into_iter()
                .filter(|(_, n)| n == "fjall:worker")
                .map(|(tid, _)| tid)
                .collect();
            if !w.is_empty() {
                break w;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no worker thread: {:?}",
                threads()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        // A worker of another test's store may end meanwhile: only the threads still there
        // are read (this store's own live as long as it does).
        let mut read = 0;
        for tid in workers {
            if let Ok(nice) = getpriority_process(Pid::from_raw(tid)) {
                assert_eq!(nice, BACKGROUND_NICE, "worker thread {tid}");
                read += 1;
            }
        }
        assert!(read > 0, "no worker thread's priority could be read");
    }

    /// The patched lsm-tree (vendor/README.md): versions removed at a memtable rotation
    /// are dropped on the `lsm-tree-retire` thread, not under the version lock every write
    /// takes; the records flushed with them stay readable.
    #[test]
    #[cfg(target_os = "linux")]
    fn memtables_rotated_away_are_dropped_off_the_writers_path_and_their_records_stay() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = LsmStorage::open(dir.path(), &TABLES).unwrap();
        for round in 0..4u32 {
            for i in 0..1_000u32 {
                let k = [round.to_be_bytes(), i.to_be_bytes()].concat();
                st.put(Table::Journal, &k, b"value").unwrap();
            }
            st.commit().unwrap();
            let ks = st.table(Table::Journal).unwrap();
            ks.rotate_memtable_and_wait().unwrap();
        }
        assert!(
            thread_names().iter().any(|n| n == "lsm-tree-retire"),
            "no retire thread: {:?}",
            thread_names()
        );
        assert_eq!(
            st.range(Table::Journal, b"", b"\xff", 10_000)
                .unwrap()
                .len(),
            4_000
        );
        assert_eq!(
            st.get(
                Table::Journal,
                &[0u32.to_be_bytes(), 7u32.to_be_bytes()].concat()
            )
            .unwrap(),
            Some(b"value".to_vec())
        );
    }

    #[test]
    fn a_directory_held_by_another_store_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let _held = LsmStorage::open(dir.path(), &TABLES).unwrap();
        match LsmStorage::open(dir.path(), &TABLES) {
            Err(e) => assert!(e.0.contains(&dir.path().display().to_string()), "{e}"),
            Ok(_) => panic!("a second store opened a held directory"),
        }
    }
}
