//! [`Recorder`]: a producer task's durable queue (if it has one) with what it took and has
//! not written yet. A message taken by a durable producer is answered to its caller only
//! once its record is written; without a queue it is answered at once. Shared by the
//! sharded producer's task and the work-pulling producer's.

use std::time::Duration;

use concord_core::delivery::QueueEvent;
use tokio::sync::oneshot;

use super::durable_queue::DurableQueue;
use super::error::DeliveryError;

/// A producer writes the confirmations noted by themselves only once its queue was not
/// written for this long ([`Recorder::write_confirmations`]); its task looks once a
/// second, so a confirmation is on disk within about two seconds when nothing else is
/// written.
pub(super) const WRITE_CONFIRMATIONS_IDLE: Duration = Duration::from_secs(1);

/// Where a `send` caller learns its message's number.
pub(super) type Accepted = oneshot::Sender<Result<u64, DeliveryError>>;

/// See the module docs.
pub(super) struct Recorder {
    queue: Option<DurableQueue>,
    /// Records of the messages taken, to write before their callers hear so.
    to_write: Vec<QueueEvent>,
    /// Those callers, with the number each is answered.
    accepts: Vec<(Accepted, u64)>,
}

impl Recorder {
    pub(super) fn new(queue: Option<DurableQueue>) -> Self {
        Recorder {
            queue,
            to_write: Vec::new(),
            accepts: Vec::new(),
        }
    }

    /// True with a durable queue.
    pub(super) fn is_durable(&self) -> bool {
        self.queue.is_some()
    }

    /// The queue, to note confirmations in.
    pub(super) fn queue_mut(&mut self) -> Option<&mut DurableQueue> {
        self.queue.as_mut()
    }

    /// A message was taken under `number`: with a queue, `record` is written before
    /// `accepted` hears; without one, `accepted` hears now.
    pub(super) fn taken(&mut self, record: Option<QueueEvent>, accepted: Accepted, number: u64) {
        match record.filter(|_| self.queue.is_some()) {
            Some(record) => {
                self.to_write.push(record);
                self.accepts.push((accepted, number));
            }
            None => {
                let _ = accepted.send(Ok(number));
            }
        }
    }

    /// Writes the records of the messages taken since the last call, then answers their
    /// callers.
    ///
    /// # Errors
    /// [`DeliveryError::Store`]: the producer must stop (see [`DurableQueue::write`]).
    pub(super) async fn record(&mut self) -> Result<(), DeliveryError> {
        let Some(q) = self.queue.as_mut() else {
            return Ok(());
        };
        if self.to_write.is_empty() {
            return Ok(());
        }
        q.write(std::mem::take(&mut self.to_write)).await?;
        for (tx, number) in self.accepts.drain(..) {
            let _ = tx.send(Ok(number));
        }
        Ok(())
    }

    /// Writes the confirmations noted, if any, unless the queue was written within
    /// `idle` (every write takes the confirmations noted: while messages are written,
    /// confirmations go with them, and a write of its own would only hold up the next).
    ///
    /// # Errors
    /// As [`Recorder::record`].
    pub(super) async fn write_confirmations(
        &mut self,
        idle: Duration,
    ) -> Result<(), DeliveryError> {
        match self
            .queue
            .as_mut()
            .filter(|q| q.has_confirmations() && q.idle_for() >= idle)
        {
            Some(q) => q.write(Vec::new()).await,
            None => Ok(()),
        }
    }

    /// The callers waiting for a write learn `e` instead (the producer stops).
    pub(super) fn refuse(&mut self, e: &DeliveryError) {
        self.to_write.clear();
        for (tx, _) in self.accepts.drain(..) {
            let _ = tx.send(Err(e.clone()));
        }
    }
}
