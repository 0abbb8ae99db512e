//! [`DeliveryConsumer`]: a named consumer endpoint on this node (Akka's
//! `ConsumerController` for point-to-point and work pulling), fed by
//! [`super::PointToPointProducer`]s and [`super::WorkPullingProducer`]s on any node. Its
//! task runs the core's [`ConsumerController`]: each producer's messages come out of
//! [`DeliveryConsumer::recv`] in order, each once, one at a time; the next comes after
//! [`Delivery::confirm`], which also confirms the message to its producer and grants the
//! flow control window. A delivery dropped without `confirm` is not confirmed: the
//! producer sends it again after its resend timeout, and it comes out again.
//!
//! What the consumer knows lives in its task: a consumer started again (after its node
//! crashed, or after it was dropped) knows no producer, and a message handled whose
//! confirmation was lost comes again (at least once).

use std::fmt;
use std::marker::PhantomData;

use concord_core::delivery::{
    ConsumerController, ConsumerMessage, DeliveryBody, DeliveryEnvelope, DeliverySettings, Verdict,
};
use concord_core::Address;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::error::DeliveryError;
use super::metrics;
use super::router_effects::{register, DeliveryCommand, EndpointInput};
use crate::sharding::entity::decode;
use crate::singleton::Wire;

/// Envelopes queued for one endpoint before the layer drops more (counted; the producers
/// send them again). The windows keep it far from full.
pub(super) const INBOX: usize = 1024;

/// Where a consumer endpoint runs: its node and its name there (`name@address`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConsumerRef {
    /// The node.
    pub address: Address,
    /// The endpoint's name on it (at most 256 bytes).
    pub name: String,
}

impl ConsumerRef {
    /// The consumer named `name` on node `address`.
    pub fn new(address: Address, name: impl Into<String>) -> Self {
        ConsumerRef {
            address,
            name: name.into(),
        }
    }
}

impl fmt::Display for ConsumerRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.address)
    }
}

/// One message out of a [`DeliveryConsumer`]; call [`Delivery::confirm`] once handled.
#[derive(Debug)]
pub struct Delivery<M> {
    /// The message.
    pub message: M,
    /// The producer that sent it.
    pub producer_id: String,
    /// Its number in the producer's messages to this consumer.
    pub seq_nr: u64,
    confirm: oneshot::Sender<()>,
}

impl<M> Delivery<M> {
    /// The message is handled: it is confirmed to its producer, and the next one comes.
    pub fn confirm(self) {
        let _ = self.confirm.send(());
    }
}

/// A consumer endpoint; see the module docs. Dropping it stops the endpoint.
pub struct DeliveryConsumer<M> {
    reference: ConsumerRef,
    deliveries: mpsc::Receiver<Delivery<M>>,
}

impl<M: Wire> DeliveryConsumer<M> {
    /// Registers endpoint `name` on this node and starts its task.
    pub(super) async fn start(
        commands: &mpsc::Sender<DeliveryCommand>,
        name: String,
        settings: &DeliverySettings,
    ) -> Result<Self, DeliveryError> {
        let (inbox_tx, inbox) = mpsc::channel(INBOX);
        let (me, _) = register(commands, &name, inbox_tx.clone()).await?;
        let (tx, deliveries) = mpsc::channel(1);
        let task = Task::<M> {
            name: name.clone(),
            node: me.address.to_string(),
            controller: ConsumerController::new(settings),
            commands: commands.clone(),
            deliveries: tx,
            _message: PhantomData,
        };
        tokio::spawn(task.run(inbox, inbox_tx));
        Ok(DeliveryConsumer {
            reference: ConsumerRef::new(me.address, name),
            deliveries,
        })
    }

    /// Where producers send to.
    pub fn reference(&self) -> &ConsumerRef {
        &self.reference
    }

    /// The next message, in order per producer; `None` once the node stopped.
    pub async fn recv(&mut self) -> Option<Delivery<M>> {
        self.deliveries.recv().await
    }
}

struct Task<M> {
    name: String,
    node: String,
    controller: ConsumerController,
    commands: mpsc::Sender<DeliveryCommand>,
    deliveries: mpsc::Sender<Delivery<M>>,
    _message: PhantomData<fn() -> M>,
}

impl<M: Wire> Task<M> {
    async fn run(
        mut self,
        mut inbox: mpsc::Receiver<EndpointInput>,
        registered: mpsc::Sender<EndpointInput>,
    ) {
        loop {
            let input = tokio::select! {
                i = inbox.recv() => i,
                () = self.deliveries.closed() => None,
            };
            let Some(input) = input else { break };
            let EndpointInput::Envelope { from, envelope } = input else {
                continue;
            };
            let DeliveryEnvelope {
                from: producer_endpoint,
                body,
                ..
            } = envelope;
            let DeliveryBody::Sequenced(m) = body else {
                metrics::consumer_dropped(&self.node, &self.name, "invalid");
                continue;
            };
            let answer = match self.controller.receive(&m) {
                Verdict::Deliver => match decode::<M>(&m.payload) {
                    Err(e) => {
                        // Sending it again cannot help: it is confirmed, skipped and named.
                        metrics::consumer_dropped(&self.node, &self.name, "undecodable");
                        tracing::warn!(consumer = %self.name, producer = %m.producer_id, seq_nr = m.seq_nr, error = %e, "a reliably delivered message does not decode; it is confirmed and skipped");
                        Some(self.controller.delivered(&m))
                    }
                    Ok(message) => {
                        let (confirm, confirmed) = oneshot::channel();
                        let delivery = Delivery {
                            message,
                            producer_id: m.producer_id.clone(),
                            seq_nr: m.seq_nr,
                            confirm,
                        };
                        if self.deliveries.send(delivery).await.is_err() {
                            break;
                        }
                        match confirmed.await {
                            Ok(()) => {
                                metrics::consumer_delivered(&self.node, &self.name, 1);
                                Some(self.controller.delivered(&m))
                            }
                            // Dropped unconfirmed: it comes again.
                            Err(_) => None,
                        }
                    }
                },
                Verdict::Drop(answer) => {
                    let why = match answer {
                        ConsumerMessage::Request { .. } => "duplicate",
                        ConsumerMessage::Resend { .. } => "gap",
                        ConsumerMessage::Stale { .. } => "stale",
                    };
                    metrics::consumer_dropped(&self.node, &self.name, why);
                    Some(answer)
                }
                Verdict::Invalid => {
                    metrics::consumer_dropped(&self.node, &self.name, "invalid");
                    None
                }
            };
            if let Some(answer) = answer {
                let envelope = DeliveryEnvelope {
                    to: producer_endpoint,
                    from: self.name.clone(),
                    body: DeliveryBody::Control(answer),
                };
                let send = DeliveryCommand::Send {
                    to: from.address,
                    envelope,
                };
                if self.commands.send(send).await.is_err() {
                    break;
                }
            }
        }
        let _ = self
            .commands
            .send(DeliveryCommand::Unregister {
                name: self.name.clone(),
                inbox: registered,
            })
            .await;
    }
}
