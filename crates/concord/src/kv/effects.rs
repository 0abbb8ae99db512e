//! [`KvEffects`]: the key-value store's part of its host. Commands from the
//! [`super::KvStore`] handle become requests of the sans-IO [`KvMachine`] over its redb
//! storage; before the outputs of each turn leave, the turn's writes are committed at once
//! (one fsync for every write of the turn), so a reply or an acknowledgement sent after it
//! always means "on disk". The host runs on a thread of its own (the storage's reads and
//! fsyncs block).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use concord_core::kv::storage::MemoryStorage;
use concord_core::kv::{KvError, KvEvent, KvMachine, KvStorage, ReadResult};
use futures_channel::oneshot;
use tracing::warn;

use super::command::{KvCommand, KvStatusReport};
use super::metrics;
use super::storage::RedbStorage;
use crate::host::{Effects, LayerEffects};
use crate::remote::log_limit::LogLimiter;

/// A caller waiting for an answer.
enum Pending {
    Write(oneshot::Sender<Result<(), KvError>>, Instant, &'static str),
    Read(oneshot::Sender<Result<ReadResult, KvError>>, Instant),
}

/// What the effects report of their storage besides the [`KvStorage`] operations.
pub trait StorageFile: KvStorage + Send + 'static {
    /// Bytes the storage takes on disk (0 in memory).
    fn file_bytes(&self) -> u64;
    /// Where it is, for log lines.
    fn location(&self) -> String;
}

impl StorageFile for RedbStorage {
    fn file_bytes(&self) -> u64 {
        RedbStorage::file_bytes(self)
    }
    fn location(&self) -> String {
        self.file().display().to_string()
    }
}

impl StorageFile for MemoryStorage {
    fn file_bytes(&self) -> u64 {
        0
    }
    fn location(&self) -> String {
        "memory".into()
    }
}

/// The layer's effects over storage `S` (the runtime's [`RedbStorage`]; the simulator's
/// `MemoryStorage`); see the module docs.
pub struct KvEffects<S = RedbStorage> {
    pending: HashMap<u64, Pending>,
    next_request: u64,
    handoff_waiters: Vec<oneshot::Sender<()>>,
    node: String,
    warnings: LogLimiter,
    _storage: std::marker::PhantomData<fn() -> S>,
}

impl<S: StorageFile> KvEffects<S> {
    /// Effects on the node labelled `node`.
    pub fn new(node: String) -> Self {
        KvEffects {
            pending: HashMap::new(),
            next_request: 1,
            handoff_waiters: Vec::new(),
            node,
            warnings: LogLimiter::new(Duration::from_secs(10)),
            _storage: std::marker::PhantomData,
        }
    }

    fn request(&mut self, p: Pending) -> u64 {
        let id = self.next_request;
        self.next_request += 1;
        self.pending.insert(id, p);
        id
    }
}

impl<S: StorageFile> LayerEffects for KvEffects<S> {
    type Machine = KvMachine<S>;
    type Command = KvCommand;
    type Completion = std::convert::Infallible;

    fn name(&self) -> &'static str {
        "key-value-store"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: KvCommand) {
        let now = fx.now_ms;
        match command {
            KvCommand::Put {
                key,
                value,
                context,
                options,
                reply,
            } => {
                let id = self.request(Pending::Write(reply, Instant::now(), "put"));
                fx.machine.put(now, id, key, value, context, options);
            }
            KvCommand::Delete {
                key,
                context,
                options,
                reply,
            } => {
                let id = self.request(Pending::Write(reply, Instant::now(), "delete"));
                fx.machine.delete(now, id, key, context, options);
            }
            KvCommand::Get {
                key,
                options,
                reply,
            } => {
                let id = self.request(Pending::Read(reply, Instant::now()));
                fx.machine.get(now, id, key, options);
            }
            KvCommand::Status { reply } => {
                let _ = reply.send(KvStatusReport {
                    status: fx.machine.status(),
                    stats: fx.machine.stats().clone(),
                    file_bytes: fx.machine.store_ref().storage_ref().file_bytes(),
                });
            }
            KvCommand::HandoffDone { reply } => self.handoff_waiters.push(reply),
            KvCommand::Traced { command, trace } => {
                fx.follow_trace(Some(trace));
                self.command(fx, *command);
            }
        }
    }

    fn completion(&mut self, _fx: &mut Effects<'_, Self>, never: std::convert::Infallible) {
        match never {}
    }

    fn event(&mut self, _fx: &mut Effects<'_, Self>, event: KvEvent) {
        match event {
            KvEvent::WriteDone { request, result } => {
                if let Some(Pending::Write(tx, started, op)) = self.pending.remove(&request) {
                    metrics::kv_request(&self.node, op, result.is_ok(), started.elapsed());
                    let _ = tx.send(result);
                }
            }
            KvEvent::ReadDone { request, result } => {
                if let Some(Pending::Read(tx, started)) = self.pending.remove(&request) {
                    metrics::kv_request(&self.node, "get", result.is_ok(), started.elapsed());
                    let _ = tx.send(result);
                }
            }
        }
    }

    fn before_outputs(&mut self, fx: &mut Effects<'_, Self>) {
        let errors_before = fx.machine.stats().storage_errors;
        fx.machine.commit(fx.now_ms);
        if fx.machine.stats().storage_errors > errors_before {
            if let Some(suppressed) = self.warnings.allow("storage") {
                warn!(suppressed, file = %fx.machine.store_ref().storage_ref().location(), "key-value store: storage failure (see the error above); writes of this turn were refused");
            }
        }
        if !self.handoff_waiters.is_empty() && fx.machine.misplaced_keys() == 0 {
            for w in self.handoff_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        let status = fx.machine.status();
        metrics::record_kv(&self.node, &status, fx.machine.stats());
        self.pending.retain(|_, p| match p {
            Pending::Write(tx, ..) => !tx.is_canceled(),
            Pending::Read(tx, _) => !tx.is_canceled(),
        });
    }

    fn stopped(&mut self, _machine: &mut KvMachine<S>) {
        // The node is gone: callers learn the store stopped.
        self.pending.clear();
    }
}
