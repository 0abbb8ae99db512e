//! [`Cells`]: the entities of one entity type alive on this node, and how they run.
//!
//! An entity is not a task of its own: while idle it is only its state in a cell (so a
//! million idle entities cost memory, not tasks). Messages the machine delivers go into the
//! cell's mailbox; when the entity is idle, its mailbox is handled as one batch, the
//! messages one after the other (answering asks as it goes — a local ask directly, a
//! remote one with a `Reply` to the asking node). The batch is first polled right here,
//! on the driver: a handler that does not wait completes without a task of its own; one
//! that waits (a timer, Distributed Data, I/O) continues in a task that gives the entity
//! back when done ([`BatchOutcome`]). Handlers must not block the thread. So one entity handles one message at a time, in
//! delivery order, while different entities run in parallel. A stop waits for the
//! mailbox to be empty: an entity stopped for a handoff handles everything it was given,
//! then hands its state over. A handler that panics loses its entity (its state and any
//! messages still waiting, whose asks get an error); the next message starts it again.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use concord_core::sharding::{ShardId, StopReason};
use concord_core::UniqueAddress;
use futures_util::future::{AbortHandle, Abortable};
use futures_util::FutureExt;
use tracing::{warn, Instrument};

use super::command::{BatchOutcome, Completion, ShardingCompletion};
use super::entity::{EntityContext, ErasedEntity, ErasedFactory};
use crate::host::{Completions, Spawner};

/// Where the answer to a message goes: the asking node and its ask id (`None` for a
/// tell). Every answer goes through the machine (a reply completion).
pub(crate) type ReplyTo = Option<(UniqueAddress, u64)>;

struct Envelope {
    payload: Vec<u8>,
    reply: ReplyTo,
    /// The span of the traced delivery (tracing on, the message traced): the entity
    /// handles it in a child span.
    span: Option<tracing::Span>,
}

struct Cell {
    shard: ShardId,
    /// `None` while a batch runs.
    entity: Option<Box<dyn ErasedEntity>>,
    mailbox: VecDeque<Envelope>,
    stop: Option<StopReason>,
    running: Option<AbortHandle>,
    generation: u64,
}

/// What running a batch needs from the host.
pub(crate) struct RunContext<'a> {
    pub(crate) type_name: &'a str,
    pub(crate) node: &'a UniqueAddress,
    pub(crate) completions: &'a Completions<ShardingCompletion>,
    pub(crate) spawner: &'a dyn Spawner,
}

/// A running batch: gives the entity back, and whether it asked to be passivated.
type BatchFuture = Pin<Box<dyn Future<Output = (Box<dyn ErasedEntity>, bool)> + Send>>;

/// What applying a batch's outcome leaves to do.
enum Applied {
    /// Messages arrived meanwhile: run again.
    RunAgain,
    Done(AfterBatch),
}

/// The message of a panic payload.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "the handler panicked".into())
}

/// What the machine must hear after a batch.
pub(crate) enum AfterBatch {
    Nothing,
    /// The entity asked to be passivated.
    Passivate(ShardId),
    /// The entity stopped (with its state for a handoff).
    Stopped(ShardId, Option<Vec<u8>>),
}

/// The entities of one type on this node.
pub(crate) struct Cells {
    factory: Option<ErasedFactory>,
    cells: HashMap<String, Cell>,
    mailbox_size: usize,
    next_generation: u64,
    mailboxed: usize,
    /// Messages refused because an entity's mailbox was full.
    pub(crate) dropped: u64,
}

/// Answers `to` with `result` (through the machine, as a completion of the host).
fn reply(
    to: ReplyTo,
    result: Result<Vec<u8>, String>,
    type_name: &str,
    completions: &Completions<ShardingCompletion>,
) {
    if let Some((to, ask)) = to {
        completions.send(ShardingCompletion(Completion::Reply {
            type_name: type_name.to_string(),
            to,
            ask,
            result,
        }));
    }
}

impl Cells {
    pub(crate) fn new(factory: Option<ErasedFactory>, mailbox_size: usize) -> Self {
        Cells {
            factory,
            cells: HashMap::new(),
            mailbox_size: mailbox_size.max(1),
            next_generation: 1,
            mailboxed: 0,
            dropped: 0,
        }
    }

    /// Messages waiting in mailboxes.
    pub(crate) fn mailboxed(&self) -> usize {
        self.mailboxed
    }

