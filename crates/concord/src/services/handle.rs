//! [`PartitionedServices`] (register services, get a [`ServiceRef`]) and [`Service`] (what
//! an instance is). docs/SERVICES.md.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use concord_core::services::{InstancePolicy, PartitionPath, RoutingLogic, ServicesState};
use concord_core::{Address, UniqueAddress};
use futures_channel::oneshot;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use super::effects::ServicesCommand;
use crate::sharding::entity::{decode, encode, BoxFuture};
use crate::singleton::Wire;

/// What an instance of a service handling one message knows.
#[derive(Clone, Debug)]
pub struct ServiceContext {
    pub(crate) path: PartitionPath,
    pub(crate) node: Address,
    pub(crate) sender: Option<UniqueAddress>,
}

impl ServiceContext {
    /// The service's path.
    pub fn path(&self) -> &PartitionPath {
        &self.path
    }

    /// The node this instance runs on.
    pub fn node(&self) -> &Address {
        &self.node
    }

    /// The node that sent the message being handled (`None` while the instance is built).
    pub fn sender(&self) -> Option<&UniqueAddress> {
        self.sender.as_ref()
    }
}

/// An instance of a partitioned service: created by the service's factory on the nodes the
/// leader places it on, one message at a time. Its state is its own: a move starts a fresh
/// instance on the new node (keep what must last in Distributed Data, the key-value store
/// or persistence).
pub trait Service: Send + 'static {
    /// The messages it handles.
    type Message: Wire;
    /// What it answers to an ask (`()` when nothing).
    type Reply: Wire;

    /// Handles one message; the next waits until the future completes.
    fn handle(
        &mut self,
        ctx: &mut ServiceContext,
        message: Self::Message,
    ) -> impl Future<Output = Self::Reply> + Send;
}

/// A service with its types erased, for the instance task.
pub(crate) trait ErasedService: Send {
    /// Decodes `payload`, handles it, encodes the reply when `reply`.
    fn handle<'a>(
        &'a mut self,
        ctx: &'a mut ServiceContext,
        payload: &'a [u8],
        reply: bool,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>>;
}

struct Typed<S>(S);

impl<S: Service> ErasedService for Typed<S> {
    fn handle<'a>(
        &'a mut self,
        ctx: &'a mut ServiceContext,
        payload: &'a [u8],
        reply: bool,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(async move {
            let message: S::Message =
                decode(payload).map_err(|e| format!("the message does not decode: {e}"))?;
            let r = self.0.handle(ctx, message).await;
            if reply {
                encode(&r)
            } else {
                Ok(Vec::new())
            }
        })
    }
}

/// Builds an instance of a service.
pub(crate) type Factory = Arc<dyn Fn(&ServiceContext) -> Box<dyn ErasedService> + Send + Sync>;

/// The envelope of a service message inside the protocol's payload: the ask's id, if any,
/// and the message.
#[derive(Serialize, Deserialize)]
pub(crate) struct WireEnvelope {
    #[serde(rename = "a")]
    pub(crate) ask: Option<u64>,
    #[serde(rename = "b", with = "serde_bytes")]
    pub(crate) body: Vec<u8>,
}

/// What went wrong with a service call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServicesError {
    /// The node's services layer has stopped.
    #[error("the services layer has stopped")]
    Stopped,
    /// The message or reply does not encode or decode.
    #[error("{0}")]
    Codec(String),
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The registration was refused (limit, duplicate, bad path).
    #[error("{0}")]
    Refused(String),
    /// The message could not be routed or handled (no instance, buffer full, the
    /// instance's error).
    #[error("{0}")]
    Failed(String),
}

/// What the layer shares with its handles.
pub(crate) struct Shared {
    pub(crate) snapshot: watch::Sender<Arc<ServicesSnapshot>>,
}

