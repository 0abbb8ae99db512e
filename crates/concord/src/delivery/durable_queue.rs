//! [`DurableQueue`]: a producer's durable queue in the persistence store (Akka's
//! `EventSourcedProducerQueue`): the log `delivery-producer|<producer id>` of the core's
//! [`QueueEvent`]s, written through the node's journal (the built-in replicated store or
//! PostgreSQL), so a producer that restarts sends again what was never confirmed.
//!
//! Every message is recorded before its `send` returns and before it leaves; confirmations
//! are recorded in batches (a confirmation lost with a crash only sends a message again,
//! which its consumer drops). The log's events before the oldest unconfirmed message are
//! deleted as confirmations come in, after an empty marker snapshot at the cut; a recovery
//! reads from the newest marker on and requires every event after it. The cut is always at
//! the end of a whole write: a journal answers reads from the first number of a write, so
//! a recovery starting inside one found nothing there. (Before the marker, a recovery read
//! from 1 after a deletion found nothing at all on the replicated journal, and a restarted
//! producer took its queue for empty: `tests/delivery_processes.rs` found both.) Appends are
//! conditional on the sequence number, so two producers running with one id cannot
//! interleave: the second's write fails and it stops.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use concord_core::delivery::{DurableQueueState, Incarnation, QueueEvent};
use concord_core::persistence::{AtomicWrite, PersistenceId};

use super::error::DeliveryError;
use crate::persistence::{Journal, PersistenceError, Snapshot, SnapshotStore, Stores};
use crate::sharding::entity::{decode, encode};

/// The entity type of producer queues' persistence ids.
pub const QUEUE_ENTITY_TYPE: &str = "delivery-producer";
/// Events read per replay query.
const PAGE: usize = 1_000;
/// A store operation must finish within this.
const STORE_TIMEOUT: Duration = Duration::from_secs(30);
/// Delete once this many events are no longer needed.
const DELETE_EVERY: u64 = 256;

/// A producer's queue log.
pub(super) struct DurableQueue {
    journal: Arc<dyn Journal>,
    snapshots: Arc<dyn SnapshotStore>,
    pid: PersistenceId,
    highest: u64,
    deleted_to: u64,
    /// The last event of each write above `deleted_to` that this run knows (those it made,
    /// and the log's end when it was read): a journal keeps a write whole, so the log is
    /// cut only after one.
    ends: VecDeque<u64>,
    state: DurableQueueState,
    /// Confirmations not written yet: the highest per (consumer, incarnation).
    confirmations: BTreeMap<(String, Incarnation), u64>,
    /// Work-pulling messages confirmed, not written yet.
    done: Vec<u64>,
    /// When the last write ended.
    written_at: Instant,
    /// The deletion running beside the writes, if any: its cut and its task.
    compacting: Option<(u64, tokio::task::JoinHandle<Result<(), String>>)>,
}

impl Drop for DurableQueue {
    fn drop(&mut self) {
        // A queue read again meanwhile must not see a deletion go on under it.
        if let Some((_, task)) = self.compacting.take() {
            task.abort();
        }
    }
}

/// Ids per [`QueueEvent::Done`] event.
const DONE_PER_EVENT: usize = 4_096;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn store_error(what: &str, e: impl std::fmt::Display) -> DeliveryError {
    DeliveryError::Store(format!("{what}: {e}"))
}

