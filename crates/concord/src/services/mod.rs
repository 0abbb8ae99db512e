//! Partitioned services (the original spec's "Partitioning", which Akka never built): a
//! service is registered on the nodes that may host it with a path, a factory and an
//! instance policy (a fixed N, or a fault-tolerance function with scaling bounds); the
//! leader places its instances round the ring, gossips the partition table with its
//! pending changes, and moves instances by the spec's graceful handoff, keeping each
//! sending node's order; a [`ServiceRef`] routes to the instances (round robin, random,
//! consistent hashing, adaptive to cluster metrics, broadcast). docs/SERVICES.md.
//!
//! The protocol is [`concord_core::services::ServicesMachine`]. Prometheus:
//! - `concord_services_sent_total{node}`, `concord_services_delivered_total{node}`,
//!   `concord_services_forwarded_total{node}` — service messages
//! - `concord_services_dropped_total{node,reason}` — `no-instance`, `buffer-full`,
//!   `from-stranger`, `unregistered`, `too-many-hops`, `state-too-large`, `mailbox-full`
//! - `concord_services_undecodable_total{node}` — messages that did not decode for their
//!   service's type (dropped)
//! - `concord_services_handoffs_total{node}` — handoffs this node completed as the
//!   previous host; `concord_services_released_by_timeout_total{node}` — messages held for
//!   order released by the timeout
//! - `concord_services_instances{node}`, `concord_services_buffered{node}`,
//!   `concord_services_table_version{node}` — gauges

pub mod codec;
mod config;
mod effects;
mod handle;
mod instance;
mod layer;
pub mod routes;

pub use concord_core::services::{
    FaultTolerance, InstancePolicy, PartitionPath, RoutingLogic, ScalingBounds,
};
pub use config::{Placement, ServicesConfig};
pub use handle::{
    PartitionedServices, Service, ServiceContext, ServiceRef, ServicesError, ServicesSnapshot,
};
pub use layer::ServicesLayer;
