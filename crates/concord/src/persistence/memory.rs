//! [`InMemoryStore`]: journal, snapshots and durable state in this process's memory — for
//! tests (a clone shares the data, so nodes of one test process can share it). Nothing
//! survives the process, and it grows with what is written: not for production.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use concord_core::persistence::{AtomicWrite, PersistenceId, PersistentEvent};
use futures_util::FutureExt;

use super::store::{
    DurableStateStore, EventEnvelope, EventsQuery, Journal, Offset, Snapshot, SnapshotStore,
    StoreFuture, StoredState,
};
use super::PersistenceError;

#[derive(Default)]
struct Events {
    by_seq: BTreeMap<u64, (PersistentEvent, u64)>,
    highest: u64,
}

#[derive(Default)]
struct Inner {
    journals: HashMap<PersistenceId, Events>,
    /// Per entity type: ordering → (persistence id, sequence number).
    streams: HashMap<String, BTreeMap<u64, (PersistenceId, u64)>>,
    next_ordering: u64,
    snapshots: HashMap<PersistenceId, BTreeMap<u64, Snapshot>>,
    states: HashMap<PersistenceId, StoredState>,
}

/// The in-memory store; see the module docs. Its offsets are `n.n`, `n` counting events.
#[derive(Clone, Default)]
pub struct InMemoryStore {
    inner: Arc<Mutex<Inner>>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every stored event of `pid`, in order (for tests).
    pub fn events(&self, pid: &PersistenceId) -> Vec<PersistentEvent> {
        self.lock()
            .journals
            .get(pid)
            .map(|j| j.by_seq.values().map(|(e, _)| e.clone()).collect())
            .unwrap_or_default()
    }
}

impl Journal for InMemoryStore {
    fn append(&self, write: AtomicWrite) -> StoreFuture<'_, ()> {
        let result = (|| {
            let mut inner = self.lock();
            let pid = write.persistence_id().clone();
            let journal = inner.journals.entry(pid.clone()).or_default();
            // The next sequence number, and no other: an existing one (deleted ones count,
            // `highest` keeps them) is another writer's; a gap is a writer that is not
            // where the journal is.
            if Some(write.first_seq_nr()) != journal.highest.checked_add(1) {
                return Err(PersistenceError::Conflict {
                    persistence_id: pid.to_string(),
                    seq_nr: write.first_seq_nr(),
                });
            }
            let first = inner.next_ordering.saturating_add(1);
            inner.next_ordering = inner.next_ordering.saturating_add(write.len() as u64);
            let journal = inner.journals.entry(pid.clone()).or_default();
            for (i, e) in write.events().enumerate() {
                journal.highest = journal.highest.max(e.seq_nr);
                journal.by_seq.insert(e.seq_nr, (e, first + i as u64));
            }
            let stream = inner
                .streams
                .entry(pid.entity_type().to_string())
                .or_default();
            for (i, seq) in (write.first_seq_nr()..=write.last_seq_nr()).enumerate() {
                stream.insert(first + i as u64, (pid.clone(), seq));
            }
            Ok(())
        })();
        async move { result }.boxed()
    }

    fn highest_seq_nr<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, u64> {
        let h = self.lock().journals.get(pid).map_or(0, |j| j.highest);
        async move { Ok(h) }.boxed()
    }

    fn replay<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from_seq_nr: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<PersistentEvent>> {
        let events = self
            .lock()
            .journals
            .get(pid)
            .map(|j| {
                j.by_seq
                    .range(from_seq_nr..)
                    .take(max)
                    .map(|(_, (e, _))| e.clone())
                    .collect()
            })
            .unwrap_or_default();
        async move { Ok(events) }.boxed()
    }

    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, to_seq_nr: u64) -> StoreFuture<'a, ()> {
        let mut inner = self.lock();
        let mut orderings = Vec::new();
        if let Some(j) = inner.journals.get_mut(pid) {
            let keep = j.by_seq.split_off(&to_seq_nr.saturating_add(1));
            orderings.extend(j.by_seq.values().map(|(_, o)| *o));
            j.by_seq = keep;
        }
        if let Some(stream) = inner.streams.get_mut(pid.entity_type()) {
            for o in orderings {
                stream.remove(&o);
            }
        }
        async move { Ok(()) }.boxed()
    }

    fn events_by_slices<'a>(
        &'a self,
        query: &'a EventsQuery,
    ) -> StoreFuture<'a, Vec<EventEnvelope>> {
        let inner = self.lock();
        let mut out = Vec::new();
        if let Some(stream) = inner.streams.get(&query.entity_type) {
            for (&ordering, (pid, seq)) in stream.range(query.after.ordering.saturating_add(1)..) {
                if out.len() >= query.limit {
                    break;
                }
                if !query.slices.contains(&pid.slice()) {
                    continue;
                }
                if let Some((e, _)) = inner.journals.get(pid).and_then(|j| j.by_seq.get(seq)) {
                    out.push(EventEnvelope {
                        offset: Offset {
                            transaction: ordering,
                            ordering,
                        },
                        event: e.clone(),
                    });
                }
            }
        }
        async move { Ok(out) }.boxed()
    }
}

impl SnapshotStore for InMemoryStore {
    fn save<'a>(&'a self, pid: &'a PersistenceId, snapshot: Snapshot) -> StoreFuture<'a, ()> {
        self.lock()
            .snapshots
            .entry(pid.clone())
            .or_default()
            .insert(snapshot.seq_nr, snapshot);
        async move { Ok(()) }.boxed()
    }

    fn load_latest<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, Option<Snapshot>> {
        let s = self
            .lock()
            .snapshots
            .get(pid)
            .and_then(|m| m.values().next_back().cloned());
        async move { Ok(s) }.boxed()
    }

    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, max_seq_nr: u64) -> StoreFuture<'a, ()> {
        if let Some(m) = self.lock().snapshots.get_mut(pid) {
            *m = m.split_off(&max_seq_nr.saturating_add(1));
        }
        async move { Ok(()) }.boxed()
    }
}

impl DurableStateStore for InMemoryStore {
    fn get<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, StoredState> {
        let s = self.lock().states.get(pid).cloned().unwrap_or_default();
        async move { Ok(s) }.boxed()
    }

    fn upsert<'a>(
        &'a self,
        pid: &'a PersistenceId,
        revision: u64,
        payload: Option<Vec<u8>>,
    ) -> StoreFuture<'a, ()> {
        let result = (|| {
            if revision == 0 {
                return Err(PersistenceError::Rejected {
                    persistence_id: pid.to_string(),
                    reason: "revisions start at 1".into(),
                });
            }
            let mut inner = self.lock();
            let stored = inner.states.entry(pid.clone()).or_default();
            if stored.revision != revision - 1 {
                return Err(PersistenceError::Conflict {
                    persistence_id: pid.to_string(),
                    seq_nr: revision,
                });
            }
            *stored = StoredState { revision, payload };
            Ok(())
        })();
        async move { result }.boxed()
    }
}
