//! The task of a [`super::WorkPullingProducer`] (and so of a point-to-point producer): it
//! owns the core's [`WorkPullingProducerController`], takes the handles' commands, records
//! what the durable queue needs, moves the machine's messages as envelopes to the
//! workers' nodes and their answers back into the machine, and decides which workers the
//! machine may use: those given whose node is a member and whose endpoint is not known to
//! be missing ([`DeliveryBody::NoEndpoint`], tried again after 5 s).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use concord_core::delivery::{
    DeliveryBody, DeliveryEnvelope, QueueEvent, RouterMembers, SendError, WorkPullingEvent,
    WorkPullingProducerController,
};
use concord_core::persistence::AtomicWrite;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::durable_queue::DurableQueue;
use super::error::DeliveryError;
use super::metrics;
use super::point_consumer::ConsumerRef;
use super::recorder::{Recorder, WRITE_CONFIRMATIONS_IDLE};
use super::router_effects::{DeliveryCommand, EndpointInput};
use super::status::{ProducerStatus, WorkPullingStatus};

/// How long a worker whose node answered that it has no such endpoint gets nothing, before
/// it is tried again (it may have started since: a consumer started after its producer,
/// or started again).
const NO_ENDPOINT_RETRY: Duration = Duration::from_secs(5);

/// What a producer's handles ask its task.
pub(super) enum Command {
    Send {
        payload: Vec<u8>,
        accepted: oneshot::Sender<Result<u64, DeliveryError>>,
        confirmed: Option<oneshot::Sender<Result<(), DeliveryError>>>,
    },
    Workers(Vec<ConsumerRef>),
    Status(oneshot::Sender<WorkPullingStatus>),
    Stop,
}

pub(super) struct Task {
    machine: WorkPullingProducerController,
    endpoint: String,
    node: String,
    producer_id: String,
    /// The workers given, by key (`name@address`).
    workers: BTreeMap<String, ConsumerRef>,
    members: RouterMembers,
    /// For a producer to a singleton: its endpoint's name and the singleton's role; the
    /// one worker is that endpoint on the oldest member with the role.
    follow: Option<(String, Option<String>)>,
    /// Workers whose node answered that it has no such endpoint, with when: left out
    /// until [`NO_ENDPOINT_RETRY`] has passed.
    missing: BTreeMap<String, Instant>,
    router: mpsc::Sender<DeliveryCommand>,
    base: Instant,
    waiters: HashMap<u64, oneshot::Sender<Result<(), DeliveryError>>>,
    /// The durable queue, if any, with what is still to write.
    recorder: Recorder,
}

impl Task {
    pub(super) fn new(
        machine: WorkPullingProducerController,
        endpoint: String,
        node: String,
        members: RouterMembers,
        router: mpsc::Sender<DeliveryCommand>,
        queue: Option<DurableQueue>,
    ) -> Self {
        let producer_id = machine.producer_id().to_string();
        Task {
            machine,
            endpoint,
            node,
            producer_id,
            workers: BTreeMap::new(),
            members,
            follow: None,
            missing: BTreeMap::new(),
            router,
            base: Instant::now(),
            waiters: HashMap::new(),
            recorder: Recorder::new(queue),
        }
    }

