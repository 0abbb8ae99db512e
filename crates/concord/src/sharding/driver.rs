//! The Cluster Sharding driver task: owns one sans-IO [`ClusterSharding`] machine per
//! entity type and plays the runtime around them — runs entities (see [`super::cells`]),
//! carries transmits out through [`Outboxes`] (never dropping a user message for want of
//! lane room, pushing back on the handles instead), stores the machine's durable keys and
//! remembered entities, answers asks, and tells the coordinated shutdown when the region's
//! hand-over and the coordinator's hand-over are done.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use concord_core::sharding::{
    ClusterSharding, DropReason, ShardId, ShardingEvent, ShardingMessage,
};
use concord_core::{MembershipChange, ProtocolMachine, UniqueAddress};
use futures_util::FutureExt;
use tokio::sync::{mpsc, oneshot};
use tracing::{error, warn};

use super::cells::{Cells, ReplyTo};
use super::entity::ErasedFactory;
use super::outbox::{flush, Flushed, Outboxes};
use super::remember_store::RememberStore;
use super::{AskFailure, Extractor};
use crate::clock::Clock;
use crate::ddata::durable::DurableStore;
use crate::layer::{DriverInput, DriverInputs};
use crate::metrics;
use crate::remote::log_limit::LogLimiter;

/// A job from a handle, a shutdown task or one of the driver's own tasks.
pub(crate) type Job = Box<dyn FnOnce(&mut Driver) + Send>;

/// What the handles hand the driver: a message (the common case, without a boxed
/// closure) or any other job.
pub(crate) enum Request {
    /// A `tell` or `ask` from an [`super::EntityRef`].
    Tell {
        type_name: Arc<str>,
        entity: String,
        payload: Vec<u8>,
        ask: Option<AskTx>,
    },
    /// Anything else.
    Run(Job),
}

impl From<Job> for Request {
    fn from(job: Job) -> Self {
        Request::Run(job)
    }
}

/// An ask's outcome: the encoded reply, or why there is none.
pub(crate) type AskTx = oneshot::Sender<Result<Vec<u8>, AskFailure>>;

/// Inputs handled before the outputs are carried out.
const INPUTS_PER_FLUSH: usize = 256;

/// The answer to a cluster-wide shard query: (region, [(shard, entities)]).
pub(crate) type StatsTx = oneshot::Sender<Vec<(UniqueAddress, Vec<(ShardId, u32)>)>>;

/// One entity type on this node.
pub(crate) struct TypeHost {
    pub(crate) machine: ClusterSharding,
    pub(crate) extractor: Extractor,
    pub(crate) cells: Cells,
    pub(crate) asks: HashMap<u64, AskTx>,
    next_ask: u64,
    stats_queries: HashMap<u64, StatsTx>,
    next_query: u64,
    graceful: Vec<oneshot::Sender<()>>,
    graceful_done: bool,
    exiting: Vec<oneshot::Sender<()>>,
    exiting_done: bool,
}

impl TypeHost {
    pub(crate) fn new(
        machine: ClusterSharding,
        factory: Option<ErasedFactory>,
        extractor: Extractor,
    ) -> Self {
        let mailbox = machine.settings().entity_mailbox_size;
        TypeHost {
            machine,
            extractor,
            cells: Cells::new(factory, mailbox),
            asks: HashMap::new(),
            next_ask: 1,
            stats_queries: HashMap::new(),
            next_query: 1,
            graceful: Vec::new(),
            graceful_done: false,
            exiting: Vec::new(),
            exiting_done: false,
        }
    }

    /// Registers a waiting ask; its id.
    pub(crate) fn add_ask(&mut self, tx: AskTx) -> u64 {
        let id = self.next_ask;
        self.next_ask = self.next_ask.wrapping_add(1).max(1);
        self.asks.insert(id, tx);
        id
    }
}

/// The driver's state.
pub(crate) struct Driver {
    pub(crate) types: BTreeMap<String, TypeHost>,
    pub(crate) clock: Clock,
    pub(crate) outboxes: Outboxes,
    pub(crate) self_node: UniqueAddress,
    pub(crate) node_label: String,
    /// The driver's own jobs (entity batches done, flushes done, store answers): never
    /// held back by backpressure.
    pub(crate) internal: mpsc::UnboundedSender<Job>,
    store: Option<Arc<DurableStore>>,
    remember: Option<Arc<RememberStore>>,
    warnings: LogLimiter,
}

