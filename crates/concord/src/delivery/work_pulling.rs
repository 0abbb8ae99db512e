//! [`WorkPullingProducer`] (Akka's `WorkPullingProducerController`) and
//! [`PointToPointProducer`] (Akka's `ProducerController`): producers to consumer endpoints
//! ([`super::DeliveryConsumer`]) through the delivery layer. A task
//! ([`super::work_pulling_task`]) owns the core's [`WorkPullingProducerController`] — a point-to-point producer is one with its consumer
//! as the only worker — and moves its messages: each transmit becomes an envelope to the
//! worker's node, each answer from a worker goes back into the machine. A worker whose node
//! is no longer a member — or whose node answers that it has no such endpoint (the
//! consumer stopped: `DeliveryBody::NoEndpoint`) — gets nothing more, and its
//! unconfirmed messages go to the others (for a point-to-point producer they wait, in
//! order, until the consumer is back). A worker whose endpoint was missing is tried again
//! after 5 s.
//! Every decision — assignment, numbering, windows, resends — is the machine's.

use std::marker::PhantomData;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use concord_core::delivery::{DeliverySettings, WorkPullingProducerController};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::durable_queue::DurableQueue;
use super::error::DeliveryError;
use super::point_consumer::{ConsumerRef, INBOX};
use super::router_effects::{register, DeliveryCommand};
use super::status::WorkPullingStatus;
use super::work_pulling_task::{Command, Task};
use crate::sharding::entity::encode;
use crate::singleton::Wire;

/// Longest producer id, bytes (its endpoint is `producer/<id>`, at most 256 bytes).
const MAX_PRODUCER_ID: usize = 200;
/// Commands queued to a producer's task.
const COMMAND_QUEUE: usize = 1024;

/// Whom a work-pulling producer's messages go to.
pub(super) enum Workers {
    /// These consumers (changed with [`WorkPullingProducer::set_workers`]).
    Given(Vec<ConsumerRef>),
    /// The endpoint `endpoint` on the oldest member with `role` (where a cluster
    /// singleton runs), followed as it changes.
    Singleton {
        endpoint: String,
        role: Option<String>,
    },
}

/// A work-pulling producer; see the module docs. Cheap to clone; its task runs while a
/// clone is alive or messages are unconfirmed.
pub struct WorkPullingProducer<M> {
    producer_id: String,
    commands: mpsc::Sender<Command>,
    _message: PhantomData<fn(M)>,
}

impl<M> Clone for WorkPullingProducer<M> {
    fn clone(&self) -> Self {
        WorkPullingProducer {
            producer_id: self.producer_id.clone(),
            commands: self.commands.clone(),
            _message: PhantomData,
        }
    }
}

impl<M: Wire> WorkPullingProducer<M> {
    pub(super) async fn start(
        commands: &mpsc::Sender<DeliveryCommand>,
        producer_id: String,
        workers: Workers,
        settings: DeliverySettings,
        stores: Option<&crate::persistence::Stores>,
    ) -> Result<Self, DeliveryError> {
        if producer_id.is_empty() || producer_id.len() > MAX_PRODUCER_ID {
            return Err(DeliveryError::BadName(format!(
                "producer id `{producer_id}` is empty or longer than {MAX_PRODUCER_ID} bytes"
            )));
        }
        let queue = match stores {
            Some(stores) => Some(DurableQueue::recover(stores, &producer_id).await?),
            None => None,
        };
        let endpoint = format!("producer/{producer_id}");
        let (inbox_tx, inbox) = mpsc::channel(INBOX);
        let (me, members) = register(commands, &endpoint, inbox_tx.clone()).await?;
        let started_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let mut task = Task::new(
            WorkPullingProducerController::new(
                producer_id.clone(),
                started_ms,
                rand::random(),
                settings,
            ),
            endpoint,
            me.address.to_string(),
            members,
            commands.clone(),
            queue,
        );
        task.restore();
        match workers {
            Workers::Given(workers) => task.set_workers(workers),
            Workers::Singleton { endpoint, role } => task.follow(endpoint, role),
        }
        tokio::spawn(task.run(rx, inbox, inbox_tx));
        Ok(WorkPullingProducer {
            producer_id,
            commands: tx,
            _message: PhantomData,
        })
    }

