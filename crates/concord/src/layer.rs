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
        .map_err(|e| LayerError {
            layer,
            message: e.to_string(),
        })
}

/// One input of a layer's driver task (see [`DriverInputs`]).
pub enum DriverInput<J, M> {
    /// The node is gone (membership ended) or every handle was dropped: stop.
    Stop,
    /// A job from a handle.
    Job(J),
    /// Messages of the layer's protocol from one peer.
    Inbound(crate::remote::Inbound<M>),
    /// A new membership view.
    View(Arc<concord_core::MembershipView>),
    /// The machine's deadline passed.
    Timeout,
    /// The periodic tick (metrics, housekeeping).
    Tick,
}

/// What a layer's driver task waits on: jobs from its handles, its protocol's inbound
/// messages, membership views, its machine's next deadline and a periodic tick; ends
/// when the node's membership has ended.
pub struct DriverInputs<J, M> {
    jobs: tokio::sync::mpsc::Receiver<J>,
    inbound: tokio::sync::mpsc::Receiver<crate::remote::Inbound<M>>,
    views: tokio::sync::watch::Receiver<Arc<concord_core::MembershipView>>,
    cluster: Cluster,
    tick: tokio::time::Interval,
    /// Which of jobs and inbound messages goes first in the next wait.
    jobs_first: bool,
}

impl<J, M> DriverInputs<J, M> {
    /// Inputs from these channels; `tick` is the housekeeping period.
    pub fn new(
        jobs: tokio::sync::mpsc::Receiver<J>,
        inbound: tokio::sync::mpsc::Receiver<crate::remote::Inbound<M>>,
        cluster: Cluster,
        tick: std::time::Duration,
    ) -> Self {
        let mut tick = tokio::time::interval(tick);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        DriverInputs {
            jobs,
            inbound,
            views: cluster.membership(),
            cluster,
            tick,
            jobs_first: false,
        }
    }

    /// The current membership view (marked seen).
    pub fn view(&mut self) -> Arc<concord_core::MembershipView> {
        self.views.borrow_and_update().clone()
    }

    /// The next input; `deadline` is the machine's next timer (a tokio instant).
    pub async fn next(&mut self, deadline: Option<tokio::time::Instant>) -> DriverInput<J, M> {
        self.next_gated(deadline, true).await
    }

    /// Like [`DriverInputs::next`], taking no job while `accept_jobs` is false (a driver
    /// that applies backpressure to its handles while its outbound backlog drains; inbound
    /// messages, views and timers still come). Cancel-safe.
    pub async fn next_gated(
        &mut self,
        deadline: Option<tokio::time::Instant>,
        accept_jobs: bool,
    ) -> DriverInput<J, M> {
        // The end of membership first; then jobs and inbound messages in turn (under load
        // neither the handles' jobs nor the peers' messages — the answers to those jobs
        // among them — may starve the other).
        self.jobs_first = !self.jobs_first;
        macro_rules! wait {
            ($first:ident = $first_fut:expr => $first_out:expr, $second:ident = $second_fut:expr => $second_out:expr) => {
                tokio::select! {
                    biased;
                    _ = self.cluster.wait_membership_ended() => DriverInput::Stop,
                    $first = $first_fut => { $first_out },
                    $second = $second_fut => { $second_out },
                    changed = self.views.changed() => match changed {
                        Ok(()) => DriverInput::View(self.views.borrow_and_update().clone()),
                        Err(_) => DriverInput::Stop,
                    },
                    _ = crate::clock::sleep_until(deadline) => DriverInput::Timeout,
                    _ = self.tick.tick() => DriverInput::Tick,
                }
            };
        }
        let jobs_rx = &mut self.jobs;
        let jobs = async move {
            if accept_jobs {
                jobs_rx.recv().await
            } else {
                std::future::pending().await
            }
        };
        let inbound = self.inbound.recv();
        if self.jobs_first {
            wait!(job = jobs => job.map_or(DriverInput::Stop, DriverInput::Job),
                  batch = inbound => batch.map_or(DriverInput::Stop, DriverInput::Inbound))
        } else {
            wait!(batch = inbound => batch.map_or(DriverInput::Stop, DriverInput::Inbound),
                  job = jobs => job.map_or(DriverInput::Stop, DriverInput::Job))
        }
    }
}