impl DurableQueue {
    /// Reads the queue of `producer_id` whole.
    ///
    /// # Errors
    /// [`DeliveryError::Store`]: the id makes no persistence id, the store failed or timed
    /// out, or an event does not decode.
    pub(super) async fn recover(stores: &Stores, producer_id: &str) -> Result<Self, DeliveryError> {
        let pid = PersistenceId::new(QUEUE_ENTITY_TYPE, producer_id)
            .map_err(|e| store_error("producer id", e))?;
        let journal = stores.journal.clone();
        let read = async {
            let failed = |seq_nr: u64, reason: String| PersistenceError::RecoveryFailed {
                persistence_id: pid.to_string(),
                seq_nr,
                reason,
            };
            // Where the log starts: after the newest marker snapshot (the events up to it
            // were deleted, not needed), with the first page in the same query where the
            // journal keeps the snapshots.
            let start = if stores.snapshots_in_journal {
                journal.replay_from_snapshot(&pid, PAGE).await?
            } else {
                None
            };
            let (snapshot, first) = match start {
                Some(s) => (s.snapshot, Some((s.events, s.highest))),
                None => (stores.snapshots.load_latest(&pid).await?, None),
            };
            let from = snapshot.map_or(1, |s| s.seq_nr.saturating_add(1));
            let (mut batch, highest) = match first {
                Some(first) => first,
                None => journal.replay_with_highest(&pid, from, PAGE).await?,
            };
            if batch.first().is_none_or(|e| e.seq_nr != from) && from <= highest {
                batch = journal.replay(&pid, from, PAGE).await?;
            }
            let mut state = DurableQueueState::new();
            let mut next = from;
            while next <= highest {
                let before = next;
                for event in std::mem::take(&mut batch)
                    .into_iter()
                    .take_while(|e| e.seq_nr <= highest)
                {
                    // Every event from the start on: one missing would lose messages.
                    if event.seq_nr != next {
                        return Err(failed(
                            next,
                            format!("event {next} is missing (found {})", event.seq_nr),
                        ));
                    }
                    let e: QueueEvent = decode(&event.payload).map_err(|e| {
                        failed(event.seq_nr, format!("the event does not decode: {e}"))
                    })?;
                    state.apply(event.seq_nr, e);
                    next = event.seq_nr + 1;
                }
                if next == before {
                    return Err(failed(
                        next,
                        format!("events {next} to {highest} are missing"),
                    ));
                }
                if next <= highest {
                    batch = journal.replay(&pid, next, PAGE).await?;
                }
            }
            Ok((state, highest, from - 1))
        };
        let (state, highest, deleted_to) = tokio::time::timeout(STORE_TIMEOUT, read)
            .await
            .map_err(|_| store_error("reading the queue", "timed out"))?
            .map_err(|e| store_error("reading the queue", e))?;
        if state.skipped > 0 {
            tracing::warn!(producer = %producer_id, skipped = state.skipped, "durable queue events out of order were skipped");
        }
        Ok(DurableQueue {
            journal,
            snapshots: stores.snapshots.clone(),
            pid,
            highest,
            deleted_to,
            ends: (highest > deleted_to)
                .then_some(highest)
                .into_iter()
                .collect(),
            state,
            confirmations: BTreeMap::new(),
            done: Vec::new(),
            written_at: Instant::now(),
            compacting: None,
        })
    }

    /// What the queue holds.
    pub(super) fn state(&self) -> &DurableQueueState {
        &self.state
    }

    /// Notes a confirmation, written with the next write (the producer writes what is
    /// noted within about two seconds: [`super::recorder::WRITE_CONFIRMATIONS_IDLE`]).
    pub(super) fn confirmed(&mut self, entity_id: String, incarnation: Incarnation, seq_nr: u64) {
        let c = self
            .confirmations
            .entry((entity_id, incarnation))
            .or_default();
        *c = (*c).max(seq_nr);
    }

    /// Notes that work-pulling message `id` was confirmed, written with the next write.
    pub(super) fn done(&mut self, id: u64) {
        self.done.push(id);
    }

    /// True if confirmations wait to be written.
    pub(super) fn has_confirmations(&self) -> bool {
        !self.confirmations.is_empty() || !self.done.is_empty()
    }

    /// How long since the last write ended.
    pub(super) fn idle_for(&self) -> Duration {
        self.written_at.elapsed()
    }

    /// Writes `sent` (and the confirmations noted) after the log's end, in atomic writes
    /// of at most 1000 events; then starts deleting what is no longer needed, if enough is
    /// ([`DurableQueue::compact`]).
    ///
    /// # Errors
    /// [`DeliveryError::Store`]: the write failed (another producer with this id wrote
    /// first, the store is unavailable or timed out). The producer must stop: what it holds
    /// may not be on disk.
    pub(super) async fn write(&mut self, sent: Vec<QueueEvent>) -> Result<(), DeliveryError> {
        let confirmations = std::mem::take(&mut self.confirmations);
        let mut events: Vec<QueueEvent> = confirmations
            .into_iter()
            .map(|((entity_id, incarnation), seq_nr)| QueueEvent::Confirmed {
                entity_id,
                incarnation,
                seq_nr,
            })
            .collect();
        let done = std::mem::take(&mut self.done);
        events.extend(
            done.chunks(DONE_PER_EVENT)
                .map(|ids| QueueEvent::Done { ids: ids.to_vec() }),
        );
        events.extend(sent);
        for chunk in events.chunks(AtomicWrite::MAX_EVENTS) {
            let payloads = chunk
                .iter()
                .map(|e| encode(e).map_err(|e| store_error("encoding", e)))
                .collect::<Result<Vec<_>, _>>()?;
            let first = self.highest + 1;
            let write = AtomicWrite::new(self.pid.clone(), first, payloads, now_ms())
                .map_err(|e| store_error("writing", e))?;
            tokio::time::timeout(STORE_TIMEOUT, self.journal.append(write))
                .await
                .map_err(|_| store_error("writing", "timed out"))?
                .map_err(|e| store_error("writing", e))?;
            for (i, e) in chunk.iter().enumerate() {
                self.state.apply(first + i as u64, e.clone());
            }
            self.highest += chunk.len() as u64;
            self.ends.push_back(self.highest);
        }
        self.written_at = Instant::now();
        self.compact();
        Ok(())
    }

