//! [`ReliableEventSourced`]: an event-sourced entity as a reliable consumer, **effectively
//! once**. The highest number handled per producer is part of the entity's own state, and
//! is persisted in the same atomic write as the events the message caused
//! ([`ReliableEvent::Delivered`]). After a crash the entity recovers it with its state, so
//! a message sent again — handled before the crash, its confirmation lost — is recognised
//! and not applied twice (Akka's advice for its `ConsumerController`: keep the sequence
//! numbers with the entity's events).

use std::collections::BTreeMap;
use std::sync::Arc;

use concord_core::delivery::{
    ConsumerController, ConsumerMessage, DeliverySettings, Incarnation, ProducerProgress,
    SequencedMessage, Verdict,
};
use concord_core::persistence::RetentionCriteria;
use serde::{Deserialize, Serialize};

use super::consumer::{ConsumerEntity, ConsumerEnvelope, ConsumerReply, Sequenced};
use super::idempotency::{unframe, Answers};
use super::metrics;
use crate::persistence::ReplyWith;
use crate::persistence::{Effect, EventSourced, EventSourcedEntity, PersistenceError};
use crate::sharding::entity::{decode, encode};
use crate::sharding::EntityContext;

/// An event of a [`ReliableEventSourced`] entity.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ReliableEvent<E> {
    /// The wrapped entity's own event.
    Event(E),
    /// A producer's message was handled (persisted with the events it caused).
    Delivered(ProducerProgress),
    /// A message asked under an idempotency key was handled and answered this (encoded),
    /// persisted with the events it caused.
    Answered {
        /// The key.
        key: String,
        /// The answer, encoded.
        #[serde(with = "serde_bytes")]
        answer: Vec<u8>,
    },
}

/// The state of a [`ReliableEventSourced`] entity: the wrapped entity's, and the highest
/// number handled per producer (at most `max-producers-per-consumer`'s default, 1000; the
/// least recently delivered is forgotten beyond it).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ReliableState<S> {
    /// The wrapped entity's state.
    pub state: S,
    /// Producer id → (incarnation, highest number handled, when last delivered in
    /// deliveries counted).
    pub producers: BTreeMap<String, (Incarnation, u64, u64)>,
    /// Deliveries counted (orders `producers` by recency).
    pub deliveries: u64,
    /// The answers to the last idempotency keys handled.
    #[serde(default)]
    pub answers: Answers,
}

impl<S> ReliableState<S> {
    fn progress(&self) -> Vec<ProducerProgress> {
        self.producers
            .iter()
            .map(|(id, (incarnation, seq_nr, _))| ProducerProgress {
                producer_id: id.clone(),
                incarnation: *incarnation,
                delivered_seq_nr: *seq_nr,
            })
            .collect()
    }
}

fn inner_state<S>(s: &ReliableState<S>) -> &S {
    &s.state
}

/// An event-sourced behaviour `B` behind a consumer controller (see the module docs). Run
/// it with [`super::init_event_sourced_consumer`].
pub struct ReliableEventSourced<B: EventSourced> {
    behavior: B,
    settings: DeliverySettings,
    /// Built from the state on the first producer's message after recovery, then kept in
    /// step with it.
    controller: Option<ConsumerController>,
    type_name: Arc<str>,
}

impl<B: EventSourced> ReliableEventSourced<B> {
    /// `behavior` as a reliable consumer.
    pub fn new(behavior: B, settings: DeliverySettings, type_name: Arc<str>) -> Self {
        ReliableEventSourced {
            behavior,
            settings,
            controller: None,
            type_name,
        }
    }
}

type Reply<B> = ConsumerReply<<B as EventSourced>::Reply>;

impl<B: EventSourced> EventSourced for ReliableEventSourced<B> {
    type Command = ConsumerEnvelope<B::Command>;
    type Event = ReliableEvent<B::Event>;
    type State = ReliableState<B::State>;
    type Reply = Reply<B>;

