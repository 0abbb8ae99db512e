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
//!    spawns its driver task (a loop like the membership daemon: inbound messages,
//!    membership changes and timers into its sans-IO machine; transmits and events out),
//!    and returns its management routes, which are merged into the management API.
//!
//! Metrics of its messages are counted per protocol by the transport; the layer adds its
//! own through the `metrics` facade with a `node` label.

use std::sync::Arc;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::coordinated_shutdown::CoordinatedShutdown;
use crate::remote::{ProtocolRegistry, Transport, TransportSettings};

/// What a started layer has access to.
#[derive(Clone)]
pub struct LayerContext {
    /// Membership: the view, events, this node's address.
    pub cluster: Cluster,
    /// Remoting: send this layer's protocol messages.
    pub transport: Transport,
    /// The node's coordinated shutdown: add hand-over tasks.
    pub coordinated_shutdown: CoordinatedShutdown,
    /// The node's configuration.
    pub config: Arc<Config>,
}

/// A layer's failure to register or start; the node does not start.
#[derive(Debug, thiserror::Error)]
#[error("layer `{layer}`: {message}")]
pub struct LayerError {
    /// The layer's name.
    pub layer: &'static str,
    /// What went wrong.
    pub message: String,
}

/// What a layer hands back when it starts.
#[derive(Default)]
pub struct LayerStarted {
    /// Management routes (with their state applied), merged into the management API; the
    /// node's access rules (read-only, bearer token) apply to them too.
    pub routes: Option<axum::Router>,
}

/// A layer of the node; see the module docs.
pub trait Layer: Send + 'static {
    /// The layer's name, for logs and errors.
    fn name(&self) -> &'static str;

    /// Registers the layer's protocol(s) before the transport binds.
    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError>;

    /// Starts the layer's driver; called once remoting and membership run.
    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError>;
}