    /// Deletes the events no longer needed, once enough are: first a marker snapshot at
    /// the new start (empty: the state is the fold of the events after it), then the events
    /// up to it. A failure is logged: a later call tries again; a marker saved without its
    /// deletion only makes the next recovery start there.
    ///
    /// The deletion runs in a task of its own, beside the writes, one at a time: awaited
    /// in the write, its three store requests held up every `send` behind them, once per
    /// 256 events — in a rolling upgrade's load, the sample log's slowest 1 % of requests
    /// (docs/BENCHMARKS.md, "Rolling upgrade", stop 62). Dropping the queue stops it.
    fn compact(&mut self) {
        if let Some((to, task)) = self.compacting.take() {
            if !task.is_finished() {
                self.compacting = Some((to, task));
                return;
            }
            match task.now_or_never() {
                Some(Ok(Ok(()))) => {
                    self.deleted_to = self.deleted_to.max(to);
                    while self.ends.front().is_some_and(|e| *e <= to) {
                        self.ends.pop_front();
                    }
                }
                Some(Ok(Err(e))) => {
                    tracing::debug!(queue = %self.pid, error = %e, "durable queue events not deleted yet")
                }
                _ => tracing::debug!(queue = %self.pid, "the durable queue's deletion stopped"),
            }
        }
        // The last write boundary at or before the first event still needed.
        let limit = self.state.deletable_up_to(self.highest);
        let Some(to) = self.ends.iter().rev().find(|e| **e <= limit).copied() else {
            return;
        };
        if to < self.deleted_to + DELETE_EVERY {
            return;
        }
        let marker = Snapshot {
            seq_nr: to,
            timestamp_ms: now_ms(),
            payload: Vec::new(),
        };
        let (journal, snapshots, pid) = (
            self.journal.clone(),
            self.snapshots.clone(),
            self.pid.clone(),
        );
        let compact = async move {
            snapshots.save(&pid, marker).await?;
            journal.delete_to(&pid, to).await?;
            // Older markers are of no use (a store that keeps only the newest has none).
            snapshots.delete_to(&pid, to - 1).await
        };
        let task = tokio::spawn(async move {
            match tokio::time::timeout(STORE_TIMEOUT, compact).await {
                Ok(r) => r.map_err(|e: PersistenceError| e.to_string()),
                Err(_) => Err("timed out".to_string()),
            }
        });
        self.compacting = Some((to, task));
    }

