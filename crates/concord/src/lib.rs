//! # concord
//!
//! The Concord runtime: drives the sans-IO [`concord_core`] protocol machines over real TCP
//! with tokio, and serves the management HTTP API.
//!
//! ## Layers (DESIGN.md §1)
//!
//! ```text
//!   concord (binary)     CLI: node, demo, members, join, leave, down, kv, certs, bench;
//!        |               not part of this library (src/bin/concord/)
//!   node                 the node composition: remoting + membership + management +
//!        |               bootstrap + the layers an application adds; nothing imports it
//!   layers               each a host (host, on runtime::drive) around a concord-core
//!        |               machine, its codec, its management routes, metrics and
//!        |               coordinated-shutdown tasks (layer)
//!   cluster              membership: ClusterCore on the same host and loop; publishes the
//!        |               MembershipView (watch) and events (lossless subscription)
//!   management, bootstrap  operate a node through Cluster and Transport
//!   remote               lanes (control | ordinary | large) per peer, handshake, envelope
//!        |               demux by protocol id, quarantine, fault injection
//!   coordinated_shutdown, config, metrics, lease, clock   leaves used by the above
//!   concord-core         sans-IO machines, all with the same verbs
//! ```
//!
//! Arrows point down only: `cluster` never imports `management`, `bootstrap` or `node`.
//!
//! ## Adding a layer
//!
//! A layer (singleton, distributed data, sharding, an application's own protocol) is four
//! parts and one registration line; it never reaches into another layer's internals, and
//! the same host runs it in the tokio runtime and in the simulator.
//!
//! 1. **The machine**, sans-IO: implement [`concord_core::ProtocolMachine`] —
//!    `handle_message(now, from, msg)`, `handle_membership(now, &view, change)`,
//!    `handle_timeout(now)`, and the polled outputs `poll_transmit`, `poll_event`,
//!    `poll_timeout` — with its timers in a [`concord_core::timers::TimerTable`], a
//!    [`concord_core::ProtocolId`] (applications from 1000) and each transmit on a
//!    [`concord_core::Lane`]. Every protocol decision lives here.
//! 2. **The codec**: implement [`remote::Codec`] — a manifest and bytes per message;
//!    `decode` answers [`remote::DecodeError::UnknownManifest`] for a type it does not know
//!    (counted and dropped, the connection stays) and never panics on any input.
//! 3. **The effects**: implement [`host::LayerEffects`] — the typed command its handles
//!    send (each carrying its reply channel), what each event of the machine does, and what
//!    its background work (started with [`host::Effects::spawn`]) reports back. The
//!    [`host::LayerHost`] owns the rest: the node's clock, the membership feed, deadlines,
//!    the periodic tick, batching and sending.
//! 4. **The runtime glue**: implement [`layer::Layer`] — register the protocol and codec
//!    before remoting binds ([`layer::register_protocol`]), then in `start` hand the machine,
//!    effects and an outbound sender to [`layer::LayerContext::start_host`], add hand-over
//!    tasks to the [`coordinated_shutdown::CoordinatedShutdown`] and return management
//!    routes. A layer with settings of its own gives them a section type in its folder
//!    (implement [`config::ConfigSection`]: a top-level key, serde, defaults, checks), reads
//!    it in `start` with [`layer::LayerContext::section`] and names its key in
//!    [`layer::Layer::config_sections`].
//! 5. **Register it**: `Node::builder(config).layer(MyLayer::new())`.
//!
//! The whole of a minimal layer — ping, measuring round trips to every member — is this
//! file (`examples/ping_layer.rs`; `concord-sim`'s `tests/example_layer.rs` hosts it on
//! simulated nodes):
//!
//! ```rust
#![doc = include_str!("../examples/ping_layer.rs")]
//! ```
//!
//! and its runtime glue:
//!
//! ```rust,no_run
//! # mod ping {
//! # include!(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/ping_layer.rs"));
//! use std::sync::Arc;
//! use concord::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
//! use concord::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};
//! use concord::runtime::LaneOutbound;
//! use concord::host::Clock;
//! use tokio::sync::mpsc;
//!
//! pub struct PingLayer {
//!     commands: mpsc::Receiver<PingCommand>,
//!     inbound: Option<mpsc::Receiver<Inbound<PingMessage>>>,
//! }
//!
//! impl Layer for PingLayer {
//!     fn name(&self) -> &'static str {
//!         "ping"
//!     }
//!
//!     fn register(
//!         &mut self,
//!         registry: &mut ProtocolRegistry,
//!         settings: &TransportSettings,
//!     ) -> Result<(), LayerError> {
//!         self.inbound = Some(register_protocol("ping", registry, settings, PING, PingCodec)?);
//!         Ok(())
//!     }
//!
//!     fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
//!         let inbound = self.inbound.expect("registered before it starts");
//!         let me = ctx.cluster.self_unique_address().clone();
//!         let machine = PingMachine::new(me, 1_000, ctx.clock.now_ms());
//!         let sender = ProtocolSender::new(ctx.transport.clone(), PING, Arc::new(PingCodec));
//!         let ports = HostPorts::new(Box::new(LaneOutbound::new(sender)), inbound)
//!             .commands(self.commands);
//!         ctx.start_host(machine, PingEffects::default(), ports);
//!         Ok(LayerStarted::default())
//!     }
//! }
//! # }
//! ```
//!
//! Metrics of the layer's messages are counted per protocol by the transport
//! (`concord_remote_messages_sent_total{protocol=...}` and friends); the layer records its
//! own with the `metrics` facade and a `node` label.
//!
//! ## Modules
//!
//! - [`node`]: [`Node`] and [`NodeBuilder`], what an application starts.
//! - [`cluster`]: [`Cluster`], the membership handle (join, leave, down, the view, events).
//! - [`layer`]: the extension point above.
//! - [`remote`]: lanes, envelopes, the protocol registry, the transport.
//! - [`coordinated_shutdown`]: Akka's phases, their timeouts and tasks.
//! - [`management`]: the HTTP API in Akka Management's shapes.
//! - [`config`]: the TOML configuration, environment and flag overrides.
//! - [`bootstrap`] and [`discovery`]: Cluster Bootstrap from service discovery.
//! - [`tls`]: certificates and rustls configurations for remoting and the management API.
//!
//! The library is the runtime only. The `concord` binary (`src/bin/concord/`) holds the
//! command line, the HTTP clients of the management and key-value APIs, the demo, the
//! benchmarks (`concord bench ...`) and the sample application (`concord node --sample`);
//! it uses this crate through its public API.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "runtime")]
pub mod bootstrap;
#[cfg(feature = "runtime")]
pub mod clock;
pub mod cluster;
#[cfg(feature = "runtime")]
pub mod cluster_metrics;
#[cfg(feature = "runtime")]
pub mod config;
#[cfg(feature = "runtime")]
pub mod coordinated_shutdown;
pub mod ddata;
pub mod delivery;
#[cfg(feature = "runtime")]
pub mod discovery;
pub mod host;
pub mod kv;
#[cfg(feature = "runtime")]
pub mod layer;
pub mod lease;
pub mod load;
#[cfg(feature = "runtime")]
pub mod management;
#[cfg(feature = "runtime")]
pub mod metrics;
#[cfg(feature = "runtime")]
pub mod node;
#[cfg(feature = "runtime")]
pub mod persistence;
#[cfg(feature = "runtime")]
pub mod pubsub;
#[cfg(feature = "runtime")]
pub mod receptionist;
pub mod remote;
#[cfg(feature = "runtime")]
pub mod runtime;
#[cfg(feature = "runtime")]
pub mod services;
pub mod sharding;
pub mod singleton;
#[cfg(feature = "runtime")]
pub mod telemetry;
#[cfg(feature = "runtime")]
pub mod tls;
#[cfg(test)]
mod wire_corpus;

#[cfg(feature = "runtime")]
pub use cluster::{Cluster, ClusterError, Subscription, SubscriptionItem};
pub use concord_core;
#[cfg(feature = "runtime")]
pub use config::{Config, ConfigError};
#[cfg(feature = "runtime")]
pub use coordinated_shutdown::{CoordinatedShutdown, Phase};
#[cfg(feature = "runtime")]
pub use node::{Node, NodeBuilder, NodeError};
