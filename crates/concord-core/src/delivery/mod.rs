//! Reliable delivery: at-least-once, ordered, deduplicated, flow-controlled messaging from
//! a producer to consumers (Akka's `akka.actor.typed.delivery`: `ProducerController`,
//! `ConsumerController`, `ShardingProducerController`; docs/RELIABLE_DELIVERY.md).
//!
//! - [`ProducerController`] numbers one producer's messages to one consumer, keeps them
//!   until confirmed, sends only as far as the consumer's demand (the flow control window)
//!   and resends on timeout (exponential backoff with jitter, [`ResendBackoff`]) or when
//!   the consumer asks.
//! - [`ShardingProducerController`] is one producer to many sharded entities: a
//!   controller per entity, one buffer bound over all, idle controllers forgotten.
//! - [`DurableQueueState`] is a durable producer queue's state, the fold of its
//!   [`QueueEvent`]s: what a restarted producer sends again.
//! - [`WorkPullingProducerController`] is one producer to a pool of workers: each message
//!   to one worker that asked for work; a worker that leaves gives its unconfirmed
//!   messages to the others. With one worker it is a point-to-point producer.
//! - [`ConsumerController`] delivers each producer's messages in order, each once, drops
//!   duplicates, asks for what is missing, and confirms after the handler finished.
//! - [`DeliveryRouter`] is the delivery layer's machine: it carries point-to-point and
//!   work-pulling messages between named endpoints on any nodes.
//!
//! The messages ([`SequencedMessage`], [`ConsumerMessage`]) are plain data: the runtime
//! carries them (through sharding for sharded entities, through the router otherwise).

mod backoff;
mod consumer;
mod durable_queue;
mod message;
mod producer;
mod router;
mod settings;
mod sharding_producer;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_restart;
#[cfg(test)]
mod tests_work_pulling;
mod work_pulling;

pub use backoff::ResendBackoff;
pub use consumer::{ConsumerController, ConsumerStats, ProducerProgress, Verdict};
pub use durable_queue::{DurableQueueState, QueueEvent, QueuedEntity};
pub use message::{ConsumerMessage, Incarnation, SequencedMessage, MAX_PRODUCER_ID_BYTES};
pub use producer::{ProducerController, ProducerEvent, ProducerStats, SendError};
pub use router::{
    DeliveryBody, DeliveryEnvelope, DeliveryRouter, RouterError, RouterEvent, RouterMembers,
    RouterStats, MAX_ENDPOINT_NAME_BYTES,
};
pub use settings::DeliverySettings;
pub use sharding_producer::{
    Accepted, EntityTransmit, ShardingProducerController, ShardingProducerEvent, ShardingSendError,
    MAX_ENTITY_ID_BYTES,
};
pub use work_pulling::{WorkPullingEvent, WorkPullingProducerController};