    /// Waits for the deletion running, if any, and takes its outcome (tests).
    #[cfg(test)]
    async fn compacted(&mut self) {
        loop {
            match self.compacting.as_ref() {
                Some((_, task)) if !task.is_finished() => tokio::task::yield_now().await,
                Some(_) => self.compact(),
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persistence::{InMemoryStore, StoreFuture};

    fn incarnation() -> Incarnation {
        Incarnation {
            started_ms: 1,
            generation: 1,
            nonce: 2,
        }
    }

    #[tokio::test]
    async fn a_queue_read_again_after_its_log_was_cut_holds_what_is_unconfirmed() {
        let stores = Stores::of(InMemoryStore::new());
        let mut q = DurableQueue::recover(&stores, "p@n").await.unwrap();
        // 1000 messages to "a" in writes of 7, all confirmed but the last 3; 5 to "b", none
        // confirmed.
        for seq in 1..=1000u64 {
            let sent = |seq: u64| QueueEvent::Sent {
                entity_id: "a".into(),
                incarnation: incarnation(),
                seq_nr: seq,
                payload: seq.to_be_bytes().to_vec(),
            };
            if seq % 7 == 0 || seq == 1000 {
                let from = seq - (seq - 1) % 7;
                q.write((from..=seq).map(sent).collect()).await.unwrap();
                // Confirmed once sent (recorded with the next write).
                q.confirmed("a".into(), incarnation(), seq.min(997));
            }
            if seq % 100 == 0 && seq >= 600 {
                q.write(vec![QueueEvent::Sent {
                    entity_id: "b".into(),
                    incarnation: incarnation(),
                    seq_nr: (seq - 500) / 100,
                    payload: vec![],
                }])
                .await
                .unwrap();
            }
        }
        q.write(Vec::new()).await.unwrap();
        q.compacted().await;
        assert!(q.deleted_to > 0, "never cut");
        let ends: Vec<u64> = q.ends.iter().copied().collect();
        assert!(ends.windows(2).all(|w| w[0] < w[1]) && ends.first() > Some(&q.deleted_to));
        let again = DurableQueue::recover(&stores, "p@n").await.unwrap();
        assert_eq!(again.state(), q.state());
        let held: Vec<(String, Vec<u64>)> = again
            .state()
            .entities()
            .map(|(id, e)| {
                (
                    id.clone(),
                    e.unconfirmed.iter().map(|(n, _, _)| *n).collect(),
                )
            })
            .collect();
        assert_eq!(
            held,
            vec![
                ("a".to_string(), vec![998, 999, 1000]),
                ("b".to_string(), vec![1, 2, 3, 4, 5]),
            ]
        );
        // The events before the cut are gone.
        let first = stores
            .journal
            .replay(&again.pid, 1, 10)
            .await
            .unwrap()
            .first()
            .map(|e| e.seq_nr);
        assert!(first.is_none_or(|f| f > 1), "{first:?}");
    }

    /// The snapshots of an in-memory store, whose saves wait for a permit of `gate`.
    struct GatedSnapshots {
        inner: InMemoryStore,
        gate: Arc<tokio::sync::Semaphore>,
    }

    impl SnapshotStore for GatedSnapshots {
        fn save<'a>(&'a self, pid: &'a PersistenceId, snapshot: Snapshot) -> StoreFuture<'a, ()> {
            Box::pin(async move {
                let _permit = self.gate.acquire().await;
                self.inner.save(pid, snapshot).await
            })
        }
        fn load_latest<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, Option<Snapshot>> {
            self.inner.load_latest(pid)
        }
        fn delete_to<'a>(&'a self, pid: &'a PersistenceId, max_seq_nr: u64) -> StoreFuture<'a, ()> {
            SnapshotStore::delete_to(&self.inner, pid, max_seq_nr)
        }
    }

    #[tokio::test]
    async fn writes_go_on_while_a_deletion_is_held_and_it_lands_afterwards() {
        let store = InMemoryStore::new();
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let stores = Stores {
            journal: Arc::new(store.clone()),
            snapshots: Arc::new(GatedSnapshots {
                inner: store.clone(),
                gate: gate.clone(),
            }),
            state: Arc::new(store.clone()),
            snapshots_in_journal: false,
        };
        let sent = |seq: u64| QueueEvent::Sent {
            entity_id: "a".into(),
            incarnation: incarnation(),
            seq_nr: seq,
            payload: vec![],
        };
        let mut q = DurableQueue::recover(&stores, "p@n").await.unwrap();
        // 300 messages, each confirmed: the next write records the confirmation and
        // starts a deletion, whose marker save is held.
        for seq in 1..=300u64 {
            q.write(vec![sent(seq)]).await.unwrap();
            q.confirmed("a".into(), incarnation(), seq);
        }
        tokio::time::timeout(Duration::from_secs(5), q.write(vec![sent(301)]))
            .await
            .expect("the write waited for the deletion it started")
            .unwrap();
        assert!(q.compacting.is_some(), "no deletion started");
        // Writes go on while it is held (awaited in the write, they waited for it).
        for seq in 302..=310u64 {
            tokio::time::timeout(Duration::from_secs(5), q.write(vec![sent(seq)]))
                .await
                .expect("a write waited for the deletion")
                .unwrap();
        }
        assert_eq!(q.deleted_to, 0);
        gate.add_permits(100);
        q.compacted().await;
        assert!(q.deleted_to >= 256, "{}", q.deleted_to);
        let again = DurableQueue::recover(&stores, "p@n").await.unwrap();
        assert_eq!(again.state(), q.state());
        let held: Vec<u64> = again
            .state()
            .entities()
            .flat_map(|(_, e)| e.unconfirmed.iter().map(|(n, _, _)| *n))
            .collect();
        assert_eq!(held, (301..=310).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn confirmations_are_written_by_themselves_only_after_a_quiet_second() {
        let stores = Stores::of(InMemoryStore::new());
        let queue = DurableQueue::recover(&stores, "p@n").await.unwrap();
        let mut r = super::super::recorder::Recorder::new(Some(queue));
        let q = r.queue_mut().unwrap();
        q.write(vec![QueueEvent::Sent {
            entity_id: "a".into(),
            incarnation: incarnation(),
            seq_nr: 1,
            payload: vec![],
        }])
        .await
        .unwrap();
        q.confirmed("a".into(), incarnation(), 1);
        let idle = super::super::recorder::WRITE_CONFIRMATIONS_IDLE;
        // Just written: the confirmation waits for the next write.
        r.write_confirmations(idle).await.unwrap();
        assert!(r.queue_mut().unwrap().has_confirmations());
        // Nothing written for `idle`: written by itself.
        r.write_confirmations(Duration::ZERO).await.unwrap();
        assert!(!r.queue_mut().unwrap().has_confirmations());
        assert_eq!(r.queue_mut().unwrap().highest, 2);
    }
}
