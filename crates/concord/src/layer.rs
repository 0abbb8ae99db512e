//! The extension point a layer above membership plugs into (singleton, distributed data,
//! sharding, the key-value store, an application's own protocol).
//!
//! A layer is registered with the node composition ([`crate::NodeBuilder::layer`]) and
//! plugs in at two moments:
//!
//! 1. [`Layer::register`], before the transport binds: it registers its protocol id and
//!    codec in the [`ProtocolRegistry`] and keeps the returned queue of inbound messages.
//! 2. [`Layer::start`], once remoting and membership run: it gets a [`LayerContext`] —
//!    the [`Cluster`] (membership view and events; never the membership internals), the
//!    [`Transport`] (to build a [`crate::remote::ProtocolSender`] for its protocol), the
//!    node's [`CoordinatedShutdown`] (to add its hand-over tasks, e.g. to
//!    `cluster-sharding-shutdown-region` or `cluster-exiting`) and the configuration —
//!    starts its host (on the same driver loop as membership: inbound messages,
//!    membership changes and timers into its sans-IO machine; transmits and events out),
//!    and returns its management routes, which are merged into the management API.
//!
//! Metrics of its messages are counted per protocol by the transport; the layer adds its
//! own through the `metrics` facade with a `node` label.

use std::sync::Arc;

use crate::cluster::{Cluster, SubscriptionItem};
use crate::config::{Config, ConfigSection};
use crate::coordinated_shutdown::CoordinatedShutdown;
use crate::host::{LayerEffects, LayerHost, MembershipInput, MessageOf, Outbound, SystemClock};
use crate::remote::{Inbound, ProtocolRegistry, Transport, TransportSettings};
use crate::runtime::{spawn_host, HostChannels, HostThread, MembershipFeed, TokioSpawner};

/// What a started layer has access to.
#[derive(Clone)]
pub struct LayerContext {
    /// The node's one clock: every layer's host reads it.
    pub clock: SystemClock,
    /// Membership: the view, events, this node's address.
    pub cluster: Cluster,
    /// Remoting: send this layer's protocol messages.
    pub transport: Transport,
    /// The node's coordinated shutdown: add hand-over tasks.
    pub coordinated_shutdown: CoordinatedShutdown,
    /// The node's configuration.
    pub config: Arc<Config>,
    /// Gauges of this node's load that layers report (entities, mailboxes, buffers), read
    /// by the cluster-metrics layer at each sample.
    pub local_load: crate::load::LocalLoad,
    /// Every member's metrics as the cluster-metrics layer last learnt them (empty when it
    /// is off): what load-aware placement and adaptive routing read.
    pub cluster_load: crate::load::ClusterLoad,
}

impl LayerContext {
    /// `layer`'s configuration section `T` (see [`ConfigSection`]).
    ///
    /// # Errors
    /// [`LayerError::Config`] naming the key of a value that does not parse or makes no
    /// sense.
    pub fn section<T: ConfigSection>(&self, layer: &'static str) -> Result<T, LayerError> {
        self.config.section::<T>().map_err(|e| LayerError::Config {
            layer,
            message: e.to_string(),
        })
    }
}

/// A layer's failure to register or start; the node does not start. Each names the layer.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    /// Another layer registered the same protocol id.
    #[error("layer `{layer}`: protocol {protocol} is already registered by another layer")]
    DuplicateProtocol {
        /// The layer.
        layer: &'static str,
        /// The protocol id.
        protocol: concord_core::ProtocolId,
    },
    /// `start` ran before `register` (a node composition error).
    #[error("layer `{layer}`: started before it was registered")]
    NotRegistered {
        /// The layer.
        layer: &'static str,
    },
    /// The layer's configuration or set-up is not usable (an entity type started twice, ...).
    #[error("layer `{layer}`: {message}")]
    Config {
        /// The layer.
        layer: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A store the layer keeps under the data directory (durable keys, remembered entities,
    /// key-value data) cannot be opened or read; the message names the file.
    #[error("layer `{layer}`: {message}")]
    Storage {
        /// The layer.
        layer: &'static str,
        /// What failed, with the file.
        message: String,
    },
    /// A port the layer serves could not be bound.
    #[error("layer `{layer}`: cannot bind {addr}: {source}")]
    Bind {
        /// The layer.
        layer: &'static str,
        /// The address it tried.
        addr: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A thread or task of the layer could not be started, or its TLS could not be set up.
    #[error("layer `{layer}`: {message}")]
    Start {
        /// The layer.
        layer: &'static str,
        /// What failed.
        message: String,
    },
}

impl LayerError {
    /// The name of the layer that failed.
    pub fn layer(&self) -> &'static str {
        match self {
            LayerError::DuplicateProtocol { layer, .. }
            | LayerError::NotRegistered { layer }
            | LayerError::Config { layer, .. }
            | LayerError::Storage { layer, .. }
            | LayerError::Bind { layer, .. }
            | LayerError::Start { layer, .. } => layer,
        }
    }
}

/// What a layer hands back when it starts.
#[derive(Default)]
pub struct LayerStarted {
    /// Management routes (with their state applied), merged into the management API; the
    /// node's access rules (read-only, bearer token) apply to them too.
    pub routes: Option<axum::Router>,
    /// The layer's sections of the live dashboard (`/dashboard`), shown under their names.
    pub dashboard: Vec<crate::management::DashboardPanel>,
}

/// A layer of the node; see the module docs.
pub trait Layer: Send + 'static {
    /// The layer's name, for logs and errors.
    fn name(&self) -> &'static str;

    /// The top-level configuration sections the layer reads (its [`ConfigSection`]s'
    /// keys); a node refuses to start with a section that neither a built-in layer nor one
    /// of its layers reads (a misspelt `[shardng]`).
    fn config_sections(&self) -> &'static [&'static str] {
        &[]
    }

    /// Registers the layer's protocol(s) before the transport binds.
    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError>;

    /// Starts the layer's driver; called once remoting and membership run.
    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError>;
}

