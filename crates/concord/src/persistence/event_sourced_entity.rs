//! [`EventSourcedEntity`]: an [`EventSourced`] behaviour run as a sharded [`Entity`] —
//! recovery before the first command (snapshot, then the events after it, under a
//! recovery permit and deadline), conditional appends, snapshots, and stopping on a
//! failure (Akka's `RequestingRecoveryPermit` → `ReplayingSnapshot` → `ReplayingEvents` →
//! `Running`).

use std::sync::Arc;
use std::time::Instant;

use concord_core::persistence::{AtomicWrite, PersistenceId, ReplayCheck, RetentionCriteria};
use tracing::{info, warn, Instrument};

use super::event_sourced::{Effect, EventSourced, ReplyWith};
use super::handle::{now_ms, Persistence, Running};
use super::incarnation::{persistence_id, running, stops, write_within};
use super::store::Snapshot;
use super::{metrics, PersistenceError};
use crate::sharding::entity::{decode, encode};
use crate::sharding::{Entity, EntityContext};

enum Phase {
    /// Not recovered yet: the next command recovers first.
    Recovering,
    Running,
    /// A failure stopped it: commands still in its mailbox get [`PersistenceError::Stopped`].
    Failed,
}

/// An [`EventSourced`] behaviour as a sharded entity; built by
/// [`Persistence::event_sourced`] or [`Persistence::init_event_sourced`]. It hands nothing
/// over when its shard moves: its next incarnation recovers from the journal.
pub struct EventSourcedEntity<B: EventSourced> {
    behavior: B,
    entity_type: Arc<str>,
    persistence: Persistence,
    pid: Option<PersistenceId>,
    state: B::State,
    seq_nr: u64,
    phase: Phase,
}

impl<B: EventSourced> EventSourcedEntity<B> {
    pub(crate) fn new(behavior: B, entity_type: Arc<str>, persistence: Persistence) -> Self {
        EventSourcedEntity {
            behavior,
            entity_type,
            persistence,
            pid: None,
            state: B::State::default(),
            seq_nr: 0,
            phase: Phase::Recovering,
        }
    }

    /// The state (after every stored event).
    pub fn state(&self) -> &B::State {
        &self.state
    }

    /// The sequence number of the last stored event (0: none).
    pub fn seq_nr(&self) -> u64 {
        self.seq_nr
    }

    fn retention(&self, running: &Running) -> RetentionCriteria {
        self.behavior
            .retention()
            .unwrap_or(running.settings.retention)
    }

