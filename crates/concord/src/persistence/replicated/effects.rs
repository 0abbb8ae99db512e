//! [`JournalEffects`]: the replicated journal's part of its host. Commands from the
//! [`super::ReplicatedStore`] handle become requests of the sans-IO
//! [`JournalMachine`] over its storage (`<data-dir>/journal/`, an LSM tree); before the
//! outputs of each turn leave, the turn's writes are committed at once (one fsync for
//! every accept of the turn, of any number of entities), so a promise or an acceptance
//! sent after it always means "on disk". The host runs on a thread of its own.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use concord_core::kv::KvStorage;
use concord_core::persistence::journal::{
    Entry, JournalError, JournalEvent, JournalMachine, JournalOutput, StoredSnapshot,
};
use futures_channel::oneshot;
use tracing::warn;

use super::metrics;
use crate::host::{Effects, LayerEffects};
use crate::kv::lsm_storage::DiskUsage;
use crate::remote::log_limit::LogLimiter;

/// An answer channel.
pub type Reply = oneshot::Sender<Result<JournalOutput, JournalError>>;

/// What the handle asks of the machine.
#[derive(Debug)]
pub enum JournalOp {
    /// `JournalMachine::recover`.
    Recover {
        /// The log.
        log: String,
        /// First sequence number of the page (0: the newest write only).
        from: u64,
        /// Events, at most.
        max_events: u32,
    },
    /// `JournalMachine::recover_from_snapshot`.
    RecoverFromSnapshot {
        /// The log.
        log: String,
        /// Events, at most.
        max_events: u32,
    },
    /// `JournalMachine::append`.
    Append {
        /// The log.
        log: String,
        /// The write.
        write: Entry,
        /// Keep only this write.
        compact: bool,
    },
    /// `JournalMachine::read`.
    Read {
        /// The log.
        log: String,
        /// First sequence number.
        from: u64,
        /// Events, at most.
        max_events: u32,
    },
    /// `JournalMachine::save_snapshot`.
    SaveSnapshot {
        /// The log.
        log: String,
        /// The snapshot.
        snapshot: StoredSnapshot,
    },
    /// `JournalMachine::load_snapshot`.
    LoadSnapshot {
        /// The log.
        log: String,
    },
    /// `JournalMachine::delete_to`.
    Delete {
        /// The log.
        log: String,
        /// Up to this sequence number.
        to: u64,
    },
    /// `JournalMachine::give_up` (answered at once).
    GiveUp {
        /// The addresses of the replicas lost for good.
        lost: Vec<concord_core::address::Address>,
    },
    /// `JournalMachine::waits` (answered at once).
    Waits,
    /// Answered with `JournalOutput::HandedOver` once `JournalMachine::handed_over` (a
    /// leaving node's last handoffs are done).
    HandedOver,
    /// `JournalMachine::events_by_type`.
    Events {
        /// The entity type.
        entity_type: String,
        /// The slices.
        slices: std::ops::RangeInclusive<u16>,
        /// After this offset (stream time ms, ordering).
        after: (u64, u64),
        /// Events, at most.
        limit: u32,
    },
}

/// A request with its answer channel.
#[derive(Debug)]
pub struct JournalCommand {
    /// What.
    pub op: JournalOp,
    /// Where the answer goes.
    pub reply: Reply,
    /// The caller's trace context (tracing on, inside a sampled span): the requests to
    /// the other replicas carry the trace.
    pub trace: Option<crate::host::TraceContext>,
}

