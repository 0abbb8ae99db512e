//! [`WorkPullingProducerController`]: one producer, a pool of workers (Akka's
//! `WorkPullingProducerController`). Each message goes to one worker that asked for work:
//! every worker has its own [`super::ProducerController`] (numbering, window, resends),
//! held in a [`ShardingProducerController`] keyed by worker, and a message is assigned
//! only to a worker with demand — a first message goes without demand, then a worker gets
//! more as it confirms — so a slow worker gets less and a fast one more. Messages no
//! worker asked for yet wait in the producer (in order), within `buffer-size` together
//! with those assigned and unconfirmed.
//!
//! Workers come and go ([`WorkPullingProducerController::set_workers`]): a worker that
//! leaves the set — removed by its owner, or its node left the cluster — gives its
//! unconfirmed messages back, ahead of those waiting, and they go to other workers (at
//! least once: one it handled whose confirmation was lost is handled again elsewhere).
//! A point-to-point producer is the same with one worker, the consumer. Sans-IO:
//! `send`, `handle_message`, `handle_timeout`, `set_workers` in; `poll_transmit`,
//! `poll_event`, `poll_timeout` out.

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::producer::{ProducerStats, SendError};
use super::settings::DeliverySettings;
use super::sharding_producer::{
    EntityTransmit, ShardingProducerController, ShardingProducerEvent, MAX_ENTITY_ID_BYTES,
};
use super::ConsumerMessage;

/// What the producer tells its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkPullingEvent {
    /// Message `id` (as [`WorkPullingProducerController::send`] numbered it) was
    /// confirmed by `worker`.
    Confirmed {
        /// The message's id.
        id: u64,
        /// The worker that confirmed it.
        worker: String,
    },
}

/// The producer side for a pool of workers; see the module docs.
#[derive(Debug)]
pub struct WorkPullingProducerController {
    inner: ShardingProducerController,
    buffer_size: u32,
    /// The workers messages may be assigned to (their keys).
    workers: BTreeSet<String>,
    /// Where the round over workers with demand starts next.
    cursor: Option<String>,
    /// Messages no worker took yet: (id, payload), in order.
    waiting: VecDeque<(u64, Vec<u8>)>,
    /// Per worker, the ids of its unconfirmed messages in its numbering order.
    assigned: HashMap<String, VecDeque<u64>>,
    next_id: u64,
    /// Messages given back by workers that left, in all.
    reassigned: u64,
    events: VecDeque<WorkPullingEvent>,
}

impl WorkPullingProducerController {
    /// A producer `producer_id` started at `started_ms` (ms since the Unix epoch) with a
    /// random `nonce`, with no worker yet.
    pub fn new(
        producer_id: String,
        started_ms: u64,
        nonce: u64,
        settings: DeliverySettings,
    ) -> Self {
        let buffer_size = settings.buffer_size;
        WorkPullingProducerController {
            inner: ShardingProducerController::new(producer_id, started_ms, nonce, settings),
            buffer_size,
            workers: BTreeSet::new(),
            cursor: None,
            waiting: VecDeque::new(),
            assigned: HashMap::new(),
            next_id: 1,
            reassigned: 0,
            events: VecDeque::new(),
        }
    }

    /// Restores what a durable queue held ([`super::DurableQueueState::work`]): `items`
    /// wait for workers ahead of anything sent after, in order; new ids come after
    /// `highest_id`. Their ids are kept (the queue records confirmations by id).
    pub fn restore(&mut self, now_ms: u64, items: Vec<(u64, Vec<u8>)>, highest_id: u64) {
        let highest = items.iter().map(|(id, _)| *id).max().unwrap_or(0);
        self.next_id = self.next_id.max(highest_id.max(highest) + 1);
        for item in items.into_iter().rev() {
            self.waiting.push_front(item);
        }
        self.assign(now_ms);
    }

    /// The producer's id.
    pub fn producer_id(&self) -> &str {
        self.inner.producer_id()
    }

    /// Messages held: waiting for a worker, or assigned and unconfirmed.
    pub fn unconfirmed(&self) -> usize {
        self.waiting.len() + self.inner.unconfirmed()
    }

    /// Messages waiting for a worker.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Messages sent to workers and not confirmed yet.
    pub fn in_flight(&self) -> u64 {
        self.inner.in_flight()
    }

    /// Messages the workers' flow control windows let it send now, over all workers.
    pub fn window_open(&self) -> u64 {
        self.inner.window_open()
    }

    /// The workers.
    pub fn workers(&self) -> &BTreeSet<String> {
        &self.workers
    }