/// A view of the services layer on one node (for the management API and tests).
#[derive(Clone, Debug, Default)]
pub struct ServicesSnapshot {
    /// The state (table, pending changes) as this node knows it.
    pub state: ServicesState,
    /// The paths registered here.
    pub registered: Vec<PartitionPath>,
    /// Local instances and handoffs: path → `running`, `preparing`, `stopping`, `moved`,
    /// `arriving`.
    pub local: Vec<(PartitionPath, &'static str)>,
    /// Messages buffered here.
    pub buffered: usize,
    /// Whether this node hosts nothing and is in no handoff.
    pub hosts_nothing: bool,
    /// Counters: sent, delivered, forwarded, handoffs, dropped by reason.
    pub stats: concord_core::services::ServicesStats,
    /// This node.
    pub node: Option<UniqueAddress>,
}

/// Partitioned services on this node: register services and route messages to them.
/// Cheap to clone.
#[derive(Clone)]
pub struct PartitionedServices {
    pub(crate) commands: mpsc::Sender<ServicesCommand>,
    pub(crate) shared: Arc<Shared>,
}

impl PartitionedServices {
    /// Registers the service `path` on this node with its instance `policy` and `factory`
    /// (called on this node each time the leader places an instance here). Register the
    /// same services on every node that may host them; the leader places the paths it has
    /// registered itself, over the Up members that registered them.
    ///
    /// # Errors
    /// [`ServicesError::Refused`]: a bad path, the path registered already, or
    /// `services.max-services` reached; [`ServicesError::Stopped`].
    pub async fn register<S, F>(
        &self,
        path: &str,
        policy: InstancePolicy,
        factory: F,
    ) -> Result<ServiceRef<S>, ServicesError>
    where
        S: Service,
        F: Fn(&ServiceContext) -> S + Send + Sync + 'static,
    {
        let path = PartitionPath::new(path).map_err(|e| ServicesError::Refused(e.to_string()))?;
        let factory: Factory = Arc::new(move |ctx| Box::new(Typed(factory(ctx))));
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(ServicesCommand::Register {
                path: path.clone(),
                policy,
                factory,
                reply,
            })
            .await
            .map_err(|_| ServicesError::Stopped)?;
        rx.await
            .map_err(|_| ServicesError::Stopped)?
            .map_err(|e| ServicesError::Refused(e.to_string()))?;
        Ok(self.service_ref(path))
    }

    /// A reference to the service `path` (registered here or only on other nodes), routing
    /// round robin (see [`ServiceRef::with_routing`]).
    pub fn service_ref<S: Service>(&self, path: PartitionPath) -> ServiceRef<S> {
        ServiceRef {
            path,
            logic: RoutingLogic::RoundRobin,
            commands: self.commands.clone(),
            _service: PhantomData,
        }
    }

    /// The layer's view on this node now.
    pub fn snapshot(&self) -> Arc<ServicesSnapshot> {
        self.shared.snapshot.borrow().clone()
    }

    /// Notified on each change of [`PartitionedServices::snapshot`].
    pub fn subscribe(&self) -> watch::Receiver<Arc<ServicesSnapshot>> {
        self.shared.snapshot.subscribe()
    }
}

/// Routes messages to the instances of one service (Akka's group router over the
/// partition table): each message to one instance by the routing logic, or to all
/// ([`ServiceRef::broadcast`]). A message sent before the path is placed waits (up to
/// `services.handoff-timeout`). Delivery is at most once; a sending node's messages to a
/// single-instance service arrive in the order sent, across moves.
pub struct ServiceRef<S: Service> {
    path: PartitionPath,
    logic: RoutingLogic,
    commands: mpsc::Sender<ServicesCommand>,
    _service: PhantomData<fn() -> S>,
}

impl<S: Service> Clone for ServiceRef<S> {
    fn clone(&self) -> Self {
        ServiceRef {
            path: self.path.clone(),
            logic: self.logic,
            commands: self.commands.clone(),
            _service: PhantomData,
        }
    }
}

impl<S: Service> std::fmt::Debug for ServiceRef<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceRef")
            .field("path", &self.path)
            .field("routing", &self.logic)
            .finish()
    }
}

