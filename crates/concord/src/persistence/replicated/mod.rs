//! [`ReplicatedStore`]: persistence's built-in store — the journal, snapshots and durable
//! state replicated on `n` nodes of the cluster (the key-value store's ring placement),
//! with Multi-Paxos per log so that two writers can never interleave one history
//! (`concord_core::persistence::journal`; docs/PERSISTENCE.md). No external database:
//! every node that runs persistence with `store = "replicated"` hosts its share in
//! `<data-dir>/journal/` ([`storage`]).
//!
//! Events of a persistence id `p` live in the log `e<p>`, a durable state in `s<p>` (one
//! slot per revision, only the newest kept). A write is acknowledged once a majority of
//! the log's replicas has it on disk.

pub(crate) mod codec;
mod effects;
mod metrics;
mod routes;
pub mod storage;

use std::sync::Arc;

use concord_core::persistence::journal::stream::MAX_STREAM_LIMIT;
use concord_core::persistence::journal::{
    Ballot, Entry, JournalError, JournalMachine, JournalOutput, JournalSettings, StoredSnapshot,
};
use concord_core::persistence::{AtomicWrite, PersistenceId, PersistentEvent};
use concord_core::ProtocolId;
use futures_channel::oneshot;
use tokio::sync::mpsc;

pub use codec::JournalCodec;
pub use effects::{JournalCommand, JournalEffects, JournalOp};
pub(crate) use routes::routes;

use super::store::{
    DurableStateStore, EventEnvelope, EventsQuery, Journal, Offset, RecoveryStart, Snapshot,
    SnapshotStore, StoreFuture, StoredState,
};
use super::PersistenceError;
use crate::kv::lsm_storage::LsmStorage;
use crate::layer::{HostPorts, LayerContext, LayerError};
use crate::remote::{Inbound, ProtocolSender};
use crate::runtime::{HostThread, LaneOutbound};

/// Requests queued from the handles before the host takes them (callers wait when full).
const COMMAND_QUEUE: usize = 16_384;

/// The built-in replicated store's handle (all three store traits); see the module docs.
#[derive(Clone, Debug)]
pub struct ReplicatedStore {
    commands: mpsc::Sender<JournalCommand>,
}

fn events_log(pid: &PersistenceId) -> String {
    format!("e{pid}")
}

fn state_log(pid: &PersistenceId) -> String {
    format!("s{pid}")
}

fn unavailable(reason: impl Into<String>) -> PersistenceError {
    PersistenceError::Unavailable {
        reason: reason.into(),
    }
}

impl ReplicatedStore {
    async fn ask(&self, op: JournalOp) -> Result<JournalOutput, JournalError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(JournalCommand {
                op,
                reply,
                trace: crate::host::trace::current(),
            })
            .await
            .map_err(|_| JournalError::Unavailable("the replicated journal stopped".into()))?;
        rx.await
            .map_err(|_| JournalError::Unavailable("the replicated journal stopped".into()))?
    }

    /// Gives up the replicas at `lost` as lost for good (the operator's override,
    /// [`concord_core::persistence::journal::give_up`]): this node and, through it, every
    /// member of its ring stop waiting for them.
    ///
    /// # Errors
    /// [`JournalError::Rejected`]: no address, more than 64, or one of a member of the
    /// ring; [`JournalError::Unavailable`]: the journal stopped.
    pub async fn give_up(
        &self,
        lost: Vec<concord_core::address::Address>,
    ) -> Result<concord_core::persistence::journal::GivenUp, JournalError> {
        match self.ask(JournalOp::GiveUp { lost }).await? {
            JournalOutput::GaveUp(g) => Ok(g),
            other => Err(JournalError::Unavailable(format!("unexpected {other:?}"))),
        }
    }

    /// The segments this node waits for after a ring change, each with the replicas it
    /// still awaits (addresses), ascending by segment.
    ///
    /// # Errors
    /// [`JournalError::Unavailable`]: the journal stopped.
    pub async fn waits(
        &self,
    ) -> Result<Vec<(u16, Vec<concord_core::address::Address>)>, JournalError> {
        match self.ask(JournalOp::Waits).await? {
            JournalOutput::Waits(w) => Ok(w),
            other => Err(JournalError::Unavailable(format!("unexpected {other:?}"))),
        }
    }

    /// Waits until this node replicates no segment and has handed every copy it holds
    /// over ([`concord_core::persistence::journal::JournalMachine::handed_over`]), or the
    /// journal stopped: a leaving node's coordinated-shutdown task (`cluster-exiting`,
    /// bounded by that phase's timeout). True if handed over.
    pub async fn wait_handed_over(&self) -> bool {
        matches!(
            self.ask(JournalOp::HandedOver).await,
            Ok(JournalOutput::HandedOver)
        )
    }

    fn error(pid: &PersistenceId, seq_nr: u64, e: JournalError) -> PersistenceError {
        match e {
            JournalError::Conflict(_) => PersistenceError::Conflict {
                persistence_id: pid.to_string(),
                seq_nr,
            },
            JournalError::Unavailable(reason) => unavailable(reason),
            JournalError::Rejected(reason) => PersistenceError::Rejected {
                persistence_id: pid.to_string(),
                reason,
            },
        }
    }
}

