//! [`PostgresStore`]: journal, snapshots and durable state in PostgreSQL (13 or newer),
//! through `tokio-postgres` with a `deadpool-postgres` pool. The schema
//! (`postgres_schema.sql`: tables `concord_event_journal`, `concord_snapshot`,
//! `concord_durable_state`) is created on connect when absent.
//!
//! - **Single writer**: an append is one `INSERT … SELECT` that inserts only if the
//!   persistence id's highest sequence number is the write's first − 1; the primary key
//!   `(persistence_id, seq_nr)` refuses a concurrent writer that passed the same check. No
//!   row inserted, or a unique violation, is [`PersistenceError::Conflict`]. One statement:
//!   all events of the write or none.
//! - **Durable state**: revision 1 inserts (`ON CONFLICT DO NOTHING`), later revisions
//!   update `WHERE revision = previous`; no row changed is a conflict (r2dbc's
//!   `assert-single-writer`).
//! - **Events by slices**: each event row carries its transaction id (`xid8`) and an
//!   identity `ordering`; a query returns rows of transactions older than the oldest one
//!   still running (`pg_snapshot_xmin(pg_current_snapshot())`), ordered by
//!   `(tx_id, ordering)` — every later commit has a larger transaction id, so resuming
//!   after an offset misses nothing (a long-running transaction on the database delays the
//!   stream until it ends).
//! - **Deleting events** keeps the highest row as a marker (`deleted`, payload emptied), so
//!   the highest sequence number is never lost.
//!
//! Connections are plain TCP or a Unix socket: keep PostgreSQL on loopback, a socket, or
//! a private network.

use std::str::FromStr;
use std::time::Duration;

use concord_core::persistence::{AtomicWrite, PersistenceId, PersistentEvent};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures_util::FutureExt;
use tokio_postgres::NoTls;

use super::postgres_batch::Batcher;

use super::store::{
    DurableStateStore, EventEnvelope, EventsQuery, Journal, Offset, Snapshot, SnapshotStore,
    StoreFuture, StoredState,
};
use super::PersistenceError;

/// Most writes in one batch statement.
const MAX_BATCH: usize = 500;

/// The schema, created on connect.
pub const SCHEMA: &str = include_str!("postgres_schema.sql");

/// The PostgreSQL store; see the module docs. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    batcher: Batcher,
}

fn unavailable(e: impl std::fmt::Display) -> PersistenceError {
    PersistenceError::unavailable(format!("PostgreSQL: {e}"))
}

/// `v` as a BIGINT, or a rejection naming what it is.
fn bigint(pid: &PersistenceId, what: &str, v: u64) -> Result<i64, PersistenceError> {
    i64::try_from(v).map_err(|_| PersistenceError::Rejected {
        persistence_id: pid.to_string(),
        reason: format!("{what} {v} is beyond PostgreSQL's BIGINT"),
    })
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl PostgresStore {
    /// Connects to `url` (a `postgres://` URL or `key=value` string; `host=/dir` for a
    /// Unix socket) with up to `pool_size` connections — connecting, waiting for a pooled
    /// connection and each statement (`statement_timeout`) bounded by `timeout` — and
    /// creates the schema if absent.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`] if the URL does not parse (the message does not
    /// repeat it: it may hold a password), the server cannot be reached, or the schema
    /// cannot be created.
    pub async fn connect(
        url: &str,
        pool_size: usize,
        timeout: Duration,
    ) -> Result<PostgresStore, PersistenceError> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|_| unavailable("the connection URL does not parse"))?;
        config.connect_timeout(timeout);
        // Every statement is bounded too: a batch blocked on a lock does not wait forever.
        let options = format!(
            "{} -c statement_timeout={}",
            config.get_options().unwrap_or_default(),
            timeout.as_millis().max(1)
        );
        config.options(options.trim_start());
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(unavailable)?;
        let client = pool.get().await.map_err(unavailable)?;
        client.batch_execute(SCHEMA).await.map_err(unavailable)?;
        drop(client);
        // Half the connections batch appends; the rest serve recoveries and queries.
        let single_pool = pool.clone();
        let batcher = Batcher::start(pool.clone(), pool_size.div_ceil(2), MAX_BATCH, move |w| {
            append_single(single_pool.clone(), w)
        });
        Ok(PostgresStore { pool, batcher })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, PersistenceError> {
        self.pool.get().await.map_err(unavailable)
    }
}

