//! [`DurableQueue`]: a producer's durable queue in the persistence store (Akka's
//! `EventSourcedProducerQueue`): the log `delivery-producer|<producer id>` of the core's
//! [`QueueEvent`]s, written through the node's journal (the built-in replicated store or
//! PostgreSQL), so a producer that restarts sends again what was never confirmed.
//!
//! Every message is recorded before its `send` returns and before it leaves; confirmations
//! are recorded in batches (a confirmation lost with a crash only sends a message again,
//! which its consumer drops). The log's events up to the oldest unconfirmed message are
//! deleted as confirmations come in. Appends are conditional on the sequence number, so
//! two producers running with one id cannot interleave: the second's write fails and it
//! stops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use concord_core::delivery::{DurableQueueState, Incarnation, QueueEvent};
use concord_core::persistence::{AtomicWrite, PersistenceId};

use super::error::DeliveryError;
use crate::persistence::{Journal, Stores};
use crate::sharding::entity::{decode, encode};

/// The entity type of producer queues' persistence ids.
pub const QUEUE_ENTITY_TYPE: &str = "delivery-producer";
/// Events read per replay query.
const PAGE: usize = 1_000;
/// A store operation must finish within this.
const STORE_TIMEOUT: Duration = Duration::from_secs(30);
/// Delete once this many events are no longer needed.
const DELETE_EVERY: u64 = 256;

/// A producer's queue log.
pub(super) struct DurableQueue {
    journal: Arc<dyn Journal>,
    pid: PersistenceId,
    highest: u64,
    deleted_to: u64,
    state: DurableQueueState,
    /// Confirmations not written yet: the highest per (consumer, incarnation).
    confirmations: BTreeMap<(String, Incarnation), u64>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn store_error(what: &str, e: impl std::fmt::Display) -> DeliveryError {
    DeliveryError::Store(format!("{what}: {e}"))
}

impl DurableQueue {
    /// Reads the queue of `producer_id` whole.
    ///
    /// # Errors
    /// [`DeliveryError::Store`]: the id makes no persistence id, the store failed or timed
    /// out, or an event does not decode.
    pub(super) async fn recover(stores: &Stores, producer_id: &str) -> Result<Self, DeliveryError> {
        let pid = PersistenceId::new(QUEUE_ENTITY_TYPE, producer_id)
            .map_err(|e| store_error("producer id", e))?;
        let journal = stores.journal.clone();
        let read = async {
            let (mut batch, highest) = journal.replay_with_highest(&pid, 1, PAGE).await?;
            let mut state = DurableQueueState::new();
            let mut first = None;
            let mut next = 0u64;
            loop {
                let before = next;
                for event in batch.into_iter().take_while(|e| e.seq_nr <= highest) {
                    // Events before the first were deleted (not needed); after it, none may
                    // be missing.
                    if first.is_some() && event.seq_nr != next {
                        return Err(crate::persistence::PersistenceError::RecoveryFailed {
                            persistence_id: pid.to_string(),
                            seq_nr: next,
                            reason: format!("event {next} is missing (found {})", event.seq_nr),
                        });
                    }
                    first.get_or_insert(event.seq_nr);
                    let e: QueueEvent = decode(&event.payload).map_err(|e| {
                        crate::persistence::PersistenceError::RecoveryFailed {
                            persistence_id: pid.to_string(),
                            seq_nr: event.seq_nr,
                            reason: format!("the event does not decode: {e}"),
                        }
                    })?;
                    state.apply(event.seq_nr, e);
                    next = event.seq_nr + 1;
                }
                if next == 0 || next > highest || next == before {
                    break;
                }
                batch = journal.replay(&pid, next, PAGE).await?;
            }
            Ok((
                state,
                highest,
                first.map_or(highest, |f| f.saturating_sub(1)),
            ))
        };
        let (state, highest, deleted_to) = tokio::time::timeout(STORE_TIMEOUT, read)
            .await
            .map_err(|_| store_error("reading the queue", "timed out"))?
            .map_err(|e| store_error("reading the queue", e))?;
        if state.skipped > 0 {
            tracing::warn!(producer = %producer_id, skipped = state.skipped, "durable queue events out of order were skipped");
        }
        Ok(DurableQueue {
            journal,
            pid,
            highest,
            deleted_to,
            state,
            confirmations: BTreeMap::new(),
        })
    }

    /// What the queue holds.
    pub(super) fn state(&self) -> &DurableQueueState {
        &self.state
    }

    /// Notes a confirmation, written with the next write or [`DurableQueue::flush`].
    pub(super) fn confirmed(&mut self, entity_id: String, incarnation: Incarnation, seq_nr: u64) {
        let c = self
            .confirmations
            .entry((entity_id, incarnation))
            .or_default();
        *c = (*c).max(seq_nr);
    }

    /// True if confirmations wait to be written.
    pub(super) fn has_confirmations(&self) -> bool {
        !self.confirmations.is_empty()
    }

    /// Writes `sent` (and the confirmations noted) after the log's end, in atomic writes
    /// of at most 1000 events; then deletes what is no longer needed.
    ///
    /// # Errors
    /// [`DeliveryError::Store`]: the write failed (another producer with this id wrote
    /// first, the store is unavailable or timed out). The producer must stop: what it holds
    /// may not be on disk.
    pub(super) async fn write(&mut self, sent: Vec<QueueEvent>) -> Result<(), DeliveryError> {
        let confirmations = std::mem::take(&mut self.confirmations);
        let mut events: Vec<QueueEvent> = confirmations
            .into_iter()
            .map(|((entity_id, incarnation), seq_nr)| QueueEvent::Confirmed {
                entity_id,
                incarnation,
                seq_nr,
            })
            .collect();
        events.extend(sent);
        for chunk in events.chunks(AtomicWrite::MAX_EVENTS) {
            let payloads = chunk
                .iter()
                .map(|e| encode(e).map_err(|e| store_error("encoding", e)))
                .collect::<Result<Vec<_>, _>>()?;
            let first = self.highest + 1;
            let write = AtomicWrite::new(self.pid.clone(), first, payloads, now_ms())
                .map_err(|e| store_error("writing", e))?;
            tokio::time::timeout(STORE_TIMEOUT, self.journal.append(write))
                .await
                .map_err(|_| store_error("writing", "timed out"))?
                .map_err(|e| store_error("writing", e))?;
            for (i, e) in chunk.iter().enumerate() {
                self.state.apply(first + i as u64, e.clone());
            }
            self.highest += chunk.len() as u64;
        }
        self.compact().await;
        Ok(())
    }

    /// Deletes the events no longer needed, once enough are (a failure is logged: the next
    /// call tries again).
    async fn compact(&mut self) {
        let to = self.state.deletable_up_to(self.highest);
        if to < self.deleted_to + DELETE_EVERY {
            return;
        }
        match tokio::time::timeout(STORE_TIMEOUT, self.journal.delete_to(&self.pid, to)).await {
            Ok(Ok(())) => self.deleted_to = to,
            Ok(Err(e)) => {
                tracing::debug!(queue = %self.pid, error = %e, "durable queue events not deleted yet")
            }
            Err(_) => tracing::debug!(queue = %self.pid, "deleting durable queue events timed out"),
        }
    }
}
