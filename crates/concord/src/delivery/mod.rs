//! Reliable delivery: at-least-once, ordered, deduplicated, flow-controlled messages to
//! sharded entities (Akka's reliable delivery; docs/RELIABLE_DELIVERY.md).
//!
//! The protocol is the core's ([`concord_core::delivery`]); this module carries it through
//! sharding:
//!
//! - [`init_sharded_consumer`] runs an entity type behind a consumer controller
//!   ([`ReliableConsumer`]): each producer's messages reach the entity in order, once,
//!   and are confirmed after its handler finished.
//! - [`ShardingProducer`] sends to those entities by id: `send` returns once the producer
//!   holds the message (or refuses it: the buffer is bounded), `send_and_confirm` once the
//!   entity confirmed it; unconfirmed messages are resent with backoff, across rebalances,
//!   handoffs and crashes of the entity's node.
//! - [`ShardingProducer::start_durable`] keeps the producer's unconfirmed messages in the
//!   node's persistence store (a durable producer queue): started again after a crash, it
//!   sends them again.
//! - [`init_event_sourced_consumer`] runs an event-sourced entity type as a consumer
//!   ([`ReliableEventSourced`]) that stores what it handled with its events: each message
//!   applied once, also across crashes.
//! - `[reliable-delivery]` ([`ReliableDeliveryConfig`]) and the metrics
//!   `concord_delivery_*`.
//!
//! ```no_run
//! # async fn run(config: concord::Config) -> Result<(), Box<dyn std::error::Error>> {
//! use concord::delivery::{init_sharded_consumer, ReliableDeliveryConfig, ShardingProducer};
//! use concord::sharding::{Entity, EntityContext, Sharding};
//! use std::time::Duration;
//!
//! /// Appends lines; with reliable delivery it sees each producer's lines once, in order.
//! #[derive(Default)]
//! struct Log(Vec<String>);
//!
//! impl Entity for Log {
//!     type Message = String;
//!     type Reply = usize;
//!     type State = ();
//!     async fn handle(&mut self, _ctx: &mut EntityContext, line: String) -> usize {
//!         self.0.push(line);
//!         self.0.len()
//!     }
//! }
//!
//! let settings = config.section::<ReliableDeliveryConfig>()?.settings();
//! let mut sharding = Sharding::new();
//! let logs = init_sharded_consumer(&mut sharding, "log", |_id, _state| Log::default(), None, settings.clone());
//! let node = concord::Node::builder(config).layer(sharding).start().await?;
//! let producer = ShardingProducer::start(
//!     format!("lines@{}", node.self_address()),
//!     node.self_address(),
//!     logs,
//!     settings,
//! );
//! producer.send("log-1", &"hello".to_string()).await?;
//! let length = producer
//!     .send_and_confirm("log-1", &"world".to_string(), Duration::from_secs(10))
//!     .await?;
//! # Ok(())
//! # }
//! ```

// Without the tokio runtime only the consumer side exists (the simulator hosts it).
#[cfg(feature = "runtime")]
pub(crate) mod codec;
#[cfg(feature = "runtime")]
mod config;
mod consumer;
#[cfg(feature = "runtime")]
mod durable_queue;
#[cfg(feature = "runtime")]
mod error;
#[cfg(feature = "runtime")]
mod event_sourced_consumer;
pub mod idempotency;
#[cfg(feature = "runtime")]
mod layer;
mod metrics;
#[cfg(feature = "runtime")]
mod point_consumer;
#[cfg(feature = "runtime")]
mod producer;
#[cfg(feature = "runtime")]
mod producer_core;
#[cfg(feature = "runtime")]
mod producer_task;
#[cfg(feature = "runtime")]
mod recorder;
#[cfg(feature = "runtime")]
mod router_effects;
#[cfg(feature = "runtime")]
mod status;
#[cfg(feature = "runtime")]
mod work_pulling;
#[cfg(feature = "runtime")]
mod work_pulling_task;

#[cfg(feature = "runtime")]
use std::sync::Arc;

#[cfg(feature = "runtime")]
use concord_core::delivery::DeliverySettings;
#[cfg(feature = "runtime")]
use concord_core::sharding::ShardingSettings;

#[cfg(feature = "runtime")]
pub use config::ReliableDeliveryConfig;
pub use consumer::{
    ConsumerEntity, ConsumerEnvelope, ConsumerReply, ConsumerState, ReliableConsumer, Sequenced,
};
#[cfg(feature = "runtime")]
pub use durable_queue::QUEUE_ENTITY_TYPE;
#[cfg(feature = "runtime")]
pub use error::DeliveryError;
#[cfg(feature = "runtime")]
pub use event_sourced_consumer::{ReliableEvent, ReliableEventSourced, ReliableState};
#[cfg(feature = "runtime")]
pub use layer::{DeliveryHandle, ReliableDelivery};
#[cfg(feature = "runtime")]
pub use point_consumer::{ConsumerRef, Delivery, DeliveryConsumer};
#[cfg(feature = "runtime")]
pub use producer::ShardingProducer;
#[cfg(feature = "runtime")]
pub use status::{ProducerStatus, WorkPullingStatus};
#[cfg(feature = "runtime")]
pub use work_pulling::{PointToPointProducer, SingletonProducer, WorkPullingProducer};

#[cfg(feature = "runtime")]
use crate::persistence::{EventSourced, EventSourcedEntity, Persistence};
#[cfg(feature = "runtime")]
use crate::sharding::{Entity, ShardRegion, Sharding};

#[cfg(feature = "runtime")]
/// Runs entity type `entity_type` behind a consumer controller on this node (Akka's
/// `ShardingConsumerController`): like [`Sharding::init`], with `factory` building the
/// entity from its id and its own handed-over state. The region's messages are
/// [`ConsumerEnvelope`]s: a [`ShardingProducer`]'s sequenced ones, or direct ones.
pub fn init_sharded_consumer<E, F>(
    sharding: &mut Sharding,
    entity_type: &str,
    factory: F,
    sharding_settings: Option<ShardingSettings>,
    settings: DeliverySettings,
) -> ShardRegion<ReliableConsumer<E>>
where
    E: Entity,
    F: Fn(&str, Option<E::State>) -> E + Send + Sync + 'static,
{
    let type_name: Arc<str> = Arc::from(entity_type);
    sharding.init(
        entity_type,
        consumer::consumer_factory::<E, F>(factory, settings, type_name),
        sharding_settings,
    )
}

#[cfg(feature = "runtime")]
/// Runs event-sourced entity type `entity_type` as a reliable consumer, **effectively
/// once** ([`ReliableEventSourced`]): like [`Persistence::init_event_sourced`], with the
/// highest number handled per producer persisted with the events each message caused.
pub fn init_event_sourced_consumer<B, F>(
    persistence: &Persistence,
    sharding: &mut Sharding,
    entity_type: &str,
    behavior: F,
    sharding_settings: Option<ShardingSettings>,
    settings: DeliverySettings,
) -> ShardRegion<EventSourcedEntity<ReliableEventSourced<B>>>
where
    B: EventSourced,
    F: Fn(&str) -> B + Send + Sync + 'static,
{
    let type_name: Arc<str> = Arc::from(entity_type);
    persistence.init_event_sourced(
        sharding,
        entity_type,
        move |id: &str| {
            ReliableEventSourced::new(behavior(id), settings.clone(), type_name.clone())
        },
        sharding_settings,
    )
}
