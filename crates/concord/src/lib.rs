//! # concord
//!
//! The Concord runtime: drives the sans-IO [`concord_core`] protocol machines over real TCP
//! with tokio, and serves the management HTTP API.
//!
//! ## Layers (DESIGN.md §1)
//!
//! ```text
//!   concord (binary)     CLI: node, demo, members, join, leave, down, bench
//!   node                 the node composition: remoting + membership + management +
//!        |               bootstrap + the layers an application adds; nothing imports it
//!   layers               each a driver task around a concord-core machine, its codec, its
//!        |               management routes, metrics and coordinated-shutdown tasks (layer)
//!   cluster              membership daemon; publishes the MembershipView (watch) and
//!        |               events (lossless subscription)
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
//! A layer (singleton, distributed data, sharding, an application's own protocol) plugs in
//! the same way membership does; it never reaches into another layer's internals.
//!
//! 1. **The protocol machine**, in `concord-core`: implement
//!    [`concord_core::ProtocolMachine`] — `handle_message(now, from, msg)`,
//!    `handle_membership(now, &view, change)`, `handle_timeout(now)`, and the polled
//!    outputs `poll_transmit`, `poll_event`, `poll_timeout` — with its timers in a
//!    [`concord_core::timers::TimerTable`]. Give it a [`concord_core::ProtocolId`] and put
//!    each transmit on a [`concord_core::Lane`] (ordinary for layer traffic; the transport
//!    moves frames above `maximum-frame-size` to the large lane by itself). Test it in the
//!    simulator: `concord_sim::Simulation::add_protocol` hosts it on every simulated node,
//!    routed by protocol id, fed the membership view and events.
//! 2. **The codec**: implement [`remote::Codec`] — a manifest (message type number) and
//!    bytes per message; `decode` returns [`remote::DecodeError::UnknownManifest`] for a
//!    type it does not know (the transport counts and drops it, the connection stays) and
//!    never panics on any input.
//! 3. **The layer**: implement [`layer::Layer`]. In `register`, call
//!    [`remote::ProtocolRegistry::register`] with the protocol id and codec and keep the
//!    returned queue of [`remote::Inbound`] messages. In `start`, with the
//!    [`layer::LayerContext`], build a [`remote::ProtocolSender`] for the protocol, spawn the
//!    driver task — a `select!` loop over the inbound queue, a
//!    [`cluster::Cluster::subscribe`] subscription (feed each
//!    [`cluster::SubscriptionItem`] to `handle_membership`), the machine's next deadline and
//!    the layer's own commands; after each input send `poll_transmit` through the sender
//!    and deliver `poll_event` — add hand-over tasks to the
//!    [`coordinated_shutdown::CoordinatedShutdown`] (e.g. `cluster-exiting` for a
//!    singleton, `cluster-sharding-shutdown-region` for sharding; remoting stays up until
//!    `cluster-shutdown`), and return the layer's management routes (an `axum::Router`
//!    with its state applied; `/cluster/shards/{name}` is free for sharding).
//! 4. **Register it** in the node composition: `Node::builder(config).layer(MyLayer::new())`.
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
//! - [`bench`](mod@bench): `concord bench remote`, messaging throughput against raw TCP.
//! - [`client`] and [`demo`]: what the `concord` CLI uses.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
pub mod bootstrap;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod coordinated_shutdown;
pub mod ddata;
pub mod demo;
pub mod discovery;
pub mod kv;
pub mod layer;
pub mod lease;
pub mod management;
pub mod metrics;
pub mod node;
pub mod remote;
pub mod sample;
pub mod sharding;
pub mod singleton;
pub mod tls;

pub use cluster::{Cluster, ClusterError, Subscription, SubscriptionItem};
pub use concord_core;
pub use config::{Config, ConfigError};
pub use coordinated_shutdown::{CoordinatedShutdown, Phase};
pub use node::{Node, NodeBuilder, NodeError};
