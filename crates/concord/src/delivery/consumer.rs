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
    /// Several consecutive messages of one producer, in order (one ask for all: what a
    /// window granted at once goes out together).
    Batch(Vec<Sequenced>),
}

/// What a [`ReliableConsumer`] answers.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConsumerReply<R> {
    /// The controller's answer to a sequenced message (confirmation and demand, a resend
    /// request, a stale notice); `None` for a direct message or a malformed one. For a
    /// batch, the answer after its last message (or the resend request a gap in it asked).
    pub control: Option<ConsumerMessage>,
    /// The entity's own answer, when it handled the message now (not for a duplicate).
    pub reply: Option<R>,
    /// For a batch: the entity's answer to each message it handled now, by number.
    #[serde(default = "Vec::new")]
    pub replies: Vec<(u64, R)>,
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

    /// True if it takes a batch of one producer's consecutive messages in one message
    /// ([`ConsumerEntity::batch`]).
    const BATCHES: bool = false;

    /// The entity's message carrying `messages` (consecutive, one producer's, in order);
    /// only called when [`ConsumerEntity::BATCHES`].
    fn batch(messages: Vec<Sequenced>) -> Self::Message {
        // Not batching: the first alone (never called).
        Self::sequenced(messages.into_iter().next().expect("a batch is never empty"))
    }

    /// The consumer controller's answer to a batch and the entity's answer per message
    /// handled, by number.
    fn batch_control(reply: Self::Reply) -> (Option<ConsumerMessage>, Vec<(u64, Self::Answer)>) {
        (Self::control(reply).0, Vec::new())
    }
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

    const BATCHES: bool = true;

    fn batch(messages: Vec<Sequenced>) -> Self::Message {
        ConsumerEnvelope::Batch(messages)
    }

    fn batch_control(reply: Self::Reply) -> (Option<ConsumerMessage>, Vec<(u64, Self::Answer)>) {
        (reply.control, reply.replies)
    }
}

/// An entity `E` behind a consumer controller. Start it with
/// [`super::init_sharded_consumer`].
pub struct ReliableConsumer<E: Entity> {
    entity: E,
    controller: ConsumerController,
    answers: Answers,
    type_name: Arc<str>,
    /// Messages handed to the entity and not counted in the metrics yet.
    delivered: u64,
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
            delivered: 0,
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

impl<E: Entity> ReliableConsumer<E> {
    /// Counts the messages handed to the entity since the last call (once per message the
    /// consumer received: a batch's are counted together).
    fn count_delivered(&mut self, ctx: &EntityContext) {
        if self.delivered > 0 {
            metrics::consumer_delivered(&ctx.node().to_string(), &self.type_name, self.delivered);
            self.delivered = 0;
        }
    }

