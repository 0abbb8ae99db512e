//! Batched appends for [`super::PostgresStore`]: appends waiting at the same time — of many
//! entities — go to PostgreSQL as one `INSERT … SELECT … FROM unnest(…)` statement, one
//! commit (one WAL flush) for all of them.
//!
//! Each row carries its write's first sequence number and is inserted only if its
//! persistence id's highest stored number is that minus one — the same condition as a
//! single append, so every write of the batch is stored whole or not at all, independently.
//! Writes whose rows come back in `RETURNING` are stored; the others conflicted. An error
//! the server reports for the statement — a unique violation (a writer on another node
//! raced one of them), a deadlock with such a writer, a value it refuses — aborts it: the
//! batch is then retried write by write, so one write's trouble is its own. Two writes of
//! one persistence id never share a batch (the second waits for the next); a batch holds at
//! most [`MAX_ROWS`] events and [`MAX_BYTES`] of payload; a write whose entity stopped
//! waiting (its deadline passed) is not sent.

use std::collections::HashSet;
use std::sync::Arc;

use concord_core::persistence::AtomicWrite;
use deadpool_postgres::Pool;
use futures_channel::oneshot;
use tokio::sync::{mpsc, Mutex};

use super::PersistenceError;

/// Appends waiting for a batcher before `append` waits (memory bound), writes.
const QUEUE: usize = 10_000;

/// Most events (rows) in one statement.
pub(crate) const MAX_ROWS: usize = 5_000;

/// Most payload bytes in one statement.
pub(crate) const MAX_BYTES: usize = 16 << 20;

type Pending = (AtomicWrite, oneshot::Sender<Result<(), PersistenceError>>);

/// The batched append path; cheap to clone.
#[derive(Clone)]
pub(crate) struct Batcher {
    tx: mpsc::Sender<Pending>,
}

fn unavailable(e: impl std::fmt::Display) -> PersistenceError {
    PersistenceError::unavailable(format!("PostgreSQL: {e}"))
}

const BATCH_INSERT: &str = "INSERT INTO concord_event_journal \
       (persistence_id, seq_nr, entity_type, slice, payload, timestamp_ms) \
     SELECT t.pid, t.seq, t.etype, t.slice, t.payload, t.ts \
     FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::int[], \
                 $6::bytea[], $7::bigint[]) AS t(pid, seq, first, etype, slice, payload, ts) \
     WHERE COALESCE((SELECT max(j.seq_nr) FROM concord_event_journal j \
                     WHERE j.persistence_id = t.pid), 0) = t.first - 1 \
     RETURNING persistence_id";

impl Batcher {
    /// `workers` tasks, each sending up to `max_batch` writes per statement over `pool`;
    /// `single` stores one write alone (the fallback after a unique violation).
    pub(crate) fn start<F, Fut>(pool: Pool, workers: usize, max_batch: usize, single: F) -> Batcher
    where
        F: Fn(AtomicWrite) -> Fut + Clone + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<(), PersistenceError>> + Send,
    {
        let (tx, rx) = mpsc::channel::<Pending>(QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for _ in 0..workers.max(1) {
            let (pool, rx, single) = (pool.clone(), rx.clone(), single.clone());
            tokio::spawn(async move {
                let mut carried: Option<Pending> = None;
                loop {
                    let mut gather = Gather::default();
                    if let Some(p) = carried.take() {
                        gather.offer(p);
                    }
                    // Wait on the queue only with nothing in hand: a worker holding a
                    // carried write must not wait for the lock of a worker that waits for
                    // new writes (every writer may be waiting for that carried write).
                    let mut queue = if gather.batch.is_empty() {
                        Some(rx.lock().await)
                    } else {
                        rx.try_lock().ok()
                    };
                    if let Some(rx) = queue.as_mut() {
                        if gather.batch.is_empty() {
                            match rx.recv().await {
                                Some(p) => carried = gather.offer(p),
                                None => return,
                            }
                        }
                        while carried.is_none() && gather.batch.len() < max_batch {
                            match rx.try_recv() {
                                Ok(p) => carried = gather.offer(p),
                                Err(_) => break,
                            }
                        }
                    }
                    drop(queue);
                    let batch = gather.batch;
                    if batch.is_empty() {
                        continue;
                    }
                    run_batch(&pool, batch, &single).await;
                }
            });
        }
        Batcher { tx }
    }

    /// Stores `write` in the next batch.
    pub(crate) async fn append(&self, write: AtomicWrite) -> Result<(), PersistenceError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((write, reply))
            .await
            .map_err(|_| unavailable("the store has stopped"))?;
        rx.await
            .unwrap_or_else(|_| Err(unavailable("the batch was dropped")))
    }
}