/// Stores one write alone: the single-statement conditional insert (see the module docs).
async fn append_single(pool: Pool, write: AtomicWrite) -> Result<(), PersistenceError> {
    let pid = write.persistence_id();
    let first = bigint(pid, "sequence number", write.first_seq_nr())?;
    bigint(pid, "sequence number", write.last_seq_nr())?;
    let ts = bigint(pid, "timestamp", write.timestamp_ms())?;
    let client = pool.get().await.map_err(unavailable)?;
    let stmt = client
        .prepare_cached(
            "INSERT INTO concord_event_journal \
               (persistence_id, seq_nr, entity_type, slice, payload, timestamp_ms) \
             SELECT $1, $2::bigint + t.i - 1, $3, $4, t.p, $5 \
             FROM unnest($6::bytea[]) WITH ORDINALITY AS t(p, i) \
             WHERE COALESCE((SELECT max(seq_nr) FROM concord_event_journal \
                             WHERE persistence_id = $1), 0) = $2::bigint - 1",
        )
        .await
        .map_err(unavailable)?;
    let conflict = || PersistenceError::Conflict {
        persistence_id: pid.to_string(),
        seq_nr: write.first_seq_nr(),
    };
    let rows = client
        .execute(
            &stmt,
            &[
                &pid.to_string(),
                &first,
                &pid.entity_type(),
                &i32::from(pid.slice()),
                &ts,
                &write.payloads(),
            ],
        )
        .await
        .map_err(|e| {
            if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) {
                conflict()
            } else {
                unavailable(e)
            }
        })?;
    if rows == 0 {
        return Err(conflict());
    }
    Ok(())
}