fn events_of(
    pid: &PersistenceId,
    entries: Vec<Entry>,
    from: u64,
    max: usize,
) -> Vec<PersistentEvent> {
    entries
        .into_iter()
        .flat_map(|e| {
            let ts = e.timestamp_ms;
            let first = e.first_seq;
            e.events
                .into_iter()
                .enumerate()
                .map(move |(i, payload)| (first + i as u64, ts, payload))
        })
        .filter(|(seq, ..)| *seq >= from)
        .take(max.max(1))
        .map(|(seq_nr, timestamp_ms, payload)| PersistentEvent {
            persistence_id: pid.clone(),
            seq_nr,
            payload,
            timestamp_ms,
        })
        .collect()
}

/// A replica's stored snapshot as the snapshot store's.
fn snapshot_of(s: StoredSnapshot) -> Snapshot {
    Snapshot {
        seq_nr: s.seq_nr,
        timestamp_ms: s.timestamp_ms,
        payload: s.payload,
    }
}

fn page_size(max: usize) -> u32 {
    u32::try_from(max.clamp(1, 100_000)).unwrap_or(100_000)
}

impl Journal for ReplicatedStore {
    fn append(&self, write: AtomicWrite) -> StoreFuture<'_, ()> {
        Box::pin(async move {
            let pid = write.persistence_id().clone();
            let entry = Entry {
                first_seq: write.first_seq_nr(),
                ballot: Ballot::ZERO,
                timestamp_ms: write.timestamp_ms(),
                events: write.payloads().to_vec(),
            };
            let op = JournalOp::Append {
                log: events_log(&pid),
                write: entry,
                compact: false,
            };
            match self.ask(op).await {
                Ok(_) => Ok(()),
                Err(e) => Err(Self::error(&pid, write.first_seq_nr(), e)),
            }
        })
    }

    /// On this store reading the highest number is a recovery: it makes this node the
    /// log's writer (Paxos phase 1), which fences any other writer of it.
    fn highest_seq_nr<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, u64> {
        Box::pin(async move { Ok(self.replay_with_highest(pid, u64::MAX, 1).await?.1) })
    }

    fn replay<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from_seq_nr: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<PersistentEvent>> {
        Box::pin(async move {
            let op = JournalOp::Read {
                log: events_log(pid),
                from: from_seq_nr,
                max_events: page_size(max),
            };
            match self.ask(op).await {
                Ok(JournalOutput::Read(entries)) => Ok(events_of(pid, entries, from_seq_nr, max)),
                Ok(other) => Err(unavailable(format!("unexpected answer {other:?}"))),
                Err(e) => Err(Self::error(pid, from_seq_nr, e)),
            }
        })
    }

    fn replay_with_highest<'a>(
        &'a self,
        pid: &'a PersistenceId,
        from_seq_nr: u64,
        max: usize,
    ) -> StoreFuture<'a, (Vec<PersistentEvent>, u64)> {
        Box::pin(async move {
            let op = JournalOp::Recover {
                log: events_log(pid),
                from: from_seq_nr,
                max_events: page_size(max),
            };
            match self.ask(op).await {
                Ok(JournalOutput::Recovered { page, highest, .. }) => {
                    Ok((events_of(pid, page, from_seq_nr, max), highest))
                }
                Ok(other) => Err(unavailable(format!("unexpected answer {other:?}"))),
                Err(e) => Err(Self::error(pid, from_seq_nr, e)),
            }
        })
    }

    /// One round: the promises of the recovery carry each replica's snapshot, and their
    /// pages start after it (`JournalMachine::recover_from_snapshot`).
    fn replay_from_snapshot<'a>(
        &'a self,
        pid: &'a PersistenceId,
        max: usize,
    ) -> StoreFuture<'a, Option<RecoveryStart>> {
        Box::pin(async move {
            let op = JournalOp::RecoverFromSnapshot {
                log: events_log(pid),
                max_events: page_size(max),
            };
            match self.ask(op).await {
                Ok(JournalOutput::Recovered {
                    page,
                    highest,
                    snapshot,
                }) => {
                    let from = snapshot.as_ref().map_or(1, |s| s.seq_nr.saturating_add(1));
                    Ok(Some(RecoveryStart {
                        events: events_of(pid, page, from, max),
                        highest,
                        snapshot: snapshot.map(snapshot_of),
                    }))
                }
                Ok(other) => Err(unavailable(format!("unexpected answer {other:?}"))),
                Err(e) => Err(Self::error(pid, 1, e)),
            }
        })
    }

    fn delete_to<'a>(&'a self, pid: &'a PersistenceId, to_seq_nr: u64) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let op = JournalOp::Delete {
                log: events_log(pid),
                to: to_seq_nr,
            };
            self.ask(op)
                .await
                .map(|_| ())
                .map_err(|e| Self::error(pid, to_seq_nr, e))
        })
    }

    /// The stream of the journal's index (`concord_core::persistence::journal::stream`):
    /// offsets are (stream time ms, ordering); **at least once** — a write learned late by
    /// one replica can appear twice, at two offsets; read only up to `events-delay` before
    /// now, and only while every replica of every ring segment answers.
    fn events_by_slices<'a>(
        &'a self,
        query: &'a EventsQuery,
    ) -> StoreFuture<'a, Vec<EventEnvelope>> {
        Box::pin(async move {
            let op = JournalOp::Events {
                entity_type: query.entity_type.clone(),
                slices: query.slices.clone(),
                after: (query.after.transaction, query.after.ordering),
                limit: u32::try_from(query.limit.clamp(1, MAX_STREAM_LIMIT as usize))
                    .unwrap_or(MAX_STREAM_LIMIT),
            };
            match self.ask(op).await {
                Ok(JournalOutput::Events(events)) => events
                    .into_iter()
                    .map(|e| {
                        let pid = PersistenceId::parse(&e.persistence_id).map_err(|err| {
                            unavailable(format!("a stream event's persistence id: {err}"))
                        })?;
                        Ok(EventEnvelope {
                            offset: Offset {
                                transaction: e.at_ms,
                                ordering: e.ordering,
                            },
                            event: PersistentEvent {
                                persistence_id: pid,
                                seq_nr: e.seq_nr,
                                payload: e.payload,
                                timestamp_ms: e.timestamp_ms,
                            },
                        })
                    })
                    .collect(),
                Ok(other) => Err(unavailable(format!("unexpected answer {other:?}"))),
                Err(
                    JournalError::Unavailable(reason)
                    | JournalError::Conflict(reason)
                    | JournalError::Rejected(reason),
                ) => Err(unavailable(reason)),
            }
        })
    }
}