    /// Recovers state and sequence number: the newest snapshot, then every event after it,
    /// checked to be one gap-free history.
    async fn recover(
        &mut self,
        node: &str,
        pid: &PersistenceId,
        running: &Running,
    ) -> Result<(), PersistenceError> {
        let started = Instant::now();
        let deadline = running.settings.recovery_timeout;
        let result = tokio::time::timeout(deadline, async {
            let _permit = running.recovery_permit(node).await;
            let failed = |seq_nr: u64, reason: String| PersistenceError::RecoveryFailed {
                persistence_id: pid.to_string(),
                seq_nr,
                reason,
            };
            // A snapshot that does not decode (a state type changed incompatibly) is
            // passed over: the events from 1 are replayed instead, if they all still exist;
            // if not, recovery fails naming the snapshot.
            let mut bad_snapshot = None;
            let journal = &running.stores.journal;
            let page = running.settings.replay_batch_size;
            // One query for both where the journal keeps the snapshots.
            let start = if running.stores.snapshots_in_journal {
                journal.replay_from_snapshot(pid, page).await?
            } else {
                None
            };
            let (snapshot, first) = match start {
                Some(s) => (s.snapshot, Some((s.events, s.highest))),
                None => (running.stores.snapshots.load_latest(pid).await?, None),
            };
            let (mut state, from) = match snapshot {
                Some(s) => match decode::<B::State>(&s.payload) {
                    Ok(state) => (state, s.seq_nr.saturating_add(1)),
                    Err(e) => {
                        let e = failed(s.seq_nr, format!("the snapshot does not decode: {e}"));
                        warn!(%node, error = %e, "replaying every event instead");
                        bad_snapshot = Some(e);
                        (B::State::default(), 1)
                    }
                },
                None => (B::State::default(), 1),
            };
            let missing = |e: concord_core::persistence::ReplayError| {
                bad_snapshot
                    .clone()
                    .unwrap_or_else(|| failed(e.expected, format!("events are missing: {e}")))
            };
            let (mut batch, highest) = match first {
                Some(first) => first,
                None => journal.replay_with_highest(pid, from, page).await?,
            };
            // The first page starts after the snapshot, and may not reach it yet.
            if batch.first().is_none_or(|e| e.seq_nr != from) && from <= highest {
                batch = journal.replay(pid, from, page).await?;
            }
            let mut check = ReplayCheck::new(pid.clone(), from);
            let mut next = from;
            let mut replayed = 0u64;
            while !batch.is_empty() {
                let before = next;
                // A log may hold a write after the highest this recovery chose (one that was
                // never chosen, or another writer's since): the state is the fold up to it.
                for event in batch.into_iter().take_while(|e| e.seq_nr <= highest) {
                    check.next(&event).map_err(|e| match &bad_snapshot {
                        Some(b) => b.clone(),
                        None => failed(e.found, e.to_string()),
                    })?;
                    let e = decode::<B::Event>(&event.payload).map_err(|e| {
                        failed(event.seq_nr, format!("the event does not decode: {e}"))
                    })?;
                    B::apply_event(&mut state, &e);
                    next = event.seq_nr.saturating_add(1);
                    replayed += 1;
                }
                batch = if next <= highest && next > before {
                    journal.replay(pid, next, page).await?
                } else {
                    Vec::new()
                };
            }
            let seq_nr = check.finish(highest).map_err(missing)?;
            Ok::<_, PersistenceError>((state, seq_nr, replayed))
        })
        .await
        .map_err(|_| PersistenceError::RecoveryTimeout {
            persistence_id: pid.to_string(),
            timeout_ms: deadline.as_millis() as u64,
        })??;
        let (state, seq_nr, replayed) = result;
        self.state = state;
        self.seq_nr = seq_nr;
        metrics::recovered(node, &self.entity_type, started.elapsed(), replayed);
        Ok(())
    }