    async fn handle_command(
        &mut self,
        ctx: &mut EntityContext,
        state: &Self::State,
        command: Self::Command,
    ) -> Effect<Self> {
        let sequenced = match command {
            ConsumerEnvelope::Direct(c) => {
                let effect = self.behavior.handle_command(ctx, &state.state, c).await;
                return effect.map(ReliableEvent::Event, Vec::new(), inner_state, |r| {
                    ConsumerReply {
                        control: None,
                        reply: Some(r),
                        replies: Vec::new(),
                    }
                });
            }
            ConsumerEnvelope::Sequenced(s) => SequencedMessage::from(s),
            // Never sent to it (it does not batch): malformed, no answer.
            ConsumerEnvelope::Batch(_) => {
                metrics::consumer_dropped(&ctx.node().to_string(), &self.type_name, "invalid");
                return Effect::reply(ConsumerReply {
                    control: None,
                    reply: None,
                    replies: Vec::new(),
                });
            }
        };
        let node = ctx.node().to_string();
        let settings = &self.settings;
        let controller = self
            .controller
            .get_or_insert_with(|| ConsumerController::restore(settings, state.progress()));
        match controller.receive(&sequenced) {
            Verdict::Deliver => {
                let control = controller.delivered(&sequenced);
                let delivered = ReliableEvent::Delivered(ProducerProgress {
                    producer_id: sequenced.producer_id.clone(),
                    incarnation: sequenced.incarnation,
                    delivered_seq_nr: sequenced.seq_nr,
                });
                let (key, body) = unframe(&sequenced.payload);
                if let Some(answer) = key.and_then(|k| state.answers.get(k)) {
                    // Asked before under this key: answered as then, not handled again.
                    metrics::consumer_dropped(&node, &self.type_name, "repeated-key");
                    return Effect::persist(delivered).reply(ConsumerReply {
                        control: Some(control),
                        reply: decode::<B::Reply>(answer).ok(),
                        replies: Vec::new(),
                    });
                }
                metrics::consumer_delivered(&node, &self.type_name, 1);
                match decode::<B::Command>(body) {
                    Ok(c) => {
                        let mut effect = self.behavior.handle_command(ctx, &state.state, c).await;
                        let mut extra = vec![delivered];
                        if let Some(key) = key {
                            // The answer is stored with the events, so it is known before
                            // they are: computed now from the state they lead to.
                            let (e, reply) = answer_now::<B>(&state.state, effect);
                            effect = e;
                            // An answer too large to keep is not persisted either.
                            if let Some(answer) = reply.filter(|a| {
                                key.len() + a.len() <= super::idempotency::MAX_ANSWER_BYTES
                            }) {
                                extra.push(ReliableEvent::Answered {
                                    key: key.to_string(),
                                    answer,
                                });
                            }
                        }
                        effect.map(ReliableEvent::Event, extra, inner_state, move |r| {
                            ConsumerReply {
                                control: Some(control),
                                reply: Some(r),
                                replies: Vec::new(),
                            }
                        })
                    }
                    Err(e) => {
                        metrics::consumer_dropped(&node, &self.type_name, "undecodable");
                        tracing::warn!(
                            entity = %ctx.entity_id(),
                            producer = %sequenced.producer_id,
                            seq_nr = sequenced.seq_nr,
                            error = %e,
                            "a reliably delivered command does not decode; it is confirmed and skipped"
                        );
                        Effect::persist(delivered).reply(ConsumerReply {
                            control: Some(control),
                            reply: None,
                            replies: Vec::new(),
                        })
                    }
                }
            }
            Verdict::Drop(answer) => {
                let why = match answer {
                    ConsumerMessage::Request { .. } => "duplicate",
                    ConsumerMessage::Resend { .. } => "gap",
                    ConsumerMessage::Stale { .. } => "stale",
                };
                metrics::consumer_dropped(&node, &self.type_name, why);
                Effect::reply(ConsumerReply {
                    control: Some(answer),
                    reply: None,
                    replies: Vec::new(),
                })
            }
            Verdict::Invalid => {
                metrics::consumer_dropped(&node, &self.type_name, "invalid");
                Effect::reply(ConsumerReply {
                    control: None,
                    reply: None,
                    replies: Vec::new(),
                })
            }
        }
    }

    fn apply_event(state: &mut Self::State, event: &Self::Event) {
        match event {
            ReliableEvent::Event(e) => B::apply_event(&mut state.state, e),
            ReliableEvent::Answered { key, answer } => {
                // One larger than the answers' bound is not kept (see `Answers::insert`).
                let _ = state.answers.insert(key, answer.clone());
            }
            ReliableEvent::Delivered(p) => {
                state.deliveries += 1;
                state.producers.insert(
                    p.producer_id.clone(),
                    (p.incarnation, p.delivered_seq_nr, state.deliveries),
                );
                let max = DeliverySettings::default().max_producers_per_consumer as usize;
                if state.producers.len() > max {
                    if let Some(oldest) = state
                        .producers
                        .iter()
                        .min_by_key(|(_, (_, _, at))| *at)
                        .map(|(id, _)| id.clone())
                    {
                        state.producers.remove(&oldest);
                    }
                }
            }
        }
    }

    fn retention(&self) -> Option<RetentionCriteria> {
        self.behavior.retention()
    }
}

/// The answer `effect` gives, computed before its events are stored: a value as it is; a
/// function of the state applied to a copy of `state` (through its encoding: states need
/// not be `Clone`) with the effect's events folded in — what it will give after they are
/// stored, `apply_event` being deterministic. The effect then answers that value; it is
/// returned encoded. `None` (and the effect unchanged) if the state does not copy or the
/// answer does not encode.
fn answer_now<B: EventSourced>(
    state: &B::State,
    effect: Effect<B>,
) -> (Effect<B>, Option<Vec<u8>>) {
    let Effect {
        events,
        reply,
        stop,
    } = effect;
    let (reply, value) = match reply {
        ReplyWith::Value(v) => {
            let answer = encode(&v).ok();
            (ReplyWith::Value(v), answer)
        }
        ReplyWith::FromState(f) => {
            match encode(state).and_then(|bytes| decode::<B::State>(&bytes)) {
                Ok(mut after) => {
                    for e in &events {
                        B::apply_event(&mut after, e);
                    }
                    let v = f(&after);
                    let answer = encode(&v).ok();
                    (ReplyWith::Value(v), answer)
                }
                Err(_) => (ReplyWith::FromState(f), None),
            }
        }
    };
    (
        Effect {
            events,
            reply,
            stop,
        },
        value,
    )
}

impl<B: EventSourced> ConsumerEntity for EventSourcedEntity<ReliableEventSourced<B>> {
    type Payload = B::Command;
    type Answer = B::Reply;

    fn sequenced(message: Sequenced) -> Self::Message {
        ConsumerEnvelope::Sequenced(message)
    }

    fn control(
        reply: Result<Reply<B>, PersistenceError>,
    ) -> (Option<ConsumerMessage>, Option<Self::Answer>) {
        match reply {
            Ok(r) => (r.control, r.reply),
            // Not stored (or not known to be): not confirmed; sent again, and recognised
            // if it was stored after all.
            Err(_) => (None, None),
        }
    }
}
