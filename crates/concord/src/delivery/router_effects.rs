//! The delivery layer's effects: the local endpoints by name (each a queue into the task of
//! a point-to-point or work-pulling producer, or of a consumer), what the router machine
//! received handed to them, and their envelopes handed to the machine (or straight to a
//! local endpoint when the receiver runs on this node).

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;

use concord_core::delivery::{
    DeliveryBody, DeliveryEnvelope, DeliveryRouter, RouterEvent, RouterMembers,
};
use concord_core::{Address, UniqueAddress};
use tokio::sync::{mpsc, oneshot};

use super::error::DeliveryError;
use crate::host::{Effects, LayerEffects};

/// What an endpoint's task receives.
#[derive(Debug)]
pub(crate) enum EndpointInput {
    /// An envelope for it, from node `from`.
    Envelope {
        from: UniqueAddress,
        envelope: DeliveryEnvelope,
    },
    /// The cluster's members changed (their addresses, this node's included, or who is
    /// oldest).
    Members(RouterMembers),
}

/// What a registration answers: this node's address and the members as last seen.
pub(crate) type Registered = (UniqueAddress, RouterMembers);

/// What the endpoints' tasks ask the layer.
pub(crate) enum DeliveryCommand {
    /// Register endpoint `name`; refused if the name is taken or malformed.
    Register {
        name: String,
        inbox: mpsc::Sender<EndpointInput>,
        reply: oneshot::Sender<Result<Registered, String>>,
    },
    /// Endpoint `name` stopped (only if `inbox` is still the one registered).
    Unregister {
        name: String,
        inbox: mpsc::Sender<EndpointInput>,
    },
    /// Send `envelope` to node `to`.
    Send {
        to: Address,
        envelope: DeliveryEnvelope,
    },
}

/// Registers endpoint `name` with its queue through the layer's command queue `commands`.
///
/// # Errors
/// [`DeliveryError::BadName`] (empty, too long or taken), [`DeliveryError::Stopped`].
pub(super) async fn register(
    commands: &mpsc::Sender<DeliveryCommand>,
    name: &str,
    inbox: mpsc::Sender<EndpointInput>,
) -> Result<Registered, DeliveryError> {
    let (tx, rx) = oneshot::channel();
    commands
        .send(DeliveryCommand::Register {
            name: name.to_string(),
            inbox,
            reply: tx,
        })
        .await
        .map_err(|_| DeliveryError::Stopped)?;
    rx.await
        .map_err(|_| DeliveryError::Stopped)?
        .map_err(DeliveryError::BadName)
}

/// See the module docs.
pub(crate) struct DeliveryEffects {
    node: String,
    endpoints: HashMap<String, mpsc::Sender<EndpointInput>>,
    members: RouterMembers,
    /// Endpoints whose queue was full when the members changed: told on the next tick.
    members_owed: HashSet<String>,
}

impl DeliveryEffects {
    pub(crate) fn new(node: String) -> Self {
        DeliveryEffects {
            node,
            endpoints: HashMap::new(),
            members: RouterMembers::default(),
            members_owed: HashSet::new(),
        }
    }

