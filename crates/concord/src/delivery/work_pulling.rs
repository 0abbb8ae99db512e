//! [`WorkPullingProducer`] (Akka's `WorkPullingProducerController`) and
//! [`PointToPointProducer`] (Akka's `ProducerController`): producers to consumer endpoints
//! ([`super::DeliveryConsumer`]) through the delivery layer. A task owns the core's
//! [`WorkPullingProducerController`] — a point-to-point producer is one with its consumer
//! as the only worker — and moves its messages: each transmit becomes an envelope to the
//! worker's node, each answer from a worker goes back into the machine. A worker whose node
//! is no longer a member gets nothing more, and its unconfirmed messages go to the others
//! (for a point-to-point producer they wait, in order, until the consumer's node is back).
//! Every decision — assignment, numbering, windows, resends — is the machine's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::marker::PhantomData;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use concord_core::delivery::{
    DeliveryBody, DeliveryEnvelope, DeliverySettings, QueueEvent, SendError, WorkPullingEvent,
    WorkPullingProducerController,
};
use concord_core::persistence::AtomicWrite;
use concord_core::Address;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::durable_queue::DurableQueue;
use super::error::DeliveryError;
use super::metrics;
use super::point_consumer::{ConsumerRef, INBOX};
use super::recorder::Recorder;
use super::router_effects::{register, DeliveryCommand, EndpointInput};
use super::status::ProducerStatus;
use crate::sharding::entity::encode;
use crate::singleton::Wire;

/// Longest producer id, bytes (its endpoint is `producer/<id>`, at most 256 bytes).
const MAX_PRODUCER_ID: usize = 200;
/// Commands queued to a producer's task.
const COMMAND_QUEUE: usize = 1024;

enum Command {
    Send {
        payload: Vec<u8>,
        accepted: oneshot::Sender<Result<u64, DeliveryError>>,
        confirmed: Option<oneshot::Sender<Result<(), DeliveryError>>>,
    },
    Workers(Vec<ConsumerRef>),
    Status(oneshot::Sender<WorkPullingStatus>),
    Stop,
}

/// A work-pulling producer's state, for tests and operators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkPullingStatus {
    /// The counters and gauges every producer has (`entities`: workers with a
    /// controller).
    pub producer: ProducerStatus,
    /// Messages waiting for a worker that asks for work.
    pub waiting: usize,
    /// Workers messages may go to now (given, and their node a member).
    pub workers: usize,
    /// Messages given back by workers that left, in all.
    pub reassigned: u64,
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
        workers: Vec<ConsumerRef>,
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
        let mut task = Task {
            machine: WorkPullingProducerController::new(
                producer_id.clone(),
                started_ms,
                rand::random(),
                settings,
            ),
            endpoint,
            node: me.address.to_string(),
            producer_id: producer_id.clone(),
            workers: BTreeMap::new(),
            members,
            router: commands.clone(),
            base: Instant::now(),
            waiters: HashMap::new(),
            recorder: Recorder::new(queue),
        };
        if let Some(q) = task.recorder.queue_mut() {
            let held: Vec<(u64, Vec<u8>)> =
                q.state().work().map(|(id, p)| (id, p.clone())).collect();
            if !held.is_empty() {
                tracing::info!(producer = %producer_id, messages = held.len(), "durable queue recovered: sending unconfirmed messages again");
            }
            let highest = q.state().highest_work_id();
            task.machine.restore(0, held, highest);
        }
        task.set_workers(workers);
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
            vec![consumer.clone()],
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

struct Task {
    machine: WorkPullingProducerController,
    endpoint: String,
    node: String,
    producer_id: String,
    /// The workers given, by key (`name@address`).
    workers: BTreeMap<String, ConsumerRef>,
    members: BTreeSet<Address>,
    router: mpsc::Sender<DeliveryCommand>,
    base: Instant,
    waiters: HashMap<u64, oneshot::Sender<Result<(), DeliveryError>>>,
    /// The durable queue, if any, with what is still to write.
    recorder: Recorder,
}

impl Task {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn set_workers(&mut self, workers: Vec<ConsumerRef>) {
        self.workers = workers.into_iter().map(|w| (w.to_string(), w)).collect();
        self.reassign();
    }

    /// The machine's workers: those given whose node is a member.
    fn reassign(&mut self) {
        let active: BTreeSet<String> = self
            .workers
            .iter()
            .filter(|(_, w)| self.members.contains(&w.address))
            .map(|(k, _)| k.clone())
            .collect();
        let now = self.now_ms();
        self.machine.set_workers(now, active);
    }

