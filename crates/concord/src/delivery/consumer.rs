//! [`ReliableConsumer`]: a sharded entity with a consumer controller in front (Akka's
//! `ShardingConsumerController`). Messages of a [`super::ShardingProducer`] arrive as
//! [`ConsumerEnvelope::Sequenced`]; the controller hands each producer's messages to the
//! entity in order, each once, and the answer confirms it and grants the flow control
//! window. Other senders still reach the entity directly ([`ConsumerEnvelope::Direct`]).
//! When the entity's shard moves gracefully, what the controller knows moves with the
//! entity's own state, so nothing is delivered twice; after a crash it is gone, and a
//! message handled whose confirmation was lost comes again (at least once).

use std::sync::Arc;

use concord_core::delivery::{
    ConsumerController, ConsumerMessage, DeliverySettings, Incarnation, ProducerProgress,
    SequencedMessage, Verdict,
};
use serde::{Deserialize, Serialize};

use super::idempotency::{unframe, Answers};
use super::metrics;
use crate::sharding::entity::{decode, encode};
use crate::sharding::{Entity, EntityContext};
use crate::singleton::Wire;

/// A producer's message as it travels through sharding (the core's
/// [`SequencedMessage`], the payload as MessagePack bytes).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sequenced {
    /// The producer's id.
    pub producer_id: String,
    /// Its controller's incarnation.
    pub incarnation: Incarnation,
    /// The message's number.
    pub seq_nr: u64,
    /// The producer's confirmed number when it sent this.
    pub confirmed_seq_nr: u64,
    /// The entity's message, encoded.
    #[serde(with = "serde_bytes")]
    pub payload: Vec<u8>,
}

impl From<SequencedMessage> for Sequenced {
    fn from(m: SequencedMessage) -> Self {
        Sequenced {
            producer_id: m.producer_id,
            incarnation: m.incarnation,
            seq_nr: m.seq_nr,
            confirmed_seq_nr: m.confirmed_seq_nr,
            payload: m.payload,
        }
    }
}

impl From<Sequenced> for SequencedMessage {
    fn from(m: Sequenced) -> Self {
        SequencedMessage {
            producer_id: m.producer_id,
            incarnation: m.incarnation,
            seq_nr: m.seq_nr,
            confirmed_seq_nr: m.confirmed_seq_nr,
            payload: m.payload,
        }
    }
}

/// What a [`ReliableConsumer`] receives.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum ConsumerEnvelope<M> {
    /// A reliable producer's message.
    Sequenced(Sequenced),
    /// A message sent to the entity directly (`tell`/`ask` without reliable delivery).
    Direct(M),
}

/// What a [`ReliableConsumer`] answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConsumerReply<R> {
    /// The controller's answer to a sequenced message (confirmation and demand, a resend
    /// request, a stale notice); `None` for a direct message or a malformed one.
    pub control: Option<ConsumerMessage>,
    /// The entity's own answer, when it handled the message now (not for a duplicate).
    pub reply: Option<R>,
}

/// The state a [`ReliableConsumer`] hands over: the entity's and the controller's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConsumerState<S> {
    /// The entity's own (what its `hand_off` gave).
    pub entity: Option<S>,
    /// The highest number handled per producer.
    pub producers: Vec<ProducerProgress>,
    /// The answers to the last idempotency keys handled.
    #[serde(default)]
    pub answers: Answers,
}

/// A sharded entity that takes a reliable producer's messages: what a
/// [`super::ShardingProducer`] sends to. Implemented by [`ReliableConsumer`] and by the
/// event-sourced [`super::ReliableEventSourced`].
pub trait ConsumerEntity: Entity {
    /// The messages a producer sends it.
    type Payload: Wire;
    /// Its own answer to one.
    type Answer: Wire;
    /// The entity's message carrying a producer's.
    fn sequenced(message: Sequenced) -> Self::Message;
    /// The consumer controller's answer and the entity's own, out of its reply (`None`,
    /// `None` when it failed: the producer sends the message again).
    fn control(reply: Self::Reply) -> (Option<ConsumerMessage>, Option<Self::Answer>);
}

impl<E: Entity> ConsumerEntity for ReliableConsumer<E> {
    type Payload = E::Message;
    type Answer = E::Reply;

    fn sequenced(message: Sequenced) -> Self::Message {
        ConsumerEnvelope::Sequenced(message)
    }

    fn control(reply: Self::Reply) -> (Option<ConsumerMessage>, Option<Self::Answer>) {
        (reply.control, reply.reply)
    }
}

/// An entity `E` behind a consumer controller. Start it with
/// [`super::init_sharded_consumer`].
pub struct ReliableConsumer<E: Entity> {
    entity: E,
    controller: ConsumerController,
    answers: Answers,
    type_name: Arc<str>,
}