    /// Stores `events` as one atomic write after the current sequence number, then applies
    /// them.
    async fn persist(
        &mut self,
        node: &str,
        pid: &PersistenceId,
        running: &Running,
        events: Vec<B::Event>,
    ) -> Result<(), PersistenceError> {
        let rejected = |reason: String| PersistenceError::Rejected {
            persistence_id: pid.to_string(),
            reason,
        };
        let payloads = events
            .iter()
            .map(|e| encode(e).map_err(|e| rejected(format!("an event does not encode: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let first = self
            .seq_nr
            .checked_add(1)
            .ok_or_else(|| rejected("the sequence numbers are exhausted".into()))?;
        let write = AtomicWrite::new(pid.clone(), first, payloads, now_ms())
            .map_err(|e| rejected(e.to_string()))?;
        let last = write.last_seq_nr();
        let n = write.len();
        let append = running.stores.journal.append(write);
        match crate::host::trace::current() {
            None => write_within(running, pid, append).await?,
            // Traced: the write in a span of its own (the replicated journal's requests to
            // the other replicas are its children).
            Some(_) => {
                let span = tracing::info_span!(
                    "concord.persistence.write",
                    otel.name = "persistence write",
                    persistence_id = %pid,
                    events = n,
                    node,
                );
                write_within(running, pid, append).instrument(span).await?
            }
        }
        for e in &events {
            B::apply_event(&mut self.state, e);
        }
        let previous = self.seq_nr;
        self.seq_nr = last;
        metrics::persisted(node, &self.entity_type, n);
        let retention = self.retention(running);
        if retention.snapshot_due(previous, last) {
            let encoded = encode(&self.state);
            let entity_type = self.entity_type.clone();
            save_snapshot(node, &entity_type, pid, running, retention, last, encoded).await;
        }
        Ok(())
    }

    /// After `error`: stops (unless it was a rejection), refusing what is still queued.
    fn fail(&mut self, ctx: &mut EntityContext, node: &str, error: &PersistenceError) {
        if stops(ctx, node, &self.entity_type, error) {
            self.phase = Phase::Failed;
        }
    }

    async fn handle_command(
        &mut self,
        ctx: &mut EntityContext,
        command: B::Command,
    ) -> Result<B::Reply, PersistenceError> {
        let node = ctx.node().to_string();
        let pid = persistence_id(&mut self.pid, &self.entity_type, ctx)?;
        if let Phase::Failed = self.phase {
            return Err(PersistenceError::Stopped {
                persistence_id: pid.to_string(),
            });
        }
        let running = match running(&self.persistence).await {
            Ok(r) => r,
            Err(e) => {
                self.fail(ctx, &node, &e);
                return Err(e);
            }
        };
        if let Phase::Recovering = self.phase {
            if let Err(e) = self.recover(&node, &pid, &running).await {
                self.fail(ctx, &node, &e);
                return Err(e);
            }
            self.phase = Phase::Running;
            info!(%node, persistence_id = %pid, seq_nr = self.seq_nr, "recovered");
        }
        let Effect {
            events,
            reply,
            stop,
        } = self
            .behavior
            .handle_command(ctx, &self.state, command)
            .await;
        if !events.is_empty() {
            if let Err(e) = self.persist(&node, &pid, &running, events).await {
                self.fail(ctx, &node, &e);
                return Err(e);
            }
        }
        if stop {
            ctx.passivate();
        }
        Ok(match reply {
            ReplyWith::Value(r) => r,
            ReplyWith::FromState(f) => f(&self.state),
        })
    }
}

impl<B: EventSourced> Entity for EventSourcedEntity<B> {
    type Message = B::Command;
    type Reply = Result<B::Reply, PersistenceError>;
    type State = ();

    async fn handle(
        &mut self,
        ctx: &mut EntityContext,
        message: B::Command,
    ) -> Result<B::Reply, PersistenceError> {
        self.handle_command(ctx, message).await
    }
}

/// Saves snapshot `encoded` of `pid` at `seq_nr`, then deletes what `retention` allows.
async fn save_snapshot(
    node: &str,
    entity_type: &str,
    pid: &PersistenceId,
    running: &Running,
    retention: RetentionCriteria,
    seq_nr: u64,
    encoded: Result<Vec<u8>, String>,
) {
    let saved = async {
        let payload = encoded.map_err(|e| PersistenceError::Rejected {
            persistence_id: pid.to_string(),
            reason: format!("the state does not encode: {e}"),
        })?;
        let snapshot = Snapshot {
            seq_nr,
            timestamp_ms: now_ms(),
            payload,
        };
        running.stores.snapshots.save(pid, snapshot).await?;
        if let Some(bound) = retention.delete_up_to(seq_nr) {
            running.stores.snapshots.delete_to(pid, bound).await?;
            if retention.delete_events {
                running.stores.journal.delete_to(pid, bound).await?;
            }
        }
        Ok::<_, PersistenceError>(())
    };
    match tokio::time::timeout(running.settings.write_timeout, saved).await {
        Ok(Ok(())) => metrics::snapshot(node, entity_type, true),
        Ok(Err(e)) => {
            metrics::snapshot(node, entity_type, false);
            warn!(%node, persistence_id = %pid, seq_nr, error = %e, "snapshot failed");
        }
        Err(_) => {
            metrics::snapshot(node, entity_type, false);
            warn!(%node, persistence_id = %pid, seq_nr, "snapshot timed out");
        }
    }
}
