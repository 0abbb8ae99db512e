//! [`ReliableDelivery`]: the layer that carries point-to-point and work-pulling reliable
//! delivery between nodes (protocol [`ProtocolId::DELIVERY`]), and [`DeliveryHandle`],
//! which starts consumer endpoints and producers on this node. Its host runs the core's
//! [`DeliveryRouter`] with the endpoints ([`super::router_effects`]); each endpoint is a
//! task of its own.

use std::sync::Arc;

use concord_core::delivery::{DeliveryRouter, DeliverySettings};
use concord_core::ProtocolId;
use tokio::sync::mpsc;

use super::codec::DeliveryCodec;
use super::error::DeliveryError;
use super::point_consumer::{ConsumerRef, DeliveryConsumer};
use super::router_effects::{DeliveryCommand, DeliveryEffects};
use super::work_pulling::{PointToPointProducer, SingletonProducer, WorkPullingProducer, Workers};
use crate::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
use crate::persistence::Stores;
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};
use crate::runtime::LaneOutbound;
use crate::singleton::Wire;

/// The layer's name in errors and logs.
const LAYER: &str = "reliable-delivery";

/// Commands queued from the endpoints before the host takes them (senders wait when full).
const COMMAND_QUEUE: usize = 4096;

/// The delivery layer; add it with `Node::builder(config).layer(layer)` and use the
/// [`DeliveryHandle`] returned with it once the node has started.
pub struct ReliableDelivery {
    commands: mpsc::Receiver<DeliveryCommand>,
    inbound: Option<mpsc::Receiver<Inbound<concord_core::delivery::DeliveryEnvelope>>>,
}

impl ReliableDelivery {
    /// The layer and its handle.
    pub fn new() -> (ReliableDelivery, DeliveryHandle) {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        (
            ReliableDelivery {
                commands: rx,
                inbound: None,
            },
            DeliveryHandle { commands: tx },
        )
    }
}

/// Starts reliable delivery endpoints on this node. Cheap to clone.
#[derive(Clone)]
pub struct DeliveryHandle {
    commands: mpsc::Sender<DeliveryCommand>,
}

impl DeliveryHandle {
    /// Starts consumer endpoint `name` on this node (unique on the node while it runs);
    /// producers reach it at [`DeliveryConsumer::reference`].
    ///
    /// # Errors
    /// [`DeliveryError::BadName`] if the name is empty, longer than 256 bytes or taken;
    /// [`DeliveryError::Stopped`] if the node stopped.
    pub async fn consumer<M: Wire>(
        &self,
        name: impl Into<String>,
        settings: &DeliverySettings,
    ) -> Result<DeliveryConsumer<M>, DeliveryError> {
        DeliveryConsumer::start(&self.commands, name.into(), settings).await
    }

    /// Starts point-to-point producer `producer_id` to `consumer` (Akka's
    /// `ProducerController`): messages numbered, flow-controlled and resent until
    /// confirmed. The id must be unique in the cluster while it runs (e.g. a name and the
    /// node's address).
    ///
    /// # Errors
    /// [`DeliveryError::BadName`] if the id is empty, longer than 200 bytes or runs
    /// here already; [`DeliveryError::Stopped`].
    pub async fn point_to_point<M: Wire>(
        &self,
        producer_id: impl Into<String>,
        consumer: ConsumerRef,
        settings: DeliverySettings,
    ) -> Result<PointToPointProducer<M>, DeliveryError> {
        PointToPointProducer::start(&self.commands, producer_id.into(), consumer, settings, None)
            .await
    }

    /// [`DeliveryHandle::point_to_point`] with a **durable queue** in `stores` (the node's
    /// persistence store, [`crate::persistence::Persistence::stores_within`]): every message
    /// is stored before `send` returns, and a producer started again with the same id —
    /// after a crash, on this node or another — first sends what was never confirmed
    /// (again: the consumer may have handled some of it; docs/RELIABLE_DELIVERY.md).
    ///
    /// # Errors
    /// As [`DeliveryHandle::point_to_point`]; [`DeliveryError::Store`] if the queue cannot
    /// be read.
    pub async fn point_to_point_durable<M: Wire>(
        &self,
        producer_id: impl Into<String>,
        consumer: ConsumerRef,
        settings: DeliverySettings,
        stores: &Stores,
    ) -> Result<PointToPointProducer<M>, DeliveryError> {
        PointToPointProducer::start(
            &self.commands,
            producer_id.into(),
            consumer,
            settings,
            Some(stores),
        )
        .await
    }