impl<E: Entity> ReliableConsumer<E> {
    /// `entity` behind a controller that resumes from `producers` (handed over).
    pub fn new(
        entity: E,
        settings: &DeliverySettings,
        producers: Vec<ProducerProgress>,
        type_name: Arc<str>,
    ) -> Self {
        ReliableConsumer {
            entity,
            controller: ConsumerController::restore(settings, producers),
            answers: Answers::default(),
            type_name,
        }
    }

    /// This consumer, knowing the answers to these idempotency keys (handed over).
    pub fn with_answers(mut self, answers: Answers) -> Self {
        self.answers = answers;
        self
    }

    /// The entity.
    pub fn entity(&self) -> &E {
        &self.entity
    }

    /// The controller.
    pub fn controller(&self) -> &ConsumerController {
        &self.controller
    }
}

impl<E: Entity> Entity for ReliableConsumer<E> {
    type Message = ConsumerEnvelope<E::Message>;
    type Reply = ConsumerReply<E::Reply>;
    type State = ConsumerState<E::State>;

    async fn handle(&mut self, ctx: &mut EntityContext, message: Self::Message) -> Self::Reply {
        let sequenced = match message {
            ConsumerEnvelope::Direct(m) => {
                let reply = self.entity.handle(ctx, m).await;
                return ConsumerReply {
                    control: None,
                    reply: Some(reply),
                };
            }
            ConsumerEnvelope::Sequenced(s) => SequencedMessage::from(s),
        };
        let node = ctx.node().to_string();
        match self.controller.receive(&sequenced) {
            Verdict::Deliver => {
                let (key, body) = unframe(&sequenced.payload);
                if let Some(answer) = key.and_then(|k| self.answers.get(k)) {
                    // Asked before under this key: answered as then, not handled again.
                    metrics::consumer_dropped(&node, &self.type_name, "repeated-key");
                    return ConsumerReply {
                        control: Some(self.controller.delivered(&sequenced)),
                        reply: decode::<E::Reply>(answer).ok(),
                    };
                }
                let reply = match decode::<E::Message>(body) {
                    Ok(m) => {
                        let reply = self.entity.handle(ctx, m).await;
                        if let (Some(k), Ok(answer)) = (key, encode(&reply)) {
                            self.answers.insert(k, answer);
                        }
                        Some(reply)
                    }
                    Err(e) => {
                        // Sending it again cannot help: it is confirmed, skipped and named.
                        metrics::consumer_dropped(&node, &self.type_name, "undecodable");
                        tracing::warn!(
                            entity = %ctx.entity_id(),
                            producer = %sequenced.producer_id,
                            seq_nr = sequenced.seq_nr,
                            error = %e,
                            "a reliably delivered message does not decode; it is confirmed and skipped"
                        );
                        None
                    }
                };
                metrics::consumer_delivered(&node, &self.type_name);
                ConsumerReply {
                    control: Some(self.controller.delivered(&sequenced)),
                    reply,
                }
            }
            Verdict::Drop(answer) => {
                let why = match answer {
                    ConsumerMessage::Request { .. } => "duplicate",
                    ConsumerMessage::Resend { .. } => "gap",
                    ConsumerMessage::Stale { .. } => "stale",
                };
                metrics::consumer_dropped(&node, &self.type_name, why);
                ConsumerReply {
                    control: Some(answer),
                    reply: None,
                }
            }
            Verdict::Invalid => {
                metrics::consumer_dropped(&node, &self.type_name, "invalid");
                ConsumerReply {
                    control: None,
                    reply: None,
                }
            }
        }
    }

    fn hand_off(&mut self) -> Option<Self::State> {
        Some(ConsumerState {
            entity: self.entity.hand_off(),
            producers: self.controller.state(),
            answers: std::mem::take(&mut self.answers),
        })
    }
}

/// The factory of `ReliableConsumer<E>` from `E`'s.
#[cfg(feature = "runtime")]
pub(super) fn consumer_factory<E, F>(
    factory: F,
    settings: DeliverySettings,
    type_name: Arc<str>,
) -> impl Fn(&str, Option<ConsumerState<E::State>>) -> ReliableConsumer<E> + Send + Sync + 'static
where
    E: Entity,
    F: Fn(&str, Option<E::State>) -> E + Send + Sync + 'static,
{
    move |id: &str, state: Option<ConsumerState<E::State>>| {
        let (entity_state, producers, answers) = match state {
            Some(s) => (s.entity, s.producers, s.answers),
            None => (None, Vec::new(), Answers::default()),
        };
        ReliableConsumer::new(
            factory(id, entity_state),
            &settings,
            producers,
            type_name.clone(),
        )
        .with_answers(answers)
    }
}
