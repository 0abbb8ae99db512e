//! The receptionist (Akka's typed `Receptionist`): register a handle under a typed
//! [`ServiceKey`] on any node; find and follow the handles of a key cluster-wide; send them
//! messages. Registrations are replicated with Distributed Data (one `ORSet` per key);
//! those of a node that left are removed by the leader. Distributed pub-sub
//! ([`crate::pubsub`]) is built on it. docs/SERVICES.md.
//!
//! The pure parts — keys, instances, listings, pruning, the message routing — are in
//! [`concord_core::receptionist`]. Prometheus:
//! - `concord_receptionist_registrations{node}` — handles registered here (gauge)
//! - `concord_receptionist_sent_total{node}`, `concord_receptionist_delivered_total{node}`
//! - `concord_receptionist_dropped_total{node,reason}` — `not-a-member`, `no-such-handle`,
//!   `from-stranger`, `mailbox-full`
//! - `concord_receptionist_undecodable_total{node}` — messages that did not decode for
//!   their handle's type (dropped)
//! - `concord_receptionist_pruned_total{node}` — registrations of departed nodes removed
//! - `concord_receptionist_mailbox_bytes{node}` — bytes waiting in this node's mailboxes
//!   (gauge; at most `receptionist.max-mailbox-bytes`)
//! - `concord_pubsub_published_total{node}`, `concord_pubsub_dropped_total{node,reason}`

pub mod codec;
mod config;
mod effects;
pub(crate) mod handle;
mod layer;
mod router;
pub mod routes;

pub use concord_core::receptionist::{Listing, ServiceInstance};
pub use concord_core::services::RoutingLogic;
pub use config::{PubSubConfig, ReceptionistConfig};
pub use handle::{ListingSubscription, Receptionist, ReceptionistError, Registration, ServiceKey};
pub use layer::ReceptionistLayer;
pub use router::ServiceRouter;