impl<S: Service> ServiceRef<S> {
    /// The service's path.
    pub fn path(&self) -> &PartitionPath {
        &self.path
    }

    /// The same reference routing by `logic` (round robin, random, consistent hashing on
    /// the key of [`ServiceRef::tell_keyed`], adaptive to cluster metrics, broadcast).
    pub fn with_routing(mut self, logic: RoutingLogic) -> Self {
        self.logic = logic;
        self
    }

    /// Its routing logic.
    pub fn routing(&self) -> RoutingLogic {
        self.logic
    }

    async fn send(
        &self,
        key: Option<&[u8]>,
        message: &S::Message,
        logic: RoutingLogic,
    ) -> Result<(), ServicesError> {
        let body = encode(message).map_err(ServicesError::Codec)?;
        self.commands
            .send(ServicesCommand::Tell {
                path: self.path.clone(),
                logic,
                key: key.map(<[u8]>::to_vec),
                body,
            })
            .await
            .map_err(|_| ServicesError::Stopped)
    }

    /// Sends `message` to one instance (at most once).
    ///
    /// # Errors
    /// [`ServicesError::Codec`], [`ServicesError::Stopped`].
    pub async fn tell(&self, message: &S::Message) -> Result<(), ServicesError> {
        self.send(None, message, self.logic).await
    }

    /// Sends `message` to the instance `key` hashes to (with consistent hashing; other
    /// logics ignore the key).
    ///
    /// # Errors
    /// As [`ServiceRef::tell`].
    pub async fn tell_keyed(&self, key: &[u8], message: &S::Message) -> Result<(), ServicesError> {
        self.send(Some(key), message, self.logic).await
    }

    /// Sends `message` to every instance.
    ///
    /// # Errors
    /// As [`ServiceRef::tell`].
    pub async fn broadcast(&self, message: &S::Message) -> Result<(), ServicesError> {
        self.send(None, message, RoutingLogic::Broadcast).await
    }

    /// Asks one instance and waits up to `timeout` for its answer.
    ///
    /// # Errors
    /// [`ServicesError::Timeout`]; [`ServicesError::Failed`] (no instance, buffer full,
    /// too many asks waiting, the message did not decode there); [`ServicesError::Codec`];
    /// [`ServicesError::Stopped`].
    pub async fn ask(
        &self,
        message: &S::Message,
        timeout: Duration,
    ) -> Result<S::Reply, ServicesError> {
        self.ask_inner(None, message, timeout).await
    }

    /// [`ServiceRef::ask`] the instance `key` hashes to (consistent hashing).
    ///
    /// # Errors
    /// As [`ServiceRef::ask`].
    pub async fn ask_keyed(
        &self,
        key: &[u8],
        message: &S::Message,
        timeout: Duration,
    ) -> Result<S::Reply, ServicesError> {
        self.ask_inner(Some(key), message, timeout).await
    }

    async fn ask_inner(
        &self,
        key: Option<&[u8]>,
        message: &S::Message,
        timeout: Duration,
    ) -> Result<S::Reply, ServicesError> {
        if self.logic == RoutingLogic::Broadcast {
            return Err(ServicesError::Failed(
                "an ask goes to one instance: broadcast cannot ask".into(),
            ));
        }
        let body = encode(message).map_err(ServicesError::Codec)?;
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(ServicesCommand::Ask {
                path: self.path.clone(),
                logic: self.logic,
                key: key.map(<[u8]>::to_vec),
                body,
                reply,
            })
            .await
            .map_err(|_| ServicesError::Stopped)?;
        let answer = tokio::time::timeout(timeout, rx)
            .await
            .map_err(|_| ServicesError::Timeout(timeout))?
            .map_err(|_| ServicesError::Stopped)?
            .map_err(ServicesError::Failed)?;
        decode(&answer).map_err(ServicesError::Codec)
    }
}
