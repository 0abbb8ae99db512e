//! The task of a [`super::ShardingProducer`]: it moves the messages of the core's
//! [`ShardingProducerController`] (shared with the handles: [`ProducerCore`]) as asks of the
//! entities (a message each, or a batch of what goes to one entity at once), their
//! answers back into the machine, takes a durable producer's messages and records what its
//! queue needs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use concord_core::delivery::{Accepted, DeliverySettings, QueueEvent, ShardingProducerEvent};
use concord_core::persistence::AtomicWrite;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::consumer::{ConsumerEntity, Sequenced};
use super::durable_queue::DurableQueue;
use super::error::DeliveryError;
use super::metrics;
use super::producer_core::{Confirmation, ProducerCore};
use super::recorder::{Recorder, WRITE_CONFIRMATIONS_IDLE};
use super::status::ProducerStatus;
use crate::sharding::{ShardRegion, ShardingError};

/// What a producer's handles ask its task.
pub(super) enum Command<A> {
    /// A durable producer's message (one without a queue takes messages in the caller's
    /// task: [`ProducerCore::take`]).
    Send {
        entity_id: String,
        payload: Vec<u8>,
        accepted: oneshot::Sender<Result<u64, DeliveryError>>,
        confirmed: Option<Confirmation<A>>,
    },
    Stats(oneshot::Sender<ProducerStatus>),
    Stop,
}

/// The awaited answer of one sent message or batch (polled by the producer's task itself:
/// no task per message).
type AnswerFuture<R> = std::pin::Pin<Box<dyn std::future::Future<Output = Answer<R>> + Send>>;

/// Messages of one producer to one entity sent in one ask, at most.
const MAX_BATCH: usize = 64;
/// Payload bytes of one batch, at most (far below the transport's frame limits; a
/// message larger than this goes alone).
const MAX_BATCH_BYTES: usize = 256 * 1024;

/// An answer (or its failure) to one sent message or batch: the consumer entity's reply.
struct Answer<R> {
    entity_id: String,
    /// The message's number; for a batch, `None`.
    seq_nr: Option<u64>,
    result: Result<R, ShardingError>,
}

/// Closes the shared core when dropped: see [`Task::run`].
struct CloseOnDrop<A> {
    core: Arc<ProducerCore<A>>,
    why: DeliveryError,
}

impl<A> Drop for CloseOnDrop<A> {
    fn drop(&mut self) {
        self.core.close(&self.why);
    }
}

pub(super) struct Task<E: ConsumerEntity> {
    core: Arc<ProducerCore<E::Answer>>,
    region: ShardRegion<E>,
    ask_timeout: Duration,
    /// The durable queue, if any, with what is still to write.
    recorder: Recorder,
    /// [`super::ShardingProducer::stop`] was called.
    stopping: bool,
}

impl<E: ConsumerEntity> Task<E> {
    pub(super) fn new(
        core: Arc<ProducerCore<E::Answer>>,
        region: ShardRegion<E>,
        settings: &DeliverySettings,
        queue: Option<DurableQueue>,
    ) -> Self {
        Task {
            core,
            region,
            ask_timeout: Duration::from_millis(settings.resend_interval_max_ms.max(1_000)),
            recorder: Recorder::new(queue),
            stopping: false,
        }
    }

    pub(super) async fn run(mut self, commands: mpsc::Receiver<Command<E::Answer>>) {
        // Whatever ends the task — its end, or a panic — the handles take nothing more and
        // the callers waiting hear why.
        let mut closing = CloseOnDrop {
            core: self.core.clone(),
            why: DeliveryError::Stopped,
        };
        closing.why = self.drive(commands).await;
    }