impl Driver {
    pub(crate) fn new(
        types: BTreeMap<String, TypeHost>,
        clock: Clock,
        outboxes: Outboxes,
        self_node: UniqueAddress,
        internal: mpsc::UnboundedSender<Job>,
        store: Option<Arc<DurableStore>>,
        remember: Option<Arc<RememberStore>>,
    ) -> Self {
        Driver {
            types,
            clock,
            outboxes,
            node_label: self_node.address.to_string(),
            self_node,
            internal,
            store,
            remember,
            warnings: LogLimiter::new(Duration::from_secs(10)),
        }
    }

    /// The clock now, ms.
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    pub(crate) async fn run(
        mut self,
        mut inputs: DriverInputs<Request, ShardingMessage>,
        mut internal: mpsc::UnboundedReceiver<Job>,
    ) {
        let view = inputs.view();
        let now = self.now();
        for h in self.types.values_mut() {
            h.machine
                .handle_membership(now, &view, MembershipChange::CurrentClusterState);
        }
        self.flush_all();
        loop {
            let deadline = self
                .types
                .values()
                .filter_map(|h| h.machine.poll_timeout())
                .min()
                .map(|t| self.clock.instant_at(t));
            let accepting = self.outboxes.accepting();
            let first = tokio::select! {
                biased;
                job = internal.recv() => match job {
                    Some(job) => DriverInput::Job(Request::Run(job)),
                    None => DriverInput::Stop,
                },
                input = inputs.next_gated(deadline, accepting) => input,
            };
            // Take what else is ready before carrying the outputs out: one flush (one lane
            // write per peer) for many messages.
            let mut next = Some(first);
            let mut handled = 0;
            let mut stop = false;
            while let Some(input) = next.take() {
                if !self.handle_input(input) {
                    stop = true;
                    break;
                }
                handled += 1;
                if handled >= INPUTS_PER_FLUSH {
                    break;
                }
                next = match internal.try_recv() {
                    Ok(job) => Some(DriverInput::Job(Request::Run(job))),
                    Err(_) => inputs
                        .next_gated(None, self.outboxes.accepting())
                        .now_or_never(),
                };
            }
            if stop {
                break;
            }
            self.flush_all();
        }
        // The node is gone: every entity stops with it.
        for h in self.types.values_mut() {
            h.cells.abort_all();
        }
    }

    /// Handles one input; false once the driver must stop.
    fn handle_input(&mut self, input: DriverInput<Request, ShardingMessage>) -> bool {
        {
            let now = self.now();
            match input {
                DriverInput::Stop => return false,
                DriverInput::Job(Request::Run(job)) => job(self),
                DriverInput::Job(Request::Tell {
                    type_name,
                    entity,
                    payload,
                    ask,
                }) => self.tell(&type_name, entity, payload, ask),
                DriverInput::Inbound(b) => {
                    for (m, _) in b.messages {
                        if let Some(h) = self.types.get_mut(&m.type_name) {
                            h.machine.handle_message(now, &b.from, m);
                        }
                    }
                }
                DriverInput::View(view) => {
                    for h in self.types.values_mut() {
                        h.machine.handle_membership(
                            now,
                            &view,
                            MembershipChange::CurrentClusterState,
                        );
                    }
                    let members: Vec<concord_core::Address> =
                        view.members.keys().map(|u| u.address.clone()).collect();
                    self.outboxes.retain(|a| members.contains(a));
                }
                DriverInput::Timeout => {
                    for h in self.types.values_mut() {
                        if h.machine.poll_timeout().is_some_and(|t| t <= now) {
                            h.machine.handle_timeout(now);
                        }
                    }
                }
                DriverInput::Tick => self.tick(),
            }
        }
        true
    }

    /// Once a second: metrics, forgotten asks and queries.
    fn tick(&mut self) {
        for (name, h) in self.types.iter_mut() {
            h.asks.retain(|_, tx| !tx.is_closed());
            h.stats_queries.retain(|_, tx| !tx.is_closed());
            let local = h.machine.local_shards();
            let gauges = metrics::ShardingGauges {
                shards: local.len(),
                entities: local.iter().map(|(_, n)| *n as usize).sum(),
                handoffs_in_progress: h.machine.handoffs_in_progress(),
                buffered: h.machine.buffered() + h.cells.mailboxed(),
                backlogged: self.outboxes.backlogged(),
                coordinator: h.machine.is_coordinator(),
                mailbox_dropped: h.cells.dropped,
            };
            metrics::record_sharding(&self.node_label, name, &gauges, h.machine.stats());
        }
        if self.outboxes.dropped > 0 {
            if let Some(suppressed) = self.warnings.allow("backlog") {
                warn!(
                    dropped = self.outboxes.dropped,
                    suppressed, "sharding: a peer's backlog was full; messages to it were dropped"
                );
            }
        }
    }