    /// The producer's id.
    pub fn producer_id(&self) -> &str {
        &self.producer_id
    }

    /// Takes `message`; returns its id once the producer holds it (it is then delivered at
    /// least once to one worker, unless this node crashes first).
    ///
    /// # Errors
    /// [`DeliveryError::BufferFull`] (nothing taken), [`DeliveryError::Encoding`],
    /// [`DeliveryError::Stopped`].
    pub async fn send(&self, message: &M) -> Result<u64, DeliveryError> {
        self.submit(message, None).await
    }

    /// Like [`WorkPullingProducer::send`], then waits up to `timeout` for a worker to
    /// confirm it.
    ///
    /// # Errors
    /// As `send`; [`DeliveryError::Timeout`] if not confirmed in time (the message stays
    /// with the producer and is still delivered).
    pub async fn send_and_confirm(
        &self,
        message: &M,
        timeout: Duration,
    ) -> Result<(), DeliveryError> {
        let (tx, rx) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        tokio::time::timeout_at(deadline, self.submit(message, Some(tx)))
            .await
            .map_err(|_| DeliveryError::Timeout(timeout))??;
        match tokio::time::timeout_at(deadline, rx).await {
            Err(_) => Err(DeliveryError::Timeout(timeout)),
            Ok(Err(_)) => Err(DeliveryError::Stopped),
            Ok(Ok(r)) => r,
        }
    }

    /// The workers are now `workers`: those that left give their unconfirmed messages to
    /// the others.
    ///
    /// # Errors
    /// [`DeliveryError::Stopped`].
    pub async fn set_workers(&self, workers: Vec<ConsumerRef>) -> Result<(), DeliveryError> {
        self.commands
            .send(Command::Workers(workers))
            .await
            .map_err(|_| DeliveryError::Stopped)
    }

    /// The producer's counters and what it holds.
    ///
    /// # Errors
    /// [`DeliveryError::Stopped`].
    pub async fn status(&self) -> Result<WorkPullingStatus, DeliveryError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Status(tx))
            .await
            .map_err(|_| DeliveryError::Stopped)?;
        rx.await.map_err(|_| DeliveryError::Stopped)
    }

    /// Stops the producer at once, as a crash would: what it holds is lost.
    pub async fn stop(&self) {
        let _ = self.commands.send(Command::Stop).await;
        self.commands.closed().await;
    }

    async fn submit(
        &self,
        message: &M,
        confirmed: Option<oneshot::Sender<Result<(), DeliveryError>>>,
    ) -> Result<u64, DeliveryError> {
        let payload = encode(message).map_err(DeliveryError::Encoding)?;
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Send {
                payload,
                accepted: tx,
                confirmed,
            })
            .await
            .map_err(|_| DeliveryError::Stopped)?;
        rx.await.map_err(|_| DeliveryError::Stopped)?
    }
}

/// A point-to-point producer: a work-pulling one with its consumer as the only worker (see
/// the module docs). Cheap to clone.
pub struct PointToPointProducer<M> {
    inner: WorkPullingProducer<M>,
    consumer: ConsumerRef,
}

impl<M> Clone for PointToPointProducer<M> {
    fn clone(&self) -> Self {
        PointToPointProducer {
            inner: self.inner.clone(),
            consumer: self.consumer.clone(),
        }
    }
}

impl<M: Wire> PointToPointProducer<M> {
    pub(super) async fn start(
        commands: &mpsc::Sender<DeliveryCommand>,
        producer_id: String,
        consumer: ConsumerRef,
        settings: DeliverySettings,
        stores: Option<&crate::persistence::Stores>,
    ) -> Result<Self, DeliveryError> {
        let inner = WorkPullingProducer::start(
            commands,
            producer_id,
            Workers::Given(vec![consumer.clone()]),
            settings,
            stores,
        )
        .await?;
        Ok(PointToPointProducer { inner, consumer })
    }

    /// The consumer.
    pub fn consumer(&self) -> &ConsumerRef {
        &self.consumer
    }

    /// The producer's id.
    pub fn producer_id(&self) -> &str {
        self.inner.producer_id()
    }