    /// Runs until every handle is gone and nothing is unconfirmed, `stop`, or the durable
    /// queue fails; returns what callers still waiting are told.
    async fn drive(&mut self, mut commands: mpsc::Receiver<Command<E::Answer>>) -> DeliveryError {
        let mut answers: FuturesUnordered<AnswerFuture<E::Reply>> = FuturesUnordered::new();
        let mut open = true;
        let mut last_metrics = Instant::now();
        let core = self.core.clone();
        loop {
            let (unconfirmed, deadline) = {
                let held = core.lock();
                (held.machine.unconfirmed(), held.machine.poll_timeout())
            };
            if !open && unconfirmed == 0 {
                break;
            }
            let deadline = deadline.map(|ms| core.instant(ms));
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                c = commands.recv(), if open => match c {
                    Some(c) => {
                        self.command(c);
                        // Take what else is queued, so that one write records them all.
                        for _ in 0..AtomicWrite::MAX_EVENTS {
                            if self.stopping {
                                // What is queued behind a stop is not taken.
                                break;
                            }
                            match commands.try_recv() {
                                Ok(c) => self.command(c),
                                Err(_) => break,
                            }
                        }
                    }
                    None => open = false,
                },
                () = core.woken() => {}
                Some(a) = answers.next(), if !answers.is_empty() => {
                    self.answer(a);
                    // Without a queue, take the answers already in, so that one flush sends
                    // what they grant together (0.62x → 0.77x plain tell in `concord bench
                    // delivery`). A durable producer does not: while it takes answers one
                    // by one, sends pile up for its next write, and fewer, larger writes
                    // are what its rate depends on (76,000 against 59,000 confirmed/s).
                    if !self.recorder.is_durable() {
                        while let Some(Some(a)) =
                            futures_util::FutureExt::now_or_never(answers.next())
                        {
                            self.answer(a);
                        }
                    }
                }
                () = sleep => {
                    let now = core.now_ms();
                    core.lock().machine.handle_timeout(now);
                }
            }
            if self.stopping {
                // As a crash would: nothing more is sent or written.
                self.recorder.refuse(&DeliveryError::Stopped);
                return DeliveryError::Stopped;
            }
            if let Err(e) = self.recorder.record().await {
                self.fail(&e);
                return e;
            }
            self.flush(&mut answers).await;
            if last_metrics.elapsed() >= Duration::from_secs(1) {
                last_metrics = Instant::now();
                metrics::producer(core.node(), core.producer_id(), &self.status());
                if let Err(e) = self
                    .recorder
                    .write_confirmations(WRITE_CONFIRMATIONS_IDLE)
                    .await
                {
                    self.fail(&e);
                    return e;
                }
            }
        }
        if let Err(e) = self.recorder.write_confirmations(Duration::ZERO).await {
            tracing::debug!(producer = %core.producer_id(), error = %e, "the last confirmations were not recorded");
        }
        metrics::producer(core.node(), core.producer_id(), &self.status());
        DeliveryError::Stopped
    }

    fn status(&self) -> ProducerStatus {
        let held = self.core.lock();
        let m = &held.machine;
        let s = m.stats();
        ProducerStatus {
            unconfirmed: m.unconfirmed(),
            in_flight: m.in_flight(),
            entities: m.entities(),
            window: m.window_open(),
            sent: s.sent,
            resent: s.resent,
            confirmed: s.confirmed,
            invalid: s.invalid,
        }
    }

    fn command(&mut self, c: Command<E::Answer>) {
        match c {
            Command::Send {
                entity_id,
                payload,
                accepted,
                confirmed,
            } => {
                let record = self.recorder.is_durable().then(|| payload.clone());
                match self.core.take(&entity_id, payload, confirmed) {
                    Ok(Accepted {
                        seq_nr,
                        incarnation,
                    }) => {
                        // Answered once recorded.
                        let record = record.map(|payload| QueueEvent::Sent {
                            entity_id,
                            incarnation,
                            seq_nr,
                            payload,
                        });
                        self.recorder.taken(record, accepted, seq_nr);
                    }
                    Err(e) => {
                        let _ = accepted.send(Err(e));
                    }
                }
            }
            Command::Stats(reply) => {
                let _ = reply.send(self.status());
            }
            Command::Stop => {
                self.stopping = true;
                self.core.lock().stopped = true;
            }
        }
    }

    fn answer(&mut self, a: Answer<E::Reply>) {
        // Lost or refused on the way: the machine resends on its timeout.
        let Ok(r) = a.result else { return };
        let (control, replies) = match a.seq_nr {
            Some(seq_nr) => {
                let (control, reply) = E::control(r);
                (control, reply.map(|r| (seq_nr, r)).into_iter().collect())
            }
            None => E::batch_control(r),
        };
        let now = self.core.now_ms();
        let mut held = self.core.lock();
        for (seq_nr, r) in replies {
            if let Some(w) = held.waiters.get_mut(&(a.entity_id.clone(), seq_nr)) {
                w.1 = Some(r);
            }
        }
        if let Some(control) = control {
            held.machine.handle_message(now, &a.entity_id, control);
        }
    }

    /// The durable queue failed: nothing the producer holds may be on disk, so it stops
    /// (writing nothing more: a producer started again may be reading the queue already);
    /// every caller waiting learns why.
    fn fail(&mut self, e: &DeliveryError) {
        let core = &self.core;
        tracing::error!(producer = %core.producer_id(), error = %e, "the durable producer queue failed; the producer stops (start it again to recover)");
        metrics::producer_failed(core.node(), core.producer_id());
        metrics::producer(core.node(), core.producer_id(), &self.status());
        self.recorder.refuse(e);
        self.core.close(e);
    }

    /// Sends `messages` (consecutive, to `entity_id`) in one ask whose answer comes back
    /// as an [`Answer`].
    async fn transmit(
        &mut self,
        entity_id: String,
        mut messages: Vec<Sequenced>,
        answers: &mut FuturesUnordered<AnswerFuture<E::Reply>>,
    ) {
        let (seq_nr, envelope) = if messages.len() == 1 {
            let m = messages.remove(0);
            (Some(m.seq_nr), E::sequenced(m))
        } else {
            (None, E::batch(messages))
        };
        let entity = self.region.entity_ref(entity_id.clone());
        match entity.send_ask(&envelope).await {
            Ok(pending) => {
                let timeout = self.ask_timeout;
                answers.push(Box::pin(async move {
                    let result = match tokio::time::timeout(timeout, pending.reply()).await {
                        Ok(r) => r,
                        Err(_) => Err(ShardingError::Timeout(timeout)),
                    };
                    Answer {
                        entity_id,
                        seq_nr,
                        result,
                    }
                }));
            }
            // The node is stopping; the machine resends while it runs.
            Err(e) => tracing::debug!(error = %e, "a reliable message was not sent"),
        }
    }

    /// Sends what the machine queued (in order: an ask per message, or per batch of
    /// consecutive messages to one entity) and completes the waiters of what it confirmed.
    async fn flush(&mut self, answers: &mut FuturesUnordered<AnswerFuture<E::Reply>>) {
        // What goes to one entity now (in its order) goes in asks of up to MAX_BATCH
        // messages; the entities in the order they first appear.
        let mut batches: Vec<(String, Vec<Sequenced>, usize)> = Vec::new();
        {
            let mut held = self.core.lock();
            let mut index: HashMap<String, usize> = HashMap::new();
            while let Some(t) = held.machine.poll_transmit() {
                let m = Sequenced::from(t.message);
                let bytes = m.payload.len();
                match index.get(&t.entity_id).copied() {
                    Some(i)
                        if E::BATCHES
                            && batches[i].1.len() < MAX_BATCH
                            && batches[i].2 + bytes <= MAX_BATCH_BYTES =>
                    {
                        batches[i].1.push(m);
                        batches[i].2 += bytes;
                    }
                    _ => {
                        index.insert(t.entity_id.clone(), batches.len());
                        batches.push((t.entity_id, vec![m], bytes));
                    }
                }
            }
            while let Some(ShardingProducerEvent::Confirmed {
                entity_id,
                incarnation,
                seq_nr,
            }) = held.machine.poll_event()
            {
                if let Some(q) = self.recorder.queue_mut() {
                    q.confirmed(entity_id.clone(), incarnation, seq_nr);
                }
                if let Some((tx, reply)) = held.waiters.remove(&(entity_id, seq_nr)) {
                    let _ = tx.send(Ok(reply));
                }
            }
        }
        for (e, v, _) in batches {
            self.transmit(e, v, answers).await;
        }
    }
}