impl Journal for PostgresStore {
    fn append(&self, write: AtomicWrite) -> StoreFuture<'_, ()> {
        self.batcher.append(write).boxed()
    }

    fn highest_seq_nr<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, u64> {
        async move {
            let client = self.client().await?;
            let row = client
                .query_one(
                    "SELECT COALESCE(max(seq_nr), 0) FROM concord_event_journal \
                     WHERE persistence_id = $1",
                    &[&pid.to_string()],
                )
                .await
                .map_err(unavailable)?;
            Ok(unsigned(row.get(0)))
        }
        .boxed()
    }

    fn replay<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from_seq_nr: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<PersistentEvent>> {
        // One query serves both (the highest is one index lookup more).
        async move {
            let (events, _) = self.replay_with_highest(pid, from_seq_nr, max).await?;
            Ok(events)
        }
        .boxed()
    }

    fn replay_with_highest<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from_seq_nr: u64,
        max: usize,
    ) -> StoreFuture<'a, (Vec<PersistentEvent>, u64)> {
        async move {
            let from = i64::try_from(from_seq_nr).unwrap_or(i64::MAX);
            let limit = i64::try_from(max).unwrap_or(i64::MAX);
            let client = self.client().await?;
            // One row per event after `from` (or one row of NULLs), each with the highest.
            let rows = client
                .query(
                    "SELECT h.highest, e.seq_nr, e.payload, e.timestamp_ms \
                     FROM (SELECT COALESCE(max(seq_nr), 0) AS highest \
                           FROM concord_event_journal WHERE persistence_id = $1) h \
                     LEFT JOIN LATERAL (SELECT seq_nr, payload, timestamp_ms \
                           FROM concord_event_journal \
                           WHERE persistence_id = $1 AND seq_nr >= $2 AND NOT deleted \
                           ORDER BY seq_nr LIMIT $3) e ON true \
                     ORDER BY e.seq_nr",
                    &[&pid.to_string(), &from, &limit],
                )
                .await
                .map_err(unavailable)?;
            let highest = rows.first().map_or(0, |r| unsigned(r.get(0)));
            let events = rows
                .iter()
                .filter_map(|r| {
                    Some(PersistentEvent {
                        persistence_id: pid.clone(),
                        seq_nr: unsigned(r.get::<_, Option<i64>>(1)?),
                        payload: r.get::<_, Option<Vec<u8>>>(2)?,
                        timestamp_ms: unsigned(r.get::<_, Option<i64>>(3)?),
                    })
                })
                .collect();
            Ok((events, highest))
        }
        .boxed()
    }

    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, to_seq_nr: u64) -> StoreFuture<'a, ()> {
        async move {
            let to = i64::try_from(to_seq_nr).unwrap_or(i64::MAX);
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            let p = pid.to_string();
            let row = tx
                .query_one(
                    "SELECT max(seq_nr) FROM concord_event_journal \
                     WHERE persistence_id = $1 AND seq_nr <= $2",
                    &[&p, &to],
                )
                .await
                .map_err(unavailable)?;
            if let Some(marker) = row.get::<_, Option<i64>>(0) {
                tx.execute(
                    "DELETE FROM concord_event_journal WHERE persistence_id = $1 AND seq_nr < $2",
                    &[&p, &marker],
                )
                .await
                .map_err(unavailable)?;
                tx.execute(
                    "UPDATE concord_event_journal SET deleted = true, payload = '\\x' \
                     WHERE persistence_id = $1 AND seq_nr = $2",
                    &[&p, &marker],
                )
                .await
                .map_err(unavailable)?;
            }
            tx.commit().await.map_err(unavailable)
        }
        .boxed()
    }

    fn events_by_slices<'a>(
        &'a self,
        query: &'a EventsQuery,
    ) -> StoreFuture<'a, Vec<EventEnvelope>> {
        async move {
            let client = self.client().await?;
            let rows = client
                .query(
                    "SELECT persistence_id, seq_nr, payload, timestamp_ms, tx_id::text AS tx_text, ordering \
                     FROM concord_event_journal \
                     WHERE entity_type = $1 AND slice BETWEEN $2 AND $3 AND NOT deleted \
                       AND (tx_id, ordering) > ($4::text::xid8, $5) \
                       AND tx_id < pg_snapshot_xmin(pg_current_snapshot()) \
                     ORDER BY tx_id, ordering LIMIT $6",
                    &[
                        &query.entity_type,
                        &i32::from(*query.slices.start()),
                        &i32::from(*query.slices.end()),
                        &query.after.transaction.to_string(),
                        &i64::try_from(query.after.ordering).unwrap_or(i64::MAX),
                        &i64::try_from(query.limit).unwrap_or(i64::MAX),
                    ],
                )
                .await
                .map_err(unavailable)?;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                let pid = PersistenceId::parse(r.get::<_, &str>(0))
                    .map_err(|e| unavailable(format!("a stored persistence id: {e}")))?;
                let tx: &str = r.get(4);
                out.push(EventEnvelope {
                    offset: Offset {
                        transaction: tx
                            .parse()
                            .map_err(|_| unavailable("a transaction id is not a number"))?,
                        ordering: unsigned(r.get(5)),
                    },
                    event: PersistentEvent {
                        persistence_id: pid,
                        seq_nr: unsigned(r.get(1)),
                        payload: r.get(2),
                        timestamp_ms: unsigned(r.get(3)),
                    },
                });
            }
            Ok(out)
        }
        .boxed()
    }
}

