//! The key-value store's driver: owns the sans-IO [`KvMachine`] over its redb storage and
//! feeds it inbound messages, membership views, the handles' jobs and timer ticks.
//!
//! It runs on a thread of its own (the storage's reads and fsyncs block), on the node's
//! runtime (`Handle::block_on`: timers, channels and the tasks the transport spawns are the
//! node's). Each turn takes every input that is ready (up to 256), then commits the
//! storage once — every write of the turn in one fsync — and only then sends the machine's
//! messages and answers its callers: an acknowledgement always means "on disk".

use std::collections::HashMap;
use std::time::{Duration, Instant};

use concord_core::kv::{KvEvent, KvMachine, KvMessage, ReadResult};
use concord_core::{MembershipChange, ProtocolMachine};
use futures_util::FutureExt as _;
use tokio::sync::oneshot;
use tracing::warn;

use super::codec::KvCodec;
use super::handle::{Job, KvStatusReport};
use super::storage::RedbStorage;
use crate::clock::Clock;
use crate::layer::{DriverInput, DriverInputs};
use crate::metrics;
use crate::remote::log_limit::LogLimiter;
use crate::remote::ProtocolSender;

/// Inputs handled before one commit and flush.
const INPUTS_PER_COMMIT: usize = 256;

/// A caller waiting for an answer.
enum Pending {
    Write(
        oneshot::Sender<Result<(), concord_core::kv::KvError>>,
        Instant,
        &'static str,
    ),
    Read(
        oneshot::Sender<Result<ReadResult, concord_core::kv::KvError>>,
        Instant,
    ),
}

/// The driver's state.
pub(crate) struct Driver {
    machine: KvMachine<RedbStorage>,
    clock: Clock,
    sender: ProtocolSender<KvCodec>,
    pending: HashMap<u64, Pending>,
    next_request: u64,
    handoff_waiters: Vec<oneshot::Sender<()>>,
    node: String,
    warnings: LogLimiter,
}

impl Driver {
    pub(crate) fn new(
        machine: KvMachine<RedbStorage>,
        clock: Clock,
        sender: ProtocolSender<KvCodec>,
        node: String,
    ) -> Self {
        Driver {
            machine,
            clock,
            sender,
            pending: HashMap::new(),
            next_request: 1,
            handoff_waiters: Vec::new(),
            node,
            warnings: LogLimiter::new(Duration::from_secs(10)),
        }
    }

    pub(crate) async fn run(mut self, mut inputs: DriverInputs<Job, KvMessage>) {
        let view = inputs.view();
        let now = self.clock.now_ms();
        self.machine
            .handle_membership(now, &view, MembershipChange::CurrentClusterState);
        self.finish_turn();
        loop {
            let deadline = self
                .machine
                .poll_timeout()
                .map(|t| self.clock.instant_at(t));
            let mut next = Some(inputs.next(deadline).await);
            let mut handled = 0;
            let mut stop = false;
            while let Some(input) = next.take() {
                if !self.handle(input) {
                    stop = true;
                    break;
                }
                handled += 1;
                if handled >= INPUTS_PER_COMMIT {
                    break;
                }
                next = inputs.next(None).now_or_never();
            }
            self.finish_turn();
            if stop {
                break;
            }
        }
        // The node is gone: callers learn the store stopped.
        self.pending.clear();
    }

    /// Handles one input; false once the driver must stop.
    fn handle(&mut self, input: DriverInput<Job, KvMessage>) -> bool {
        let now = self.clock.now_ms();
        match input {
            DriverInput::Stop => return false,
            DriverInput::Job(job) => self.job(now, job),
            DriverInput::Inbound(b) => {
                for (m, _) in b.messages {
                    self.machine.handle_message(now, &b.from, m);
                }
            }
            DriverInput::View(view) => {
                self.machine
                    .handle_membership(now, &view, MembershipChange::CurrentClusterState);
            }
            DriverInput::Timeout => self.machine.handle_timeout(now),
            DriverInput::Tick => {
                let status = self.machine.status();
                metrics::record_kv(&self.node, &status, self.machine.stats());
                self.pending.retain(|_, p| match p {
                    Pending::Write(tx, ..) => !tx.is_closed(),
                    Pending::Read(tx, _) => !tx.is_closed(),
                });
            }
        }
        true
    }

    fn request_id(&mut self) -> u64 {
        let id = self.next_request;
        self.next_request += 1;
        id
    }

    fn job(&mut self, now: u64, job: Job) {
        match job {
            Job::Put {
                key,
                value,
                context,
                options,
                reply,
            } => {
                let id = self.request_id();
                self.pending
                    .insert(id, Pending::Write(reply, Instant::now(), "put"));
                self.machine.put(now, id, key, value, context, options);
            }
            Job::Delete {
                key,
                context,
                options,
                reply,
            } => {
                let id = self.request_id();
                self.pending
                    .insert(id, Pending::Write(reply, Instant::now(), "delete"));
                self.machine.delete(now, id, key, context, options);
            }
            Job::Get {
                key,
                options,
                reply,
            } => {
                let id = self.request_id();
                self.pending
                    .insert(id, Pending::Read(reply, Instant::now()));
                self.machine.get(now, id, key, options);
            }
            Job::Status { reply } => {
                let _ = reply.send(KvStatusReport {
                    status: self.machine.status(),
                    stats: self.machine.stats().clone(),
                    file_bytes: self.machine.store_ref().storage_ref().file_bytes(),
                });
            }
            Job::HandoffDone { reply } => self.handoff_waiters.push(reply),
        }
    }

    /// Commits the turn's writes, then carries the machine's outputs out.
    fn finish_turn(&mut self) {
        let now = self.clock.now_ms();
        let errors_before = self.machine.stats().storage_errors;
        self.machine.commit(now);
        if self.machine.stats().storage_errors > errors_before {
            if let Some(suppressed) = self.warnings.allow("storage") {
                warn!(suppressed, file = %self.machine.store_ref().storage_ref().file().display(), "key-value store: storage failure (see the error above); writes of this turn were refused");
            }
        }
        while let Some(t) = self.machine.poll_transmit() {
            self.sender.send(&t);
        }
        while let Some(e) = self.machine.poll_event() {
            match e {
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
        if !self.handoff_waiters.is_empty() && self.machine.misplaced_keys() == 0 {
            for w in self.handoff_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }
}
