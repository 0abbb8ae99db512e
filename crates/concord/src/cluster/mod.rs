//! The membership layer of a node: [`Cluster`], the handle an application holds (join,
//! leave, down, the [`MembershipView`], subscriptions), and the daemon that runs the
//! sans-IO [`ClusterCore`] over the transport.
//!
//! It is a layer like the others: it registers [`ProtocolId::MEMBERSHIP`] with its codec,
//! runs its machine on a [`crate::host::LayerHost`] driven by the runtime's one loop
//! (`runtime::drive`) or by the simulator — its effects ([`MembershipEffects`]) turn
//! commands (`command.rs`) into core operations and hand the view, the event batches and
//! the rest of a turn's outputs to the host's sinks (`membership_sinks.rs`; the runtime's
//! in `runtime_sinks.rs`: watch channels, the transport, the coordinated shutdown); the
//! daemon (`daemon.rs`) feeds the transport's quarantine reports in as completions and
//! closes remoting once the host has stopped — and adds its coordinated-shutdown tasks
//! (leave, wait for Exiting, report the exiting tasks done, stop). Layers above read membership from
//! [`Cluster::membership`] (a `watch` of the current view, replaced atomically after each
//! change) or [`Cluster::subscribe`] (events that are never silently lost).
//!
//! ```no_run
//! use concord::{Config, Node, SubscriptionItem};
//! use concord_core::ClusterEvent;
//!
//! # async fn run() -> anyhow::Result<()> {
//! let mut config = Config::default();
//! config.system = "shop".into();
//! config.cluster.seed_nodes = vec!["127.0.0.1:25520".into()];
//! let node = Node::start(config).await?;
//! let mut sub = node.cluster().subscribe();
//! while let Some(item) = sub.recv().await {
//!     match item {
//!         SubscriptionItem::CurrentClusterState(view) => println!("{} members", view.members.len()),
//!         SubscriptionItem::Event(ClusterEvent::MemberUp(m)) => println!("{} is up", m.address()),
//!         _ => {}
//!     }
//! }
//! # Ok(()) }
//! ```

pub mod codec;
pub mod command;
pub mod effects;
pub mod gossip_wire;
pub mod membership_record;
pub mod membership_sinks;

#[cfg(feature = "runtime")]
mod daemon;
#[cfg(feature = "runtime")]
mod handle;
#[cfg(feature = "runtime")]
mod island_report;
#[cfg(feature = "runtime")]
mod runtime_sinks;
#[cfg(feature = "runtime")]
mod shared;
#[cfg(feature = "runtime")]
mod shutdown_tasks;
#[cfg(feature = "runtime")]
mod start;
#[cfg(feature = "runtime")]
mod subscription;

pub use effects::MembershipEffects;
#[cfg(feature = "runtime")]
pub use handle::*;
#[cfg(feature = "runtime")]
pub use island_report::IslandReport;
#[cfg(feature = "runtime")]
pub(crate) use start::{register_protocol, ClusterParts};