/// A batch being gathered.
#[derive(Default)]
struct Gather {
    batch: Vec<Pending>,
    seen: HashSet<concord_core::persistence::PersistenceId>,
    rows: usize,
    bytes: usize,
}

impl Gather {
    /// Takes `p` into the batch, or gives it back when it does not fit (its persistence id
    /// is already in, or the rows or bytes would pass their caps): it starts the next.
    /// A write whose entity stopped waiting (its deadline passed) is dropped: storing it
    /// late would only make the entity's next incarnation conflict with it.
    fn offer(&mut self, p: Pending) -> Option<Pending> {
        if p.1.is_canceled() {
            return None;
        }
        let size: usize = p.0.payloads().iter().map(Vec::len).sum();
        if !self.batch.is_empty()
            && (self.seen.contains(p.0.persistence_id())
                || self.rows + p.0.len() > MAX_ROWS
                || self.bytes + size > MAX_BYTES)
        {
            return Some(p);
        }
        self.rows += p.0.len();
        self.bytes += size;
        self.seen.insert(p.0.persistence_id().clone());
        self.batch.push(p);
        None
    }
}

/// True if the write's numbers fit PostgreSQL's BIGINT (otherwise the single path
/// rejects it).
fn fits(w: &AtomicWrite) -> bool {
    i64::try_from(w.last_seq_nr()).is_ok() && i64::try_from(w.timestamp_ms()).is_ok()
}

/// Why a batch statement failed.
enum BatchError {
    /// The server refused the statement (a unique violation, a deadlock, a value it does
    /// not take): nothing of it is stored; each write is tried alone.
    Refused,
    /// No connection, or it broke: every write's fate is unknown.
    Failed(PersistenceError),
}

type Columns<'a> = (
    Vec<String>,
    Vec<i64>,
    Vec<i64>,
    Vec<String>,
    Vec<i32>,
    Vec<&'a [u8]>,
    Vec<i64>,
);

async fn insert(pool: &Pool, cols: &Columns<'_>) -> Result<HashSet<String>, BatchError> {
    let client = pool
        .get()
        .await
        .map_err(|e| BatchError::Failed(unavailable(e)))?;
    let stmt = client
        .prepare_cached(BATCH_INSERT)
        .await
        .map_err(|e| BatchError::Failed(unavailable(e)))?;
    let rows = client
        .query(
            &stmt,
            &[
                &cols.0, &cols.1, &cols.2, &cols.3, &cols.4, &cols.5, &cols.6,
            ],
        )
        .await
        .map_err(|e| {
            if e.as_db_error().is_some() {
                BatchError::Refused
            } else {
                BatchError::Failed(unavailable(e))
            }
        })?;
    Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
}

async fn run_batch<F, Fut>(pool: &Pool, batch: Vec<Pending>, single: &F)
where
    F: Fn(AtomicWrite) -> Fut,
    Fut: std::future::Future<Output = Result<(), PersistenceError>>,
{
    let mut cols: Columns<'_> = Default::default();
    for (w, _) in batch.iter().filter(|(w, _)| fits(w)) {
        let pid = w.persistence_id();
        let first = w.first_seq_nr() as i64;
        for (i, p) in w.payloads().iter().enumerate() {
            cols.0.push(pid.to_string());
            cols.1.push(first + i as i64);
            cols.2.push(first);
            cols.3.push(pid.entity_type().to_string());
            cols.4.push(i32::from(pid.slice()));
            cols.5.push(p.as_slice());
            cols.6.push(w.timestamp_ms() as i64);
        }
    }
    let result = if cols.0.is_empty() {
        Ok(HashSet::new())
    } else {
        insert(pool, &cols).await
    };
    drop(cols);
    match result {
        Ok(stored) => {
            for (w, reply) in batch {
                let pid = w.persistence_id();
                let r = if !fits(&w) {
                    single(w).await
                } else if stored.contains(&pid.to_string()) {
                    Ok(())
                } else {
                    Err(PersistenceError::Conflict {
                        persistence_id: pid.to_string(),
                        seq_nr: w.first_seq_nr(),
                    })
                };
                let _ = reply.send(r);
            }
        }
        Err(BatchError::Refused) => {
            for (w, reply) in batch {
                let _ = reply.send(single(w).await);
            }
        }
        Err(BatchError::Failed(e)) => {
            for (_, reply) in batch {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