    fn status(&self) -> WorkPullingStatus {
        let s = self.machine.stats();
        WorkPullingStatus {
            producer: ProducerStatus {
                unconfirmed: self.machine.unconfirmed(),
                in_flight: self.machine.in_flight(),
                entities: self.machine.workers().len(),
                sent: s.sent,
                resent: s.resent,
                confirmed: s.confirmed,
                invalid: s.invalid,
            },
            waiting: self.machine.waiting(),
            workers: self.machine.workers().len(),
            reassigned: self.machine.reassigned(),
        }
    }

    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        mut inbox: mpsc::Receiver<EndpointInput>,
        registered: mpsc::Sender<EndpointInput>,
    ) {
        let mut open = true;
        let mut last_metrics = Instant::now();
        loop {
            if !open && self.machine.unconfirmed() == 0 {
                break;
            }
            let deadline = self
                .machine
                .poll_timeout()
                .map(|ms| self.base + Duration::from_millis(ms));
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            let mut stop = false;
            tokio::select! {
                c = commands.recv(), if open => match c {
                    Some(Command::Stop) => stop = true,
                    Some(c) => {
                        self.command(c);
                        // Take what else is queued, so that one write records them all.
                        for _ in 0..AtomicWrite::MAX_EVENTS {
                            match commands.try_recv() {
                                Ok(Command::Stop) => {
                                    stop = true;
                                    break;
                                }
                                Ok(c) => self.command(c),
                                Err(_) => break,
                            }
                        }
                    }
                    None => open = false,
                },
                Some(input) = inbox.recv() => self.input(input),
                () = sleep => {
                    let now = self.now_ms();
                    self.machine.handle_timeout(now);
                }
            }
            if stop {
                // As a crash would: nothing more is sent or written.
                self.recorder.refuse(&DeliveryError::Stopped);
                break;
            }
            if let Err(e) = self.recorder.record().await {
                self.fail(&e);
                break;
            }
            if !self.flush().await {
                break;
            }
            if last_metrics.elapsed() >= Duration::from_secs(1) {
                last_metrics = Instant::now();
                self.metrics();
                // Callers of `send_and_confirm` that gave up.
                self.waiters.retain(|_, w| !w.is_closed());
                if let Err(e) = self.recorder.write_confirmations().await {
                    self.fail(&e);
                    break;
                }
            }
        }
        if let Err(e) = self.recorder.write_confirmations().await {
            tracing::debug!(producer = %self.producer_id, error = %e, "the last confirmations were not recorded");
        }
        self.metrics();
        let _ = self
            .router
            .send(DeliveryCommand::Unregister {
                name: self.endpoint.clone(),
                inbox: registered,
            })
            .await;
    }

    fn metrics(&self) {
        let s = self.status();
        metrics::producer(&self.node, &self.producer_id, &s.producer);
        metrics::work_pulling(
            &self.node,
            &self.producer_id,
            s.waiting,
            s.workers,
            s.reassigned,
        );
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::Send {
                payload,
                accepted,
                confirmed,
            } => {
                let now = self.now_ms();
                let record = self.recorder.is_durable().then(|| payload.clone());
                let r = match self.machine.send(now, payload) {
                    Ok(id) => {
                        if let Some(c) = confirmed {
                            self.waiters.insert(id, c);
                        }
                        // Answered once recorded.
                        let record = record.map(|payload| QueueEvent::Taken { id, payload });
                        self.recorder.taken(record, accepted, id);
                        return;
                    }
                    Err(SendError::BufferFull { limit }) => {
                        metrics::producer_refused(&self.node, &self.producer_id);
                        Err(DeliveryError::BufferFull { limit })
                    }
                };
                let _ = accepted.send(r);
            }
            Command::Workers(w) => self.set_workers(w),
            Command::Status(reply) => {
                let _ = reply.send(self.status());
            }
            // Taken by the loop before it gets here.
            Command::Stop => {}
        }
    }

    fn input(&mut self, input: EndpointInput) {
        match input {
            EndpointInput::Members(members) => {
                self.members = members;
                self.reassign();
            }
            EndpointInput::Envelope { from, envelope } => {
                let DeliveryBody::Control(answer) = envelope.body else {
                    return;
                };
                let worker = ConsumerRef::new(from.address, envelope.from).to_string();
                let now = self.now_ms();
                self.machine.handle_message(now, &worker, answer);
            }
        }
    }

    /// The durable queue failed: the producer stops, writing nothing more; every caller
    /// waiting learns why.
    fn fail(&mut self, e: &DeliveryError) {
        tracing::error!(producer = %self.producer_id, error = %e, "the durable producer queue failed; the producer stops (start it again to recover)");
        metrics::producer_failed(&self.node, &self.producer_id);
        self.recorder.refuse(e);
        for (_, tx) in self.waiters.drain() {
            let _ = tx.send(Err(e.clone()));
        }
    }

    /// Sends what the machine wants sent and answers confirmed callers; false if the node
    /// stopped.
    async fn flush(&mut self) -> bool {
        while let Some(WorkPullingEvent::Confirmed { id, .. }) = self.machine.poll_event() {
            if let Some(q) = self.recorder.queue_mut() {
                q.done(id);
            }
            if let Some(w) = self.waiters.remove(&id) {
                let _ = w.send(Ok(()));
            }
        }
        while let Some(t) = self.machine.poll_transmit() {
            let Some(worker) = self.workers.get(&t.entity_id) else {
                continue;
            };
            let send = DeliveryCommand::Send {
                to: worker.address.clone(),
                envelope: DeliveryEnvelope {
                    to: worker.name.clone(),
                    from: self.endpoint.clone(),
                    body: DeliveryBody::Sequenced(t.message),
                },
            };
            if self.router.send(send).await.is_err() {
                return false;
            }
        }
        true
    }
}