    /// Gives the machine what the durable queue holds, if any.
    pub(super) fn restore(&mut self) {
        let Some(q) = self.recorder.queue_mut() else {
            return;
        };
        let held: Vec<(u64, Vec<u8>)> = q.state().work().map(|(id, p)| (id, p.clone())).collect();
        if !held.is_empty() {
            tracing::info!(producer = %self.producer_id, messages = held.len(), "durable queue recovered: sending unconfirmed messages again");
        }
        let highest = q.state().highest_work_id();
        self.machine.restore(0, held, highest);
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Makes this a producer to the singleton whose endpoint is `name` (with `role`): its
    /// one worker follows the oldest member with the role.
    pub(super) fn follow(&mut self, name: String, role: Option<String>) {
        self.follow = Some((name, role));
        self.follow_oldest();
    }

    /// For a producer to a singleton: the worker is the endpoint on the oldest member now
    /// (none while there is none); another worker than before takes the old one's
    /// unconfirmed messages first, in order.
    fn follow_oldest(&mut self) {
        let Some((name, role)) = &self.follow else {
            return;
        };
        let target: Vec<ConsumerRef> = self
            .members
            .oldest(role.as_deref())
            .map(|a| ConsumerRef::new(a.clone(), name.clone()))
            .into_iter()
            .collect();
        let same = target.len() == self.workers.len()
            && target
                .iter()
                .all(|t| self.workers.contains_key(&t.to_string()));
        if same {
            self.reassign();
        } else {
            if let Some(t) = target.first() {
                tracing::info!(producer = %self.producer_id, consumer = %t, "the singleton's oldest member changed: its messages go there");
            }
            self.set_workers(target);
        }
    }

    pub(super) fn set_workers(&mut self, workers: Vec<ConsumerRef>) {
        self.workers = workers.into_iter().map(|w| (w.to_string(), w)).collect();
        let workers = &self.workers;
        self.missing.retain(|k, _| workers.contains_key(k));
        self.reassign();
    }

    /// The machine's workers: those given whose node is a member and whose endpoint is not
    /// known to be missing.
    fn reassign(&mut self) {
        let active: BTreeSet<String> = self
            .workers
            .iter()
            .filter(|(k, w)| {
                self.members.addresses.contains(&w.address) && !self.missing.contains_key(*k)
            })
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
                window: self.machine.window_open(),
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

    pub(super) async fn run(
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
            let retry = self
                .missing
                .values()
                .min()
                .map(|at| *at + NO_ENDPOINT_RETRY);
            let deadline = self
                .machine
                .poll_timeout()
                .map(|ms| self.base + Duration::from_millis(ms))
                .into_iter()
                .chain(retry)
                .min();
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
                    self.retry_missing();
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
                if let Err(e) = self
                    .recorder
                    .write_confirmations(WRITE_CONFIRMATIONS_IDLE)
                    .await
                {
                    self.fail(&e);
                    break;
                }
            }
        }
        if let Err(e) = self.recorder.write_confirmations(Duration::ZERO).await {
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
            // A producer to a singleton follows the oldest member instead.
            Command::Workers(w) => {
                if self.follow.is_none() {
                    self.set_workers(w);
                }
            }
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
                if self.follow.is_some() {
                    self.follow_oldest();
                } else {
                    self.reassign();
                }
            }
            EndpointInput::Envelope { from, envelope } => {
                let worker = ConsumerRef::new(from.address, envelope.from).to_string();
                match envelope.body {
                    DeliveryBody::Control(answer) => {
                        let now = self.now_ms();
                        self.machine.handle_message(now, &worker, answer);
                    }
                    DeliveryBody::NoEndpoint => self.endpoint_missing(worker),
                    DeliveryBody::Sequenced(_) => {}
                }
            }
        }
    }

    /// Worker `worker`'s node has no such endpoint: it gets nothing for
    /// [`NO_ENDPOINT_RETRY`], and its unconfirmed messages go to the others.
    fn endpoint_missing(&mut self, worker: String) {
        if !self.workers.contains_key(&worker) || self.missing.contains_key(&worker) {
            return;
        }
        tracing::info!(producer = %self.producer_id, %worker, retry_s = NO_ENDPOINT_RETRY.as_secs(), "a worker's node has no such endpoint; its messages go to the other workers");
        self.missing.insert(worker, Instant::now());
        self.reassign();
    }

    /// Workers missing for [`NO_ENDPOINT_RETRY`] are tried again.
    fn retry_missing(&mut self) {
        let before = self.missing.len();
        self.missing
            .retain(|_, at| at.elapsed() < NO_ENDPOINT_RETRY);
        if self.missing.len() != before {
            self.reassign();
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