    /// Starts a flush task for `to`'s backlog.
    fn start_flush(&mut self, to: concord_core::Address) {
        if let Some((lane, frames)) = self.outboxes.take_backlog(&to) {
            let internal = self.internal.clone();
            tokio::spawn(async move {
                let Flushed(to) = flush(lane, frames, to).await;
                let _ = internal.send(Box::new(move |d: &mut Driver| {
                    if d.outboxes.flushed(&to) {
                        d.start_flush(to);
                    }
                }));
            });
        }
    }

    /// Carries every machine's outputs out, until none has any.
    pub(crate) fn flush_all(&mut self) {
        let names: Vec<String> = self.types.keys().cloned().collect();
        loop {
            let mut any = false;
            for name in &names {
                any |= self.flush_type(name);
            }
            if !any {
                break;
            }
        }
    }

    /// One round of one machine's outputs; true if there were any.
    fn flush_type(&mut self, name: &str) -> bool {
        let mut any = false;
        let now = self.now();
        let Some(h) = self.types.get_mut(name) else {
            return false;
        };
        let mut transmits = Vec::new();
        while let Some(t) = h.machine.poll_transmit() {
            any = true;
            transmits.push(t);
        }
        let flushes = if transmits.is_empty() {
            Vec::new()
        } else {
            self.outboxes.send_all(transmits)
        };
        let mut events = Vec::new();
        while let Some(e) = h.machine.poll_event() {
            events.push(e);
        }
        for to in flushes {
            self.start_flush(to);
        }
        for e in events {
            any = true;
            self.on_event(name, now, e);
        }
        any
    }

    fn on_event(&mut self, name: &str, now: u64, e: ShardingEvent) {
        let me = self.self_node.clone();
        let internal = self.internal.clone();
        let sender = self.outboxes.sender().clone();
        let Some(h) = self.types.get_mut(name) else {
            return;
        };
        match e {
            ShardingEvent::StartEntity {
                shard,
                entity,
                state,
            } => h.cells.start(&shard, &entity, state.as_deref()),
            ShardingEvent::Deliver {
                entity,
                payload,
                reply_to,
                ..
            } => {
                let reply = match reply_to {
                    Some((node, ask)) if node == me => match h.asks.remove(&ask) {
                        Some(tx) => ReplyTo::Local(tx),
                        None => ReplyTo::None,
                    },
                    Some((node, ask)) => ReplyTo::Remote(node, ask),
                    None => ReplyTo::None,
                };
                let ctx = super::cells::RunContext {
                    type_name: name,
                    node: &me,
                    internal: &internal,
                    sender: &sender,
                };
                let after = h.cells.deliver(&entity, payload, reply, &ctx);
                Self::after_batch(h, now, &entity, after);
            }
            ShardingEvent::StopEntity { entity, reason, .. } => {
                let ctx = super::cells::RunContext {
                    type_name: name,
                    node: &me,
                    internal: &internal,
                    sender: &sender,
                };
                let after = h.cells.stop(&entity, reason, &ctx);
                Self::after_batch(h, now, &entity, after);
            }
            ShardingEvent::KillEntity { shard, entity } => {
                h.cells.kill(&entity);
                h.machine.entity_stopped(now, &shard, &entity, None);
            }
            ShardingEvent::Reply { ask, result } => {
                if let Some(tx) = h.asks.remove(&ask) {
                    let _ = tx.send(result.map_err(AskFailure::Failed));
                }
            }
            ShardingEvent::Dropped { ask, reason } => {
                if let Some(tx) = ask.and_then(|a| h.asks.remove(&a)) {
                    let _ = tx.send(Err(AskFailure::Dropped(reason)));
                }
                if reason == DropReason::BufferFull {
                    if let Some(suppressed) = self.warnings.allow("buffer-full") {
                        warn!(type_name = %name, suppressed, "sharding: the region's buffer is full; a message was dropped");
                    }
                }
            }
            ShardingEvent::RememberLoad { shard } => {
                let store = self.remember.clone();
                let (type_name, internal) = (name.to_string(), self.internal.clone());
                tokio::task::spawn_blocking(move || {
                    let ids = match store.map(|s| s.load(&type_name, &shard)) {
                        Some(Ok(ids)) => ids,
                        Some(Err(e)) => {
                            error!(error = %e, "remembered entities cannot be read");
                            Vec::new()
                        }
                        None => Vec::new(),
                    };
                    let _ = internal.send(Box::new(move |d: &mut Driver| {
                        let now = d.now();
                        if let Some(h) = d.types.get_mut(&type_name) {
                            h.machine.remember_loaded(now, &shard, ids);
                        }
                    }));
                });
            }
            ShardingEvent::RememberUpdate {
                shard,
                started,
                stopped,
            } => {
                let store = self.remember.clone();
                let (type_name, internal) = (name.to_string(), self.internal.clone());
                tokio::task::spawn_blocking(move || {
                    if let Some(Err(e)) =
                        store.map(|s| s.update(&type_name, &shard, &started, &stopped))
                    {
                        error!(error = %e, "remembered entities cannot be written");
                    }
                    let _ = internal.send(Box::new(move |d: &mut Driver| {
                        let now = d.now();
                        if let Some(h) = d.types.get_mut(&type_name) {
                            h.machine.remember_written(now, &shard);
                        }
                    }));
                });
            }
            ShardingEvent::Store { key, envelope } => {
                if let Some(store) = &self.store {
                    if let Err(e) = store.store(&key, &envelope) {
                        if let Some(suppressed) = self.warnings.allow("store") {
                            error!(error = %e, suppressed, "sharding: a durable key was not stored");
                        }
                    }
                }
            }
            ShardingEvent::GracefulShutdownDone => {
                h.graceful_done = true;
                for w in h.graceful.drain(..) {
                    let _ = w.send(());
                }
            }
            ShardingEvent::ExitingDone => {
                h.exiting_done = true;
                for w in h.exiting.drain(..) {
                    let _ = w.send(());
                }
            }
            ShardingEvent::ClusterShardingStats { request, regions } => {
                if let Some(tx) = h.stats_queries.remove(&request) {
                    let _ = tx.send(regions);
                }
            }
        }
    }