/// The layer's effects over storage `S`; see the module docs.
pub struct JournalEffects<S> {
    pending: HashMap<u64, (Reply, Instant, &'static str)>,
    /// Callers waiting for [`JournalOp::HandedOver`].
    handed_over: Vec<Reply>,
    next_request: u64,
    node: String,
    warnings: LogLimiter,
    disk: Option<DiskUsage>,
    /// `concord_journal_commit_seconds` of this node.
    commit_seconds: ::metrics::Histogram,
    _storage: std::marker::PhantomData<fn() -> S>,
}

impl<S> JournalEffects<S> {
    /// Effects on the node labelled `node`.
    pub fn new(node: String) -> Self {
        let commit_seconds = metrics::commit_seconds(&node);
        JournalEffects {
            pending: HashMap::new(),
            handed_over: Vec::new(),
            next_request: 1,
            node,
            warnings: LogLimiter::new(Duration::from_secs(10)),
            disk: None,
            commit_seconds,
            _storage: std::marker::PhantomData,
        }
    }
}

impl<S> JournalEffects<S> {
    /// Reports the storage's bytes on disk (`concord_journal_disk_bytes`) with each tick.
    pub fn with_disk_usage(mut self, disk: DiskUsage) -> Self {
        self.disk = Some(disk);
        self
    }
}

impl<S: KvStorage + Send + 'static> LayerEffects for JournalEffects<S> {
    type Machine = JournalMachine<S>;
    type Command = JournalCommand;
    type Completion = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "replicated-journal"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: JournalCommand) {
        let now = fx.now_ms;
        fx.follow_trace(command.trace);
        let id = self.next_request;
        self.next_request += 1;
        let m = &mut *fx.machine;
        let op = match command.op {
            JournalOp::Recover {
                log,
                from,
                max_events,
            } => {
                m.recover(now, id, log, from, max_events);
                "recover"
            }
            JournalOp::RecoverFromSnapshot { log, max_events } => {
                m.recover_from_snapshot(now, id, log, max_events);
                "recover"
            }
            JournalOp::Append {
                log,
                write,
                compact,
            } => {
                m.append(now, id, log, write, compact);
                "append"
            }
            JournalOp::Read {
                log,
                from,
                max_events,
            } => {
                m.read(now, id, log, from, u64::MAX, max_events);
                "read"
            }
            JournalOp::SaveSnapshot { log, snapshot } => {
                m.save_snapshot(now, id, log, snapshot);
                "save-snapshot"
            }
            JournalOp::LoadSnapshot { log } => {
                m.load_snapshot(now, id, log);
                "load-snapshot"
            }
            JournalOp::Delete { log, to } => {
                m.delete_to(now, id, log, to);
                "delete"
            }
            JournalOp::Events {
                entity_type,
                slices,
                after,
                limit,
            } => {
                m.events_by_type(now, id, entity_type, slices, after, limit);
                "events"
            }
            JournalOp::GiveUp { lost } => {
                let named: Vec<String> = lost.iter().map(ToString::to_string).collect();
                let result = m.give_up(lost);
                if let Ok(g) = &result {
                    warn!(
                        node = %self.node,
                        lost = ?named,
                        released = g.released.len(),
                        told = g.told,
                        "replicated journal: gave up replicas lost for good (their writes that no survivor holds are gone)"
                    );
                }
                let _ = command.reply.send(result.map(JournalOutput::GaveUp));
                return;
            }
            JournalOp::Waits => {
                let _ = command.reply.send(Ok(JournalOutput::Waits(m.waits())));
                return;
            }
            JournalOp::HandedOver => {
                self.handed_over.push(command.reply);
                return;
            }
        };
        self.pending.insert(id, (command.reply, Instant::now(), op));
    }

    fn completion(&mut self, _fx: &mut Effects<'_, Self>, never: std::convert::Infallible) {
        match never {}
    }

    fn event(&mut self, _fx: &mut Effects<'_, Self>, event: JournalEvent) {
        if let Some((tx, started, op)) = self.pending.remove(&event.request) {
            metrics::request(&self.node, op, &event.result, started.elapsed());
            let _ = tx.send(event.result);
        }
    }

    /// The machine holds its replies until [`JournalMachine::commit`]; its requests (to
    /// the other replicas) leave before it.
    fn sends_before_commit(&self) -> bool {
        true
    }

    fn before_outputs(&mut self, fx: &mut Effects<'_, Self>) {
        if !self.handed_over.is_empty() && fx.machine.handed_over() {
            for w in self.handed_over.drain(..) {
                let _ = w.send(Ok(JournalOutput::HandedOver));
            }
        }
        let errors_before = fx.machine.stats().storage_errors;
        let started = Instant::now();
        fx.machine.commit();
        metrics::commit(&self.commit_seconds, started.elapsed());
        if fx.machine.stats().storage_errors > errors_before {
            if let Some(suppressed) = self.warnings.allow("storage") {
                warn!(
                    suppressed,
                    "replicated journal: storage failure; the requests of this turn failed"
                );
            }
        }
    }

    fn tick_interval_ms(&self) -> Option<u64> {
        Some(1_000)
    }

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        metrics::record(&self.node, fx.machine);
        if let Some(d) = &self.disk {
            metrics::disk(&self.node, d.bytes());
        }
        self.pending.retain(|_, (tx, ..)| !tx.is_canceled());
        self.handed_over.retain(|tx| !tx.is_canceled());
    }

    fn stopped(&mut self, _machine: &mut JournalMachine<S>) {
        self.pending.clear();
        self.handed_over.clear();
    }
}