    /// Messages given back by workers that left, in all.
    pub fn reassigned(&self) -> u64 {
        self.reassigned
    }

    /// Counters over every worker's controller, past ones included.
    pub fn stats(&self) -> ProducerStats {
        self.inner.stats()
    }

    /// Takes `payload`; returns its id (in [`WorkPullingEvent::Confirmed`]).
    ///
    /// # Errors
    /// [`SendError::BufferFull`] when `buffer-size` messages are held.
    pub fn send(&mut self, now_ms: u64, payload: Vec<u8>) -> Result<u64, SendError> {
        if self.unconfirmed() >= self.buffer_size as usize {
            return Err(SendError::BufferFull {
                limit: self.buffer_size,
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back((id, payload));
        self.assign(now_ms);
        Ok(id)
    }

    /// The workers are now `workers` (keys of at most 512 bytes; longer ones are ignored):
    /// those that left give their unconfirmed messages back, first in line for the others.
    pub fn set_workers(&mut self, now_ms: u64, workers: BTreeSet<String>) {
        let workers: BTreeSet<String> = workers
            .into_iter()
            .filter(|w| !w.is_empty() && w.len() <= MAX_ENTITY_ID_BYTES)
            .collect();
        let gone: Vec<String> = self.workers.difference(&workers).cloned().collect();
        for w in gone.iter().rev() {
            let payloads = self.inner.remove(w);
            let ids = self.assigned.remove(w).unwrap_or_default();
            self.reassigned += payloads.len() as u64;
            // Ahead of what waits, in their order.
            for (id, payload) in ids.into_iter().zip(payloads).rev() {
                self.waiting.push_front((id, payload));
            }
        }
        self.workers = workers;
        self.assign(now_ms);
    }

    /// `worker` answered. An answer from a worker not in the set is ignored.
    pub fn handle_message(&mut self, now_ms: u64, worker: &str, message: ConsumerMessage) {
        if !self.workers.contains(worker) {
            return;
        }
        self.inner.handle_message(now_ms, worker, message);
        self.collect();
        self.assign(now_ms);
    }

    /// Time passed: resends what timed out.
    pub fn handle_timeout(&mut self, now_ms: u64) {
        self.inner.handle_timeout(now_ms);
        self.collect();
        self.assign(now_ms);
    }

    /// Next message to send (`entity_id` is the worker).
    pub fn poll_transmit(&mut self) -> Option<EntityTransmit> {
        self.inner.poll_transmit()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<WorkPullingEvent> {
        self.events.pop_front()
    }

    /// When [`WorkPullingProducerController::handle_timeout`] must run, ms.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.inner.poll_timeout()
    }

    /// Gives waiting messages to workers with demand, round the workers from the cursor.
    fn assign(&mut self, now_ms: u64) {
        while !self.waiting.is_empty() {
            // Room in the workers' controllers: a restored queue may hold more than the
            // buffer, and the rest waits for confirmations.
            if self.inner.unconfirmed() >= self.buffer_size as usize {
                return;
            }
            let Some(worker) = self.next_with_demand() else {
                return;
            };
            let Some((id, payload)) = self.waiting.pop_front() else {
                return;
            };
            match self.inner.send(now_ms, &worker, payload) {
                Ok(_) => {
                    self.assigned
                        .entry(worker.clone())
                        .or_default()
                        .push_back(id);
                    self.cursor = Some(worker);
                }
                // Cannot happen: there is room (checked above) and worker keys are
                // checked in `set_workers`.
                Err(_) => return,
            }
        }
    }

    /// The first worker after the cursor (cyclically) that asked for more than it got.
    fn next_with_demand(&self) -> Option<String> {
        let after = self
            .cursor
            .as_ref()
            .map(|c| {
                self.workers
                    .range::<String, _>((std::ops::Bound::Excluded(c), std::ops::Bound::Unbounded))
                    .chain(self.workers.range::<String, _>(..=c))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_else(|| self.workers.iter().collect());
        after
            .into_iter()
            .find(|w| self.inner.demand(w) > 0)
            .cloned()
    }

    /// Turns the workers' confirmations into events.
    fn collect(&mut self) {
        while let Some(ShardingProducerEvent::Confirmed { entity_id, .. }) = self.inner.poll_event()
        {
            if let Some(id) = self
                .assigned
                .get_mut(&entity_id)
                .and_then(|ids| ids.pop_front())
            {
                self.events.push_back(WorkPullingEvent::Confirmed {
                    id,
                    worker: entity_id,
                });
            }
        }
    }
}