    /// A batch of an entity finished (see [`super::cells`]).
    pub(crate) fn batch_done(
        &mut self,
        type_name: &str,
        entity: &str,
        generation: u64,
        outcome: super::cells::BatchOutcome,
    ) {
        let now = self.now();
        let me = self.self_node.clone();
        let internal = self.internal.clone();
        let sender = self.outboxes.sender().clone();
        let Some(h) = self.types.get_mut(type_name) else {
            return;
        };
        let ctx = super::cells::RunContext {
            type_name,
            node: &me,
            internal: &internal,
            sender: &sender,
        };
        let after = h.cells.batch_done(entity, generation, outcome, &ctx);
        Self::after_batch(h, now, entity, after);
        self.flush_all();
    }

    /// Tells the machine what a batch ended with.
    fn after_batch(h: &mut TypeHost, now: u64, entity: &str, after: super::cells::AfterBatch) {
        match after {
            super::cells::AfterBatch::Nothing => {}
            super::cells::AfterBatch::Passivate(shard) => h.machine.passivate(now, &shard, entity),
            super::cells::AfterBatch::Stopped(shard, state) => {
                h.machine.entity_stopped(now, &shard, entity, state)
            }
        }
    }

    /// Graceful shutdown of every region (the `cluster-sharding-shutdown-region` phase);
    /// `done` fires when all are done.
    pub(crate) fn graceful_shutdown(&mut self, done: oneshot::Sender<()>) {
        let now = self.now();
        let mut waits = Vec::new();
        for h in self.types.values_mut() {
            let (tx, rx) = oneshot::channel();
            if h.graceful_done {
                let _ = tx.send(());
            } else {
                h.graceful.push(tx);
            }
            waits.push(rx);
            h.machine.graceful_shutdown(now);
        }
        tokio::spawn(async move {
            for w in waits {
                let _ = w.await;
            }
            let _ = done.send(());
        });
    }

    /// The coordinators' hand-over (the `cluster-exiting` phase).
    pub(crate) fn self_exiting(&mut self, done: oneshot::Sender<()>) {
        let now = self.now();
        let mut waits = Vec::new();
        for h in self.types.values_mut() {
            let (tx, rx) = oneshot::channel();
            if h.exiting_done {
                let _ = tx.send(());
            } else {
                h.exiting.push(tx);
            }
            waits.push(rx);
            h.machine.self_exiting(now);
        }
        tokio::spawn(async move {
            for w in waits {
                let _ = w.await;
            }
            let _ = done.send(());
        });
    }

    /// The graceful shutdown did not finish in its phase: stop every entity here.
    pub(crate) fn stop_hosting(&mut self) {
        let now = self.now();
        for h in self.types.values_mut() {
            h.machine.stop_hosting(now);
        }
    }

    /// Starts a cluster-wide shard query of `type_name`.
    pub(crate) fn query_stats(&mut self, type_name: &str, tx: StatsTx) {
        let now = self.now();
        if let Some(h) = self.types.get_mut(type_name) {
            let id = h.next_query;
            h.next_query += 1;
            h.stats_queries.insert(id, tx);
            h.machine.query_cluster_stats(now, id);
        }
    }
}