    /// Creates the entity (from its handed-over state).
    pub(crate) fn start(&mut self, shard: &str, entity: &str, state: Option<&[u8]>) {
        let Some(factory) = &self.factory else {
            warn!(entity = %entity, "asked to start an entity on a proxy-only region");
            return;
        };
        let e = factory(entity, state);
        let generation = self.next_generation;
        self.next_generation += 1;
        if let Some(old) = self.cells.insert(
            entity.to_string(),
            Cell {
                shard: shard.to_string(),
                entity: Some(e),
                mailbox: VecDeque::new(),
                stop: None,
                running: None,
                generation,
            },
        ) {
            // Cannot happen by the protocol; make sure nothing of the old one runs on.
            if let Some(a) = old.running {
                a.abort();
            }
            self.mailboxed = self.mailboxed.saturating_sub(old.mailbox.len());
        }
    }

    /// A message for a started entity; what the machine must hear now.
    pub(crate) fn deliver(
        &mut self,
        entity: &str,
        payload: Vec<u8>,
        to: ReplyTo,
        span: Option<tracing::Span>,
        ctx: &RunContext<'_>,
    ) -> AfterBatch {
        let Some(cell) = self.cells.get_mut(entity) else {
            let why = format!("entity {entity} is not running here");
            reply(to, Err(why), ctx.type_name, ctx.completions);
            return AfterBatch::Nothing;
        };
        if cell.mailbox.len() >= self.mailbox_size {
            self.dropped += 1;
            let why = format!("the mailbox of entity {entity} is full");
            reply(to, Err(why), ctx.type_name, ctx.completions);
            return AfterBatch::Nothing;
        }
        cell.mailbox.push_back(Envelope {
            payload,
            reply: to,
            span,
        });
        self.mailboxed += 1;
        self.run(entity, ctx)
    }

    /// Runs the entity's mailbox if it is idle; what the machine must hear now (when the
    /// batch completed right here).
    fn run(&mut self, entity_id: &str, ctx: &RunContext<'_>) -> AfterBatch {
        loop {
            let Some(cell) = self.cells.get_mut(entity_id) else {
                return AfterBatch::Nothing;
            };
            if cell.running.is_some() || cell.mailbox.is_empty() {
                return AfterBatch::Nothing;
            }
            let Some(mut entity) = cell.entity.take() else {
                return AfterBatch::Nothing;
            };
            let batch = std::mem::take(&mut cell.mailbox);
            self.mailboxed = self.mailboxed.saturating_sub(batch.len());
            let generation = cell.generation;
            let type_name = ctx.type_name.to_string();
            let id = entity_id.to_string();
            let shard = cell.shard.clone();
            let node = ctx.node.address.clone();
            let completions = ctx.completions.clone();
            let mut work: BatchFuture = Box::pin(async move {
                let mut ectx = EntityContext::new(id.clone(), shard, node);
                let mut passivate = false;
                for env in batch {
                    let wants = env.reply.is_some();
                    let r = match &env.span {
                        None => entity.handle(&mut ectx, &env.payload, wants).await,
                        Some(parent) => {
                            let span = tracing::info_span!(
                                parent: parent,
                                "concord.entity.handle",
                                otel.name = "entity handle",
                                entity_type = %type_name,
                                entity = %id,
                                node = %ectx.node(),
                            );
                            entity
                                .handle(&mut ectx, &env.payload, wants)
                                .instrument(span)
                                .await
                        }
                    };
                    passivate |= ectx.take_passivate();
                    if let (Err(e), false) = (&r, wants) {
                        warn!(entity = %id, error = %e, "a message to the entity failed");
                    }
                    reply(env.reply, r, &type_name, &completions);
                }
                (entity, passivate)
            });
            // First poll here: most handlers complete without waiting.
            let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
            let polled = std::panic::catch_unwind(AssertUnwindSafe(|| work.as_mut().poll(&mut cx)));
            let outcome = match polled {
                Ok(Poll::Ready((entity, passivate))) => BatchOutcome::Done { entity, passivate },
                Err(p) => BatchOutcome::Failed(panic_message(p)),
                Ok(Poll::Pending) => {
                    // It waits: it continues as a task of its own, which reports back.
                    let id = entity_id.to_string();
                    let type_name = ctx.type_name.to_string();
                    let completions = ctx.completions.clone();
                    let (abort, registration) = AbortHandle::new_pair();
                    let work = Abortable::new(work, registration);
                    ctx.spawner.spawn(Box::pin(async move {
                        let outcome = match AssertUnwindSafe(work).catch_unwind().await {
                            Ok(Ok((entity, passivate))) => BatchOutcome::Done { entity, passivate },
                            // Killed: the entity is gone, nothing to report.
                            Ok(Err(_aborted)) => return,
                            Err(p) => BatchOutcome::Failed(panic_message(p)),
                        };
                        completions.send(ShardingCompletion(Completion::BatchDone {
                            type_name,
                            entity: id,
                            generation,
                            outcome,
                        }));
                    }));
                    if let Some(cell) = self.cells.get_mut(entity_id) {
                        cell.running = Some(abort);
                    }
                    return AfterBatch::Nothing;
                }
            };
            match self.apply(entity_id, outcome, ctx) {
                Applied::RunAgain => continue,
                Applied::Done(after) => return after,
            }
        }
    }