impl SnapshotStore for ReplicatedStore {
    fn save<'a>(&'a self, pid: &'a PersistenceId, snapshot: Snapshot) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let seq_nr = snapshot.seq_nr;
            let op = JournalOp::SaveSnapshot {
                log: events_log(pid),
                snapshot: StoredSnapshot {
                    seq_nr,
                    timestamp_ms: snapshot.timestamp_ms,
                    payload: snapshot.payload,
                },
            };
            self.ask(op)
                .await
                .map(|_| ())
                .map_err(|e| Self::error(pid, seq_nr, e))
        })
    }

    fn load_latest<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, Option<Snapshot>> {
        Box::pin(async move {
            let op = JournalOp::LoadSnapshot {
                log: events_log(pid),
            };
            match self.ask(op).await {
                Ok(JournalOutput::Snapshot(s)) => Ok(s.map(snapshot_of)),
                Ok(other) => Err(unavailable(format!("unexpected answer {other:?}"))),
                Err(e) => Err(Self::error(pid, 0, e)),
            }
        })
    }

    fn delete_to<'a>(&'a self, _pid: &'a PersistenceId, _max_seq_nr: u64) -> StoreFuture<'a, ()> {
        // Each replica keeps only its newest snapshot: older ones are gone already.
        Box::pin(async { Ok(()) })
    }
}