/// Registers `protocol` with `codec` for layer `layer` (its inbound queue holds
/// `settings.inbound_queue_size` batches).
pub fn register_protocol<C: crate::remote::Codec>(
    layer: &'static str,
    registry: &mut ProtocolRegistry,
    settings: &TransportSettings,
    protocol: concord_core::ProtocolId,
    codec: C,
) -> Result<tokio::sync::mpsc::Receiver<crate::remote::Inbound<C::Message>>, LayerError> {
    registry
        .register(protocol, Arc::new(codec), settings.inbound_queue_size)
        .map_err(|e| LayerError::DuplicateProtocol {
            layer,
            protocol: e.0,
        })
}

/// How a layer's host is wired to the node: where its transmits go, where its inbound
/// messages and commands come from, which thread runs it, and what wakes it when an outbound
/// backlog drained. Built with [`HostPorts::new`] and the setters.
pub struct HostPorts<E: LayerEffects> {
    outbound: Box<dyn Outbound<MessageOf<E>>>,
    inbound: tokio::sync::mpsc::Receiver<Inbound<MessageOf<E>>>,
    commands: Option<tokio::sync::mpsc::Receiver<E::Command>>,
    thread: HostThread,
    wake: Option<Arc<tokio::sync::Notify>>,
}

impl<E: LayerEffects> HostPorts<E> {
    /// Ports with `outbound` and `inbound`, no command queue, run as a task, no wake.
    pub fn new(
        outbound: Box<dyn Outbound<MessageOf<E>>>,
        inbound: tokio::sync::mpsc::Receiver<Inbound<MessageOf<E>>>,
    ) -> Self {
        HostPorts {
            outbound,
            inbound,
            commands: None,
            thread: HostThread::Task,
            wake: None,
        }
    }

    /// The queue of the layer's typed commands (from its handles).
    pub fn commands(mut self, commands: tokio::sync::mpsc::Receiver<E::Command>) -> Self {
        self.commands = Some(commands);
        self
    }

    /// The thread the host runs on (default [`HostThread::Task`]).
    pub fn thread(mut self, thread: HostThread) -> Self {
        self.thread = thread;
        self
    }

    /// Notified by an outbound sender whose backlog drained (see
    /// [`crate::runtime::BackloggedOutbound`]).
    pub fn wake(mut self, wake: Arc<tokio::sync::Notify>) -> Self {
        self.wake = Some(wake);
        self
    }
}

impl LayerContext {
    /// The membership feed of a host: this node's membership subscription as
    /// [`MembershipInput`]s (the whole view first and after a lag, then each event with the
    /// view after its batch).
    pub fn membership_feed(&self) -> MembershipFeed {
        let sub = self.cluster.subscribe();
        Box::pin(futures_util::stream::unfold(sub, |mut sub| async move {
            let item = sub.recv().await?;
            let input = match item {
                SubscriptionItem::CurrentClusterState(v) => MembershipInput::CurrentClusterState(v),
                SubscriptionItem::Event(e) => MembershipInput::Event(sub.view().clone(), e),
            };
            Some((input, sub))
        }))
    }

    /// Starts the host of a layer: `machine` and `effects` on this node, wired by `ports`
    /// (the outbound sender, the inbound queue, the layer's command queue, the thread and the
    /// backlog wake, see [`HostPorts`]), fed the membership feed, until the node's membership
    /// ends. The node's coordinated shutdown waits for the host to stop (and drop what it
    /// holds: open stores, running entities) in its last phase, so a node restarted in the
    /// same process finds its files free.
    pub fn start_host<E: LayerEffects>(
        &self,
        machine: E::Machine,
        effects: E,
        ports: HostPorts<E>,
    ) {
        let HostPorts {
            outbound,
            inbound,
            commands,
            thread,
            wake,
        } = ports;
        let host = LayerHost::new(
            machine,
            effects,
            self.cluster.self_unique_address().clone(),
            Arc::new(self.clock),
            Arc::new(TokioSpawner::current()),
            outbound,
        );
        let cluster = self.cluster.clone();
        let channels = HostChannels {
            commands,
            inbound: Some(inbound),
            membership: Some(self.membership_feed()),
            ended: Some(Box::pin(async move {
                cluster.wait_membership_ended().await;
            })),
            wake,
        };
        let name = host.name();
        let stopped = spawn_host(host, self.clock, channels, thread);
        if let Err(e) = self.coordinated_shutdown.add_task(
            crate::coordinated_shutdown::Phase::ActorSystemTerminate,
            format!("{name}-stopped"),
            move || async move {
                let _ = stopped.await;
            },
        ) {
            tracing::warn!(layer = name, error = %e, "cannot wait for the layer's stop in coordinated shutdown");
        }
    }
}