impl SnapshotStore for PostgresStore {
    fn save<'a>(&'a self, pid: &'a PersistenceId, snapshot: Snapshot) -> StoreFuture<'a, ()> {
        async move {
            let seq = bigint(pid, "sequence number", snapshot.seq_nr)?;
            let ts = bigint(pid, "timestamp", snapshot.timestamp_ms)?;
            let client = self.client().await?;
            client
                .execute(
                    "INSERT INTO concord_snapshot (persistence_id, seq_nr, timestamp_ms, payload) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (persistence_id, seq_nr) \
                     DO UPDATE SET timestamp_ms = EXCLUDED.timestamp_ms, payload = EXCLUDED.payload",
                    &[&pid.to_string(), &seq, &ts, &snapshot.payload],
                )
                .await
                .map_err(unavailable)?;
            Ok(())
        }
        .boxed()
    }

    fn load_latest<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, Option<Snapshot>> {
        async move {
            let client = self.client().await?;
            let row = client
                .query_opt(
                    "SELECT seq_nr, timestamp_ms, payload FROM concord_snapshot \
                     WHERE persistence_id = $1 ORDER BY seq_nr DESC LIMIT 1",
                    &[&pid.to_string()],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.map(|r| Snapshot {
                seq_nr: unsigned(r.get(0)),
                timestamp_ms: unsigned(r.get(1)),
                payload: r.get(2),
            }))
        }
        .boxed()
    }

    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, max_seq_nr: u64) -> StoreFuture<'a, ()> {
        async move {
            let max = i64::try_from(max_seq_nr).unwrap_or(i64::MAX);
            let client = self.client().await?;
            client
                .execute(
                    "DELETE FROM concord_snapshot WHERE persistence_id = $1 AND seq_nr <= $2",
                    &[&pid.to_string(), &max],
                )
                .await
                .map_err(unavailable)?;
            Ok(())
        }
        .boxed()
    }
}

impl DurableStateStore for PostgresStore {
    fn get<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, StoredState> {
        async move {
            let client = self.client().await?;
            let row = client
                .query_opt(
                    "SELECT revision, payload FROM concord_durable_state WHERE persistence_id = $1",
                    &[&pid.to_string()],
                )
                .await
                .map_err(unavailable)?;
            Ok(row.map_or_else(StoredState::default, |r| StoredState {
                revision: unsigned(r.get(0)),
                payload: r.get(1),
            }))
        }
        .boxed()
    }

    fn upsert<'a>(
        &'a self,
        pid: &'a PersistenceId,
        revision: u64,
        payload: Option<Vec<u8>>,
    ) -> StoreFuture<'a, ()> {
        async move {
            if revision == 0 {
                return Err(PersistenceError::Rejected {
                    persistence_id: pid.to_string(),
                    reason: "revisions start at 1".into(),
                });
            }
            let rev = bigint(pid, "revision", revision)?;
            let ts = bigint(pid, "timestamp", super::handle::now_ms())?;
            let client = self.client().await?;
            let p = pid.to_string();
            let rows = if revision == 1 {
                client
                    .execute(
                        "INSERT INTO concord_durable_state \
                           (persistence_id, entity_type, slice, revision, payload, timestamp_ms) \
                         VALUES ($1, $2, $3, 1, $4, $5) ON CONFLICT (persistence_id) DO NOTHING",
                        &[
                            &p,
                            &pid.entity_type(),
                            &i32::from(pid.slice()),
                            &payload,
                            &ts,
                        ],
                    )
                    .await
            } else {
                client
                    .execute(
                        "UPDATE concord_durable_state SET revision = $2::bigint, payload = $3, \
                           timestamp_ms = $4 WHERE persistence_id = $1 AND revision = $2::bigint - 1",
                        &[&p, &rev, &payload, &ts],
                    )
                    .await
            }
            .map_err(unavailable)?;
            if rows == 0 {
                return Err(PersistenceError::Conflict {
                    persistence_id: p,
                    seq_nr: revision,
                });
            }
            Ok(())
        }
        .boxed()
    }
}
