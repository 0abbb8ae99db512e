//! [`ShardingProducer`]: reliable delivery to sharded entities from this node (Akka's
//! `ShardingProducerController`). The core's [`ShardingProducerController`] is shared by the
//! handles and the producer's task ([`super::producer_core::ProducerCore`]): without a
//! durable queue a `send` hands its message to the machine in the caller's task; with one,
//! the task takes it and records it first. The task moves the machine's messages: each, or
//! each batch for one entity, becomes an ask of the entity's consumer ([`ConsumerEntity`]: a
//! [`super::ReliableConsumer`], or an event-sourced [`super::ReliableEventSourced`]) through
//! sharding, sent in order, and the answer (a confirmation with demand, a resend request)
//! goes back into the machine. Every decision — numbering, windows, resends, backoff, the
//! buffer bound — is the machine's.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use concord_core::delivery::{DeliverySettings, ShardingProducerController};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::consumer::ConsumerEntity;
use super::durable_queue::DurableQueue;
use super::error::DeliveryError;
use super::idempotency::{frame, MAX_KEY_BYTES};
use super::producer_core::{Confirmation, ProducerCore};
use super::producer_task::{Command, Task};
use super::status::ProducerStatus;
use crate::persistence::Stores;
use crate::sharding::entity::encode;
use crate::sharding::ShardRegion;

/// Deliveries of one `ask` that come back confirmed without an answer before it gives up.
const ASK_ATTEMPTS: u32 = 3;

/// Commands queued to a producer's task.
const COMMAND_QUEUE: usize = 1024;

/// A reliable producer to the entities of one sharded type (see the module docs). Cheap to
/// clone; its task runs while a clone is alive or messages are unconfirmed.
pub struct ShardingProducer<E: ConsumerEntity> {
    producer_id: String,
    commands: mpsc::Sender<Command<E::Answer>>,
    /// The machine, shared with the task (a producer without a durable queue takes
    /// messages through it directly).
    core: Arc<ProducerCore<E::Answer>>,
    durable: bool,
    _types: PhantomData<fn() -> E>,
}

impl<E: ConsumerEntity> Clone for ShardingProducer<E> {
    fn clone(&self) -> Self {
        ShardingProducer {
            producer_id: self.producer_id.clone(),
            commands: self.commands.clone(),
            core: self.core.clone(),
            durable: self.durable,
            _types: PhantomData,
        }
    }
}

impl<E: ConsumerEntity> ShardingProducer<E> {
    /// Starts producer `producer_id` to `region`'s entities, without a durable queue:
    /// what it holds unconfirmed is lost if this node crashes. The id must be unique in
    /// the cluster while the producer runs (a name and the node's address, e.g.
    /// `format!("orders@{}", node.self_address())`): consumers number each id's messages.
    /// `node` labels the metrics. Runs on the current tokio runtime.
    pub fn start(
        producer_id: impl Into<String>,
        node: &concord_core::Address,
        region: ShardRegion<E>,
        settings: DeliverySettings,
    ) -> Self {
        Self::spawn(producer_id.into(), node, region, settings, None)
    }

    /// Starts producer `producer_id` with a **durable queue** in `stores` (the node's
    /// persistence store: [`crate::persistence::Persistence::stores_within`]): every
    /// message is stored before `send` returns, and a producer started again with the same
    /// id — after a crash, on this node or another — first sends what was never
    /// confirmed (docs/RELIABLE_DELIVERY.md). Give it an id that is the same after a
    /// restart (a name, or a name and the node's address when each node has its own
    /// producer), and run one producer per id at a time: a second one's first write fails
    /// and it stops.
    ///
    /// # Errors
    /// [`DeliveryError::Store`] if the queue cannot be read (the store is unavailable, an
    /// event does not decode, the id is not a valid persistence id).
    pub async fn start_durable(
        producer_id: impl Into<String>,
        node: &concord_core::Address,
        region: ShardRegion<E>,
        settings: DeliverySettings,
        stores: &Stores,
    ) -> Result<Self, DeliveryError> {
        let producer_id = producer_id.into();
        let queue = DurableQueue::recover(stores, &producer_id).await?;
        let held = queue.state().unconfirmed();
        if held > 0 {
            tracing::info!(producer = %producer_id, messages = held, "durable queue recovered: sending unconfirmed messages again");
        }
        Ok(Self::spawn(
            producer_id,
            node,
            region,
            settings,
            Some(queue),
        ))
    }