    /// One producer's message through the controller (and to the entity if it is the
    /// next): the controller's answer and the entity's.
    async fn one(
        &mut self,
        ctx: &mut EntityContext,
        sequenced: SequencedMessage,
    ) -> (Option<ConsumerMessage>, Option<E::Reply>) {
        match self.controller.receive(&sequenced) {
            Verdict::Deliver => {
                let (key, body) = unframe(&sequenced.payload);
                if let Some(answer) = key.and_then(|k| self.answers.get(k)) {
                    // Asked before under this key: answered as then, not handled again.
                    metrics::consumer_dropped(
                        &ctx.node().to_string(),
                        &self.type_name,
                        "repeated-key",
                    );
                    return (
                        Some(self.controller.delivered(&sequenced)),
                        decode::<E::Reply>(answer).ok(),
                    );
                }
                let reply = match decode::<E::Message>(body) {
                    Ok(m) => {
                        let reply = self.entity.handle(ctx, m).await;
                        if let (Some(k), Ok(answer)) = (key, encode(&reply)) {
                            // One larger than the answers' bound is not kept.
                            let _ = self.answers.insert(k, answer);
                        }
                        Some(reply)
                    }
                    Err(e) => {
                        // Sending it again cannot help: it is confirmed, skipped and named.
                        metrics::consumer_dropped(
                            &ctx.node().to_string(),
                            &self.type_name,
                            "undecodable",
                        );
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
                // Counted once per message the consumer received (`handle`).
                self.delivered += 1;
                (Some(self.controller.delivered(&sequenced)), reply)
            }
            Verdict::Drop(answer) => {
                let why = match answer {
                    ConsumerMessage::Request { .. } => "duplicate",
                    ConsumerMessage::Resend { .. } => "gap",
                    ConsumerMessage::Stale { .. } => "stale",
                };
                metrics::consumer_dropped(&ctx.node().to_string(), &self.type_name, why);
                (Some(answer), None)
            }
            Verdict::Invalid => {
                metrics::consumer_dropped(&ctx.node().to_string(), &self.type_name, "invalid");
                (None, None)
            }
        }
    }
}

impl<E: Entity> Entity for ReliableConsumer<E> {
    type Message = ConsumerEnvelope<E::Message>;
    type Reply = ConsumerReply<E::Reply>;
    type State = ConsumerState<E::State>;

    async fn handle(&mut self, ctx: &mut EntityContext, message: Self::Message) -> Self::Reply {
        match message {
            ConsumerEnvelope::Direct(m) => {
                let reply = self.entity.handle(ctx, m).await;
                ConsumerReply {
                    control: None,
                    reply: Some(reply),
                    replies: Vec::new(),
                }
            }
            ConsumerEnvelope::Sequenced(s) => {
                let (control, reply) = self.one(ctx, SequencedMessage::from(s)).await;
                self.count_delivered(ctx);
                ConsumerReply {
                    control,
                    reply,
                    replies: Vec::new(),
                }
            }
            ConsumerEnvelope::Batch(batch) => {
                let (mut last, mut resend, mut replies) = (None, None, Vec::new());
                for s in batch {
                    let seq_nr = s.seq_nr;
                    let (control, reply) = self.one(ctx, SequencedMessage::from(s)).await;
                    if let Some(r) = reply {
                        replies.push((seq_nr, r));
                    }
                    match control {
                        // A gap asks once; the messages after it answer what was handled.
                        Some(c @ ConsumerMessage::Resend { .. }) if resend.is_none() => {
                            resend = Some(c)
                        }
                        Some(c) => last = Some(c),
                        None => {}
                    }
                }
                self.count_delivered(ctx);
                ConsumerReply {
                    control: resend.or(last),
                    reply: None,
                    replies,
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

#[cfg(all(test, feature = "runtime"))]
mod tests {
    use super::*;
    use concord_core::delivery::Incarnation;

    /// Keeps what it is given; answers how many it has.
    #[derive(Default)]
    struct Keep(Vec<u64>);

    impl Entity for Keep {
        type Message = u64;
        type Reply = usize;
        type State = ();
        async fn handle(&mut self, _ctx: &mut EntityContext, v: u64) -> usize {
            self.0.push(v);
            self.0.len()
        }
    }

    fn message(seq_nr: u64, confirmed: u64) -> Sequenced {
        Sequenced {
            producer_id: "p".into(),
            incarnation: Incarnation {
                started_ms: 1,
                generation: 1,
                nonce: 1,
            },
            seq_nr,
            confirmed_seq_nr: confirmed,
            payload: encode(&(seq_nr * 10)).unwrap(),
        }
    }

    #[tokio::test]
    async fn a_batch_is_handled_in_order_and_answered_once() {
        let mut c = ReliableConsumer::new(
            Keep::default(),
            &DeliverySettings::default(),
            Vec::new(),
            Arc::from("t"),
        );
        let mut ctx = EntityContext::new(
            "e".into(),
            "0".into(),
            concord_core::Address::new("t", "h", 1),
        );
        let r = c
            .handle(
                &mut ctx,
                ConsumerEnvelope::Batch((1..=3).map(|n| message(n, 0)).collect()),
            )
            .await;
        assert_eq!(c.entity().0, vec![10, 20, 30]);
        assert_eq!(r.replies, vec![(1, 1), (2, 2), (3, 3)]);
        assert!(matches!(
            r.control,
            Some(ConsumerMessage::Request {
                confirmed_seq_nr: 3,
                ..
            })
        ));
        // A batch after a gap: nothing handled, one resend asked from the first missing.
        let r = c
            .handle(
                &mut ctx,
                ConsumerEnvelope::Batch((6..=8).map(|n| message(n, 0)).collect()),
            )
            .await;
        assert_eq!(c.entity().0.len(), 3);
        assert!(r.replies.is_empty());
        assert!(matches!(
            r.control,
            Some(ConsumerMessage::Resend { from_seq_nr: 4, .. })
        ));
        // Duplicates then new ones: only the new ones handled; the answer is the last.
        let r = c
            .handle(
                &mut ctx,
                ConsumerEnvelope::Batch((2..=5).map(|n| message(n, 0)).collect()),
            )
            .await;
        assert_eq!(c.entity().0, vec![10, 20, 30, 40, 50]);
        assert_eq!(r.replies, vec![(4, 4), (5, 5)]);
        assert!(matches!(
            r.control,
            Some(ConsumerMessage::Request {
                confirmed_seq_nr: 5,
                ..
            })
        ));
    }
}