    /// Asks the entity to stop once its mailbox is empty; the stop, if it is done now.
    pub(crate) fn stop(
        &mut self,
        entity: &str,
        reason: StopReason,
        ctx: &RunContext<'_>,
    ) -> AfterBatch {
        let Some(cell) = self.cells.get_mut(entity) else {
            return AfterBatch::Nothing;
        };
        cell.stop = Some(reason);
        if cell.running.is_some() {
            return AfterBatch::Nothing;
        }
        if !cell.mailbox.is_empty() {
            return self.run(entity, ctx);
        }
        match self.finish_stop(entity) {
            Some((shard, state)) => AfterBatch::Stopped(shard, state),
            None => AfterBatch::Nothing,
        }
    }

    /// Removes a stopped entity; its shard and the state it hands over.
    fn finish_stop(&mut self, entity: &str) -> Option<(ShardId, Option<Vec<u8>>)> {
        let mut cell = self.cells.remove(entity)?;
        self.mailboxed = self.mailboxed.saturating_sub(cell.mailbox.len());
        let state = match (cell.stop, cell.entity.as_mut()) {
            (Some(StopReason::HandOff), Some(e)) => e.hand_off(),
            _ => None,
        };
        Some((cell.shard, state))
    }

    /// Stops the entity now (its batch is aborted).
    pub(crate) fn kill(&mut self, entity: &str) {
        if let Some(cell) = self.cells.remove(entity) {
            self.mailboxed = self.mailboxed.saturating_sub(cell.mailbox.len());
            if let Some(a) = cell.running {
                a.abort();
            }
        }
    }

    /// A batch that continued in a task ended.
    pub(crate) fn batch_done(
        &mut self,
        entity: &str,
        generation: u64,
        outcome: BatchOutcome,
        ctx: &RunContext<'_>,
    ) -> AfterBatch {
        if self
            .cells
            .get(entity)
            .is_none_or(|c| c.generation != generation)
        {
            return AfterBatch::Nothing;
        }
        match self.apply(entity, outcome, ctx) {
            Applied::RunAgain => self.run(entity, ctx),
            Applied::Done(after) => after,
        }
    }

    /// Puts the entity back after a batch.
    fn apply(&mut self, entity: &str, outcome: BatchOutcome, ctx: &RunContext<'_>) -> Applied {
        let Some(cell) = self.cells.get_mut(entity) else {
            return Applied::Done(AfterBatch::Nothing);
        };
        cell.running = None;
        match outcome {
            BatchOutcome::Done {
                entity: e,
                passivate,
            } => {
                cell.entity = Some(e);
                if passivate {
                    // Messages still waiting run when the machine's stop comes.
                    return Applied::Done(AfterBatch::Passivate(cell.shard.clone()));
                }
                if !cell.mailbox.is_empty() {
                    return Applied::RunAgain;
                }
                if cell.stop.is_some() {
                    return Applied::Done(match self.finish_stop(entity) {
                        Some((shard, state)) => AfterBatch::Stopped(shard, state),
                        None => AfterBatch::Nothing,
                    });
                }
                Applied::Done(AfterBatch::Nothing)
            }
            BatchOutcome::Failed(why) => {
                warn!(entity = %entity, error = %why, "entity handler panicked; the entity is stopped");
                let Some(cell) = self.cells.remove(entity) else {
                    return Applied::Done(AfterBatch::Nothing);
                };
                self.mailboxed = self.mailboxed.saturating_sub(cell.mailbox.len());
                for env in cell.mailbox {
                    reply(
                        env.reply,
                        Err(format!("entity {entity} failed: {why}")),
                        ctx.type_name,
                        ctx.completions,
                    );
                }
                Applied::Done(AfterBatch::Stopped(cell.shard, None))
            }
        }
    }

    /// The node stops: every entity ends now.
    pub(crate) fn abort_all(&mut self) {
        for (_, cell) in self.cells.drain() {
            if let Some(a) = cell.running {
                a.abort();
            }
        }
        self.mailboxed = 0;
    }
}