    fn spawn(
        producer_id: String,
        node: &concord_core::Address,
        region: ShardRegion<E>,
        settings: DeliverySettings,
        queue: Option<DurableQueue>,
    ) -> Self {
        let started_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut machine = ShardingProducerController::new(
            producer_id.clone(),
            started_ms,
            rand::random(),
            settings.clone(),
        );
        if let Some(q) = &queue {
            for (entity_id, held) in q.state().entities() {
                if let Some(incarnation) = held.incarnation {
                    machine.restore(
                        0,
                        entity_id,
                        incarnation,
                        held.confirmed_seq_nr,
                        held.unconfirmed.iter().map(|(_, p, _)| p.clone()).collect(),
                    );
                }
            }
        }
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let durable = queue.is_some();
        let core = Arc::new(ProducerCore::new(machine, node.to_string()));
        let task = Task::<E>::new(core.clone(), region, &settings, queue);
        tokio::spawn(task.run(rx));
        ShardingProducer {
            producer_id,
            commands: tx,
            core,
            durable,
            _types: PhantomData,
        }
    }

    /// The producer's id.
    pub fn producer_id(&self) -> &str {
        &self.producer_id
    }

    /// Takes `message` for entity `entity_id`; returns its sequence number once the
    /// producer holds it (it is then delivered at least once, in order with this
    /// producer's other messages to the entity, unless this node crashes first).
    ///
    /// # Errors
    /// [`DeliveryError::BufferFull`] (nothing taken), [`DeliveryError::BadEntityId`],
    /// [`DeliveryError::Encoding`], [`DeliveryError::Stopped`].
    pub async fn send(&self, entity_id: &str, message: &E::Payload) -> Result<u64, DeliveryError> {
        self.submit(entity_id, message, None).await
    }

    /// Like [`ShardingProducer::send`], then waits up to `timeout` for the entity to
    /// confirm it: its answer when it handled the message on this delivery (`None` when
    /// the confirmation came another way, e.g. with a later message's).
    ///
    /// # Errors
    /// As `send`; [`DeliveryError::Timeout`] if not confirmed within `timeout` (the
    /// message stays with the producer and is still delivered).
    pub async fn send_and_confirm(
        &self,
        entity_id: &str,
        message: &E::Payload,
        timeout: Duration,
    ) -> Result<Option<E::Answer>, DeliveryError> {
        let (tx, rx) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        tokio::time::timeout_at(deadline, self.submit(entity_id, message, Some(tx)))
            .await
            .map_err(|_| DeliveryError::Timeout(timeout))??;
        match tokio::time::timeout_at(deadline, rx).await {
            Err(_) => Err(DeliveryError::Timeout(timeout)),
            Ok(Err(_)) => Err(DeliveryError::Stopped),
            Ok(Ok(Err(e))) => Err(e),
            Ok(Ok(Ok(None))) => Ok(None),
            Ok(Ok(Ok(answer))) => Ok(answer),
        }
    }