/// A durable state's stored form: `[0]` deleted, `[1] ++ payload` a value.
fn encode_state(payload: Option<Vec<u8>>) -> Vec<u8> {
    match payload {
        None => vec![0],
        Some(p) => {
            let mut v = Vec::with_capacity(p.len() + 1);
            v.push(1);
            v.extend_from_slice(&p);
            v
        }
    }
}

impl DurableStateStore for ReplicatedStore {
    fn get<'a>(&'a self, pid: &'a PersistenceId) -> StoreFuture<'a, StoredState> {
        Box::pin(async move {
            let op = JournalOp::Recover {
                log: state_log(pid),
                from: 0,
                max_events: 1,
            };
            match self.ask(op).await {
                Ok(JournalOutput::Recovered { page, highest, .. }) => {
                    let payload = match page.last().and_then(|e| e.events.last()) {
                        Some(b) if b.first() == Some(&1) => Some(b[1..].to_vec()),
                        Some(_) => None,
                        None if highest == 0 => None,
                        None => {
                            return Err(unavailable(format!(
                                "{pid}: revision {highest} was not found on a majority"
                            )))
                        }
                    };
                    Ok(StoredState {
                        revision: highest,
                        payload,
                    })
                }
                Ok(other) => Err(unavailable(format!("unexpected answer {other:?}"))),
                Err(e) => Err(Self::error(pid, 0, e)),
            }
        })
    }

    fn upsert<'a>(
        &'a self,
        pid: &'a PersistenceId,
        revision: u64,
        payload: Option<Vec<u8>>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if revision == 0 {
                return Err(PersistenceError::Rejected {
                    persistence_id: pid.to_string(),
                    reason: "revisions start at 1".into(),
                });
            }
            let op = JournalOp::Append {
                log: state_log(pid),
                write: Entry {
                    first_seq: revision,
                    ballot: Ballot::ZERO,
                    timestamp_ms: super::handle::now_ms(),
                    events: vec![encode_state(payload)],
                },
                compact: true,
            };
            self.ask(op)
                .await
                .map(|_| ())
                .map_err(|e| Self::error(pid, revision, e))
        })
    }
}

/// Opens `<data-dir>/journal/` (copying an earlier version's `journal.redb` into it) and
/// starts the journal's host on `ctx`; `inbound` is the registered protocol's queue.
///
/// # Errors
/// The file cannot be opened.
pub(super) fn start(
    ctx: &LayerContext,
    inbound: mpsc::Receiver<Inbound<concord_core::persistence::journal::JournalMessage>>,
    settings: JournalSettings,
) -> Result<ReplicatedStore, LayerError> {
    let (storage, _) =
        storage::open(&ctx.config.data_dir_path()).map_err(|e| LayerError::Storage {
            layer: "persistence",
            message: e.to_string(),
        })?;
    let me = ctx.cluster.self_unique_address().clone();
    let disk = storage.disk_usage();
    let machine = JournalMachine::new(settings, me.clone(), storage, ctx.clock.now_ms());
    let sender = ProtocolSender::new(
        ctx.transport.clone(),
        ProtocolId::JOURNAL,
        Arc::new(JournalCodec),
    );
    let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
    ctx.start_host(
        machine,
        JournalEffects::<LsmStorage>::new(me.address.to_string()).with_disk_usage(disk),
        HostPorts::new(Box::new(LaneOutbound::new(sender)), inbound)
            .commands(rx)
            .thread(HostThread::Dedicated),
    );
    Ok(ReplicatedStore { commands: tx })
}