    /// Starts work-pulling producer `producer_id` to the consumers `workers` (Akka's
    /// `WorkPullingProducerController`): each message goes to one worker that asked for
    /// work; change the pool with [`WorkPullingProducer::set_workers`].
    ///
    /// # Errors
    /// As [`DeliveryHandle::point_to_point`].
    pub async fn work_pulling<M: Wire>(
        &self,
        producer_id: impl Into<String>,
        workers: Vec<ConsumerRef>,
        settings: DeliverySettings,
    ) -> Result<WorkPullingProducer<M>, DeliveryError> {
        WorkPullingProducer::start(
            &self.commands,
            producer_id.into(),
            Workers::Given(workers),
            settings,
            None,
        )
        .await
    }

    /// [`DeliveryHandle::work_pulling`] with a durable queue (as
    /// [`DeliveryHandle::point_to_point_durable`]).
    ///
    /// # Errors
    /// As [`DeliveryHandle::point_to_point_durable`].
    pub async fn work_pulling_durable<M: Wire>(
        &self,
        producer_id: impl Into<String>,
        workers: Vec<ConsumerRef>,
        settings: DeliverySettings,
        stores: &Stores,
    ) -> Result<WorkPullingProducer<M>, DeliveryError> {
        WorkPullingProducer::start(
            &self.commands,
            producer_id.into(),
            Workers::Given(workers),
            settings,
            Some(stores),
        )
        .await
    }

    /// Starts producer `producer_id` to the consumer endpoint `endpoint` of a **cluster
    /// singleton** with `role` (`None` or `""`: any member — the singleton's own role
    /// setting, `[singleton] role`, must be the same, or the producer waits at a node
    /// where the singleton does not run): the singleton starts a
    /// [`DeliveryHandle::consumer`] of that name where it runs, and the producer follows
    /// it to the oldest member with the role as it moves ([`SingletonProducer`]).
    ///
    /// # Errors
    /// As [`DeliveryHandle::point_to_point`]; [`DeliveryError::BadName`] for an empty or
    /// too long endpoint name.
    pub async fn to_singleton<M: Wire>(
        &self,
        producer_id: impl Into<String>,
        endpoint: impl Into<String>,
        role: Option<&str>,
        settings: DeliverySettings,
    ) -> Result<SingletonProducer<M>, DeliveryError> {
        SingletonProducer::start(
            &self.commands,
            producer_id.into(),
            endpoint.into(),
            role,
            settings,
            None,
        )
        .await
    }

    /// [`DeliveryHandle::to_singleton`] with a durable queue (as
    /// [`DeliveryHandle::point_to_point_durable`]).
    ///
    /// # Errors
    /// As [`DeliveryHandle::point_to_point_durable`].
    pub async fn to_singleton_durable<M: Wire>(
        &self,
        producer_id: impl Into<String>,
        endpoint: impl Into<String>,
        role: Option<&str>,
        settings: DeliverySettings,
        stores: &Stores,
    ) -> Result<SingletonProducer<M>, DeliveryError> {
        SingletonProducer::start(
            &self.commands,
            producer_id.into(),
            endpoint.into(),
            role,
            settings,
            Some(stores),
        )
        .await
    }
}

impl Layer for ReliableDelivery {
    fn name(&self) -> &'static str {
        LAYER
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        self.inbound = Some(register_protocol(
            LAYER,
            registry,
            settings,
            ProtocolId::DELIVERY,
            DeliveryCodec,
        )?);
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let ReliableDelivery { commands, inbound } = *self;
        let inbound = inbound.ok_or(LayerError::NotRegistered { layer: LAYER })?;
        let sender = ProtocolSender::new(
            ctx.transport.clone(),
            ProtocolId::DELIVERY,
            Arc::new(DeliveryCodec),
        );
        let node = ctx.cluster.self_unique_address().address.to_string();
        ctx.start_host(
            DeliveryRouter::new(),
            DeliveryEffects::new(node),
            HostPorts::new(Box::new(LaneOutbound::new(sender)), inbound).commands(commands),
        );
        Ok(LayerStarted::default())
    }
}