    /// Hands `envelope` to its local endpoint; a missing or full one drops it (counted:
    /// the producer sends it again). A producer's message for an endpoint this node does
    /// not have is answered [`DeliveryBody::NoEndpoint`], so that a work-pulling producer
    /// moves that worker's messages instead of resending them here.
    fn deliver(
        &mut self,
        fx: &mut Effects<'_, Self>,
        from: UniqueAddress,
        envelope: DeliveryEnvelope,
    ) {
        match self.endpoints.get(&envelope.to) {
            None => {
                super::metrics::router_dropped(&self.node, "unknown-endpoint");
                self.answer_no_endpoint(fx, from, envelope);
            }
            Some(inbox) => match inbox.try_send(EndpointInput::Envelope { from, envelope }) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    super::metrics::router_dropped(&self.node, "endpoint-full");
                }
                Err(mpsc::error::TrySendError::Closed(i)) => {
                    let EndpointInput::Envelope { from, envelope } = i else {
                        return;
                    };
                    self.endpoints.remove(&envelope.to);
                    super::metrics::router_dropped(&self.node, "unknown-endpoint");
                    self.answer_no_endpoint(fx, from, envelope);
                }
            },
        }
    }

    /// Tells the sender of a producer's message for a missing endpoint that it is missing
    /// (nothing else is answered: a missing producer's answer is not answered back).
    fn answer_no_endpoint(
        &mut self,
        fx: &mut Effects<'_, Self>,
        from: UniqueAddress,
        envelope: DeliveryEnvelope,
    ) {
        if !matches!(envelope.body, DeliveryBody::Sequenced(_)) {
            return;
        }
        let answer = DeliveryEnvelope {
            to: envelope.from,
            from: envelope.to,
            body: DeliveryBody::NoEndpoint,
        };
        if from.address == fx.node().address {
            let me = fx.node().clone();
            self.deliver(fx, me, answer);
        } else if fx.machine.send(&from.address, answer).is_err() {
            super::metrics::router_dropped(&self.node, "malformed");
        }
    }
}

impl DeliveryEffects {
    /// Tells the endpoints owed it the members; a full queue is tried again on the next
    /// tick (a lost change would leave a work-pulling producer assigning to a gone worker).
    fn tell_members(&mut self) {
        let owed = std::mem::take(&mut self.members_owed);
        for name in owed {
            let Some(inbox) = self.endpoints.get(&name) else {
                continue;
            };
            match inbox.try_send(EndpointInput::Members(self.members.clone())) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.members_owed.insert(name);
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    self.endpoints.remove(&name);
                }
            }
        }
    }
}

impl LayerEffects for DeliveryEffects {
    type Machine = DeliveryRouter;
    type Command = DeliveryCommand;
    type Completion = Infallible;

    fn name(&self) -> &'static str {
        "reliable-delivery"
    }

    fn command(&mut self, fx: &mut Effects<'_, Self>, command: DeliveryCommand) {
        match command {
            DeliveryCommand::Register { name, inbox, reply } => {
                let r = if name.is_empty()
                    || name.len() > concord_core::delivery::MAX_ENDPOINT_NAME_BYTES
                {
                    Err(format!(
                        "endpoint name `{name}` is empty or longer than 256 bytes"
                    ))
                } else if self
                    .endpoints
                    .get(&name)
                    .is_some_and(|existing| !existing.is_closed())
                {
                    Err(format!("endpoint `{name}` is already running on this node"))
                } else {
                    self.endpoints.insert(name, inbox);
                    Ok((fx.node().clone(), self.members.clone()))
                };
                let _ = reply.send(r);
            }
            DeliveryCommand::Unregister { name, inbox } => {
                if self
                    .endpoints
                    .get(&name)
                    .is_some_and(|e| e.same_channel(&inbox))
                {
                    self.endpoints.remove(&name);
                }
            }
            DeliveryCommand::Send { to, envelope } => {
                if to == fx.node().address {
                    let me = fx.node().clone();
                    self.deliver(fx, me, envelope);
                } else if fx.machine.send(&to, envelope).is_err() {
                    super::metrics::router_dropped(&self.node, "malformed");
                }
            }
        }
    }

    fn completion(&mut self, _fx: &mut Effects<'_, Self>, never: Infallible) {
        match never {}
    }

    fn event(&mut self, fx: &mut Effects<'_, Self>, event: RouterEvent) {
        match event {
            RouterEvent::Inbound { from, envelope } => self.deliver(fx, from, envelope),
            RouterEvent::Members(members) => {
                self.members = members;
                self.members_owed = self.endpoints.keys().cloned().collect();
                self.tell_members();
            }
        }
    }

    fn received(&mut self, _message: &DeliveryEnvelope, _bytes: usize) {}

    fn tick(&mut self, fx: &mut Effects<'_, Self>) {
        self.tell_members();
        super::metrics::router(&self.node, self.endpoints.len(), &fx.machine.stats());
    }
}