    /// Asks entity `entity_id` under idempotency key `key` (at most 256 bytes): `message`
    /// is delivered like [`ShardingProducer::send`]'s, and the answer is the entity's. The
    /// consumer keeps the answers of its last keys (see [`super::idempotency`]): a message
    /// under a key it knows is not handled again but answered as the first time, whichever
    /// producer sends it — so a caller may repeat an ask that timed out, here or through
    /// another node, and the entity applies it once. If a confirmation comes without the
    /// answer (it came with a later message's), the ask is sent again under the same key.
    ///
    /// # Errors
    /// As `send`; [`DeliveryError::BadName`] for an empty or too long key;
    /// [`DeliveryError::Timeout`] if no answer came within `timeout` (the message stays
    /// with the producer and is still delivered); [`DeliveryError::NoAnswer`] if it was
    /// confirmed three times without an answer (the consumer skipped it: it did not decode,
    /// or the consumer's build does not know keyed messages).
    pub async fn ask(
        &self,
        entity_id: &str,
        key: &str,
        message: &E::Payload,
        timeout: Duration,
    ) -> Result<E::Answer, DeliveryError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(DeliveryError::BadName(format!(
                "idempotency key `{key}` is empty or longer than {MAX_KEY_BYTES} bytes"
            )));
        }
        let payload = frame(key, &encode(message).map_err(DeliveryError::Encoding)?);
        let deadline = Instant::now() + timeout;
        for _ in 0..ASK_ATTEMPTS {
            let (tx, rx) = oneshot::channel();
            tokio::time::timeout_at(
                deadline,
                self.submit_payload(entity_id, payload.clone(), Some(tx)),
            )
            .await
            .map_err(|_| DeliveryError::Timeout(timeout))??;
            match tokio::time::timeout_at(deadline, rx).await {
                Err(_) => return Err(DeliveryError::Timeout(timeout)),
                Ok(Err(_)) => return Err(DeliveryError::Stopped),
                Ok(Ok(Err(e))) => return Err(e),
                Ok(Ok(Ok(Some(answer)))) => return Ok(answer),
                // Confirmed without the answer: asked again, the consumer answers from
                // what it kept.
                Ok(Ok(Ok(None))) => {}
            }
        }
        Err(DeliveryError::NoAnswer(ASK_ATTEMPTS))
    }

    /// The producer's counters and what it holds.
    ///
    /// # Errors
    /// [`DeliveryError::Stopped`].
    pub async fn status(&self) -> Result<ProducerStatus, DeliveryError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Stats(tx))
            .await
            .map_err(|_| DeliveryError::Stopped)?;
        rx.await.map_err(|_| DeliveryError::Stopped)
    }

    /// Stops the producer at once, as a crash would: nothing more is sent, resent or
    /// recorded. With a durable queue, a producer started again with the same id sends
    /// what was not confirmed; without one it is lost.
    pub async fn stop(&self) {
        self.core.lock().stopped = true;
        let _ = self.commands.send(Command::Stop).await;
        self.commands.closed().await;
    }

    /// True if `other` is a handle of this very producer (not merely one with the same id,
    /// e.g. the same producer started again).
    pub fn is_same(&self, other: &Self) -> bool {
        self.commands.same_channel(&other.commands)
    }

    /// Waits until the producer has stopped: [`ShardingProducer::stop`] was called, its
    /// durable queue failed (start it again to recover), or its node stopped.
    pub async fn stopped(&self) {
        self.commands.closed().await;
    }

    async fn submit(
        &self,
        entity_id: &str,
        message: &E::Payload,
        confirmed: Option<Confirmation<E::Answer>>,
    ) -> Result<u64, DeliveryError> {
        let payload = encode(message).map_err(DeliveryError::Encoding)?;
        self.submit_payload(entity_id, payload, confirmed).await
    }

    async fn submit_payload(
        &self,
        entity_id: &str,
        payload: Vec<u8>,
        confirmed: Option<Confirmation<E::Answer>>,
    ) -> Result<u64, DeliveryError> {
        if !self.durable {
            // Taken here: the task is woken to send it (with whatever else came meanwhile).
            // A caller that sends in a loop yields now and then, like any tokio resource.
            tokio::task::coop::consume_budget().await;
            if self.commands.is_closed() {
                // The task is gone (it ended, or panicked): nothing would send it.
                return Err(DeliveryError::Stopped);
            }
            let accepted = self.core.take(entity_id, payload, confirmed)?;
            self.core.wake();
            return Ok(accepted.seq_nr);
        }
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Send {
                entity_id: entity_id.to_string(),
                payload,
                accepted: tx,
                confirmed,
            })
            .await
            .map_err(|_| DeliveryError::Stopped)?;
        rx.await.map_err(|_| DeliveryError::Stopped)?
    }
}
