//! [`ProducerCore`]: what a [`super::ShardingProducer`]'s handles and its task share — the
//! core's [`ShardingProducerController`] and the `send_and_confirm` callers, behind one
//! lock. A producer without a durable queue takes a message in its caller's task: the
//! lock, the machine's `send`, a wake-up of the producer's task (no round trip to it), so
//! what callers send while the task is busy piles up in the machine and goes out together,
//! in one ask per entity (up to the entity's window). A durable producer's messages go
//! through its task, which records them before their callers hear.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use concord_core::delivery::{Accepted, SendError, ShardingProducerController, ShardingSendError};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::error::DeliveryError;
use super::metrics;

/// Where a `send_and_confirm` caller waits.
pub(super) type Confirmation<A> = oneshot::Sender<Result<Option<A>, DeliveryError>>;

/// A `send_and_confirm` caller, and the entity's answer once known.
pub(super) type Waiter<A> = (Confirmation<A>, Option<A>);

/// What the lock guards.
pub(super) struct Held<A> {
    /// The protocol machine: numbering, windows, resends, the buffer bound.
    pub(super) machine: ShardingProducerController,
    /// `send_and_confirm` callers by (entity, number), with the entity's answer once known.
    pub(super) waiters: HashMap<(String, u64), Waiter<A>>,
    /// The producer stopped (`stop`, its durable queue failed, or its task ended): nothing
    /// more is taken.
    pub(super) stopped: bool,
}

/// See the module docs.
pub(super) struct ProducerCore<A> {
    held: Mutex<Held<A>>,
    /// Wakes the producer's task: the machine may have something to send.
    wake: Notify,
    /// The machine's clock starts here (ms).
    base: Instant,
    node: String,
    producer_id: String,
}

impl<A> ProducerCore<A> {
    pub(super) fn new(machine: ShardingProducerController, node: String) -> Self {
        let producer_id = machine.producer_id().to_string();
        ProducerCore {
            held: Mutex::new(Held {
                machine,
                waiters: HashMap::new(),
                stopped: false,
            }),
            wake: Notify::new(),
            base: Instant::now(),
            node,
            producer_id,
        }
    }

    /// The node's address (metrics label).
    pub(super) fn node(&self) -> &str {
        &self.node
    }

    /// The producer's id.
    pub(super) fn producer_id(&self) -> &str {
        &self.producer_id
    }

    /// The machine's clock: ms since the producer started.
    pub(super) fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The machine's time `ms` as an instant.
    pub(super) fn instant(&self, ms: u64) -> Instant {
        self.base + std::time::Duration::from_millis(ms)
    }

    /// The shared state (a panic elsewhere while it was held leaves it as it was: every
    /// change under the lock is a whole machine step).
    pub(super) fn lock(&self) -> MutexGuard<'_, Held<A>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the producer's task.
    pub(super) fn wake(&self) {
        self.wake.notify_one();
    }

    /// Returns once [`ProducerCore::wake`] was called (since the last return).
    pub(super) async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Hands `payload` for entity `entity_id` to the machine; `confirmed`, if any, hears
    /// when the entity confirmed it.
    ///
    /// # Errors
    /// [`DeliveryError::BufferFull`] (counted), [`DeliveryError::BadEntityId`],
    /// [`DeliveryError::Stopped`]: nothing was taken.
    pub(super) fn take(
        &self,
        entity_id: &str,
        payload: Vec<u8>,
        confirmed: Option<Confirmation<A>>,
    ) -> Result<Accepted, DeliveryError> {
        let now = self.now_ms();
        let mut held = self.lock();
        if held.stopped {
            return Err(DeliveryError::Stopped);
        }
        match held.machine.send(now, entity_id, payload) {
            Ok(accepted) => {
                if let Some(c) = confirmed {
                    held.waiters
                        .insert((entity_id.to_string(), accepted.seq_nr), (c, None));
                }
                Ok(accepted)
            }
            Err(ShardingSendError::Full(SendError::BufferFull { limit })) => {
                drop(held);
                metrics::producer_refused(&self.node, &self.producer_id);
                Err(DeliveryError::BufferFull { limit })
            }
            Err(ShardingSendError::BadEntityId) => Err(DeliveryError::BadEntityId),
        }
    }

    /// The producer stops taking messages; every `send_and_confirm` caller waiting hears
    /// `e`.
    pub(super) fn close(&self, e: &DeliveryError) {
        let mut held = self.lock();
        held.stopped = true;
        for (_, (tx, _)) in held.waiters.drain() {
            let _ = tx.send(Err(e.clone()));
        }
    }
}