    /// As [`WorkPullingProducer::send`]: delivered in order, at least once.
    ///
    /// # Errors
    /// As [`WorkPullingProducer::send`].
    pub async fn send(&self, message: &M) -> Result<u64, DeliveryError> {
        self.inner.send(message).await
    }

    /// As [`WorkPullingProducer::send_and_confirm`].
    ///
    /// # Errors
    /// As [`WorkPullingProducer::send_and_confirm`].
    pub async fn send_and_confirm(
        &self,
        message: &M,
        timeout: Duration,
    ) -> Result<(), DeliveryError> {
        self.inner.send_and_confirm(message, timeout).await
    }

    /// As [`WorkPullingProducer::status`].
    ///
    /// # Errors
    /// [`DeliveryError::Stopped`].
    pub async fn status(&self) -> Result<WorkPullingStatus, DeliveryError> {
        self.inner.status().await
    }

    /// As [`WorkPullingProducer::stop`].
    pub async fn stop(&self) {
        self.inner.stop().await;
    }
}

/// A producer to a consumer endpoint that a **cluster singleton** runs (Akka: a
/// `ProducerController` whose consumer is the singleton's): its one worker is the endpoint
/// of that name on the oldest member with the singleton's role, followed as the singleton
/// moves — what the previous node did not confirm goes to the new one first, in order;
/// while the endpoint is not there yet (the singleton starting), messages wait and it is
/// tried again every 5 s. In order, at least once: a message handled whose confirmation
/// was lost with the move is handled again by the new instance, and a late `NoEndpoint`
/// (from before the new instance's endpoint existed) can make it handle some again.
pub struct SingletonProducer<M> {
    inner: WorkPullingProducer<M>,
    endpoint: String,
}

impl<M> Clone for SingletonProducer<M> {
    fn clone(&self) -> Self {
        SingletonProducer {
            inner: self.inner.clone(),
            endpoint: self.endpoint.clone(),
        }
    }
}

impl<M: Wire> SingletonProducer<M> {
    pub(super) async fn start(
        commands: &mpsc::Sender<DeliveryCommand>,
        producer_id: String,
        endpoint: String,
        role: Option<&str>,
        settings: DeliverySettings,
        stores: Option<&crate::persistence::Stores>,
    ) -> Result<Self, DeliveryError> {
        // "" is any member, as the singleton layer reads its role setting.
        let role = role.filter(|r| !r.is_empty()).map(str::to_string);
        if endpoint.is_empty() || endpoint.len() > concord_core::delivery::MAX_ENDPOINT_NAME_BYTES {
            return Err(DeliveryError::BadName(format!(
                "endpoint name `{endpoint}` is empty or longer than 256 bytes"
            )));
        }
        let inner = WorkPullingProducer::start(
            commands,
            producer_id,
            Workers::Singleton {
                endpoint: endpoint.clone(),
                role,
            },
            settings,
            stores,
        )
        .await?;
        Ok(SingletonProducer { inner, endpoint })
    }

    /// The singleton's endpoint name.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The producer's id.
    pub fn producer_id(&self) -> &str {
        self.inner.producer_id()
    }

    /// As [`WorkPullingProducer::send`]: delivered in order, at least once.
    ///
    /// # Errors
    /// As [`WorkPullingProducer::send`].
    pub async fn send(&self, message: &M) -> Result<u64, DeliveryError> {
        self.inner.send(message).await
    }

    /// As [`WorkPullingProducer::send_and_confirm`].
    ///
    /// # Errors
    /// As [`WorkPullingProducer::send_and_confirm`].
    pub async fn send_and_confirm(
        &self,
        message: &M,
        timeout: Duration,
    ) -> Result<(), DeliveryError> {
        self.inner.send_and_confirm(message, timeout).await
    }

    /// As [`WorkPullingProducer::status`] (`workers`: 1 while the singleton's node is known
    /// and its endpoint not found missing).
    ///
    /// # Errors
    /// [`DeliveryError::Stopped`].
    pub async fn status(&self) -> Result<WorkPullingStatus, DeliveryError> {
        self.inner.status().await
    }

    /// As [`WorkPullingProducer::stop`].
    pub async fn stop(&self) {
        self.inner.stop().await;
    }
}
