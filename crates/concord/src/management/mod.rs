//! Management HTTP API (axum), in Akka Management's routes and JSON shapes:
//!
//! - `GET /cluster/members` → `{"selfNode", "leader"?, "oldest"?, "unreachable": [{"node",
//!   "observedBy"}], "members": [{"node", "nodeUid" (string), "status", "roles"}],
//!   "clusterId"?, "otherClusters"?: [{"clusterId", "reformedFrom"?, "seenVia",
//!   "thisClusterYields"}]}` (the last two Concord-specific: island clusters)
//! - `POST /cluster/members` (form `address`) → join that address
//! - `GET /cluster/members/{address}` → one member, 404 if unknown
//! - `PUT /cluster/members/{address}` (form `operation=Down|Leave`, case-insensitive);
//!   `DELETE /cluster/members/{address}` → leave
//! - `GET /ready` (200 `OK` when this node is Up or WeaklyUp and found no other cluster of
//!   its system name, else 500 with the reason),
//!   `GET /alive`, `GET /metrics` (Prometheus text)
//! - `GET|DELETE /testkit/faults`, `PUT /testkit/faults/{address}` (link fault injection;
//!   403 unless `testkit.fault-injection = true`)
//! - `PUT /cluster` (form `operation=prepare-for-full-shutdown`)
//! - `GET /cluster/domain-events` (Server-Sent Events, optional `type=` filter)
//! - `GET /cluster/shards/{name}` (404 "Shard Region {name} is not started" until a layer —
//!   sharding — registers the route)
//! - `GET /bootstrap/seed-nodes` (the Cluster Bootstrap contact point)
//! - `GET /dashboard` (the live cluster dashboard; its JSON at `GET /dashboard/state`,
//!   its Server-Sent Events at `GET /dashboard/events`; see the `dashboard` module)
//!
//! Layers add their own routes (`LayerStarted::routes`, see the `layer` module); they are merged
//! here. Write routes (everything but GET/HEAD, layers' too) obey [`ManagementAccess`]:
//! read-only (403) and/or a bearer token (401).
//!
//! `{address}` may be the full `concord://system@host:port`, `system@host:port` or
//! `host:port`, percent-encoded or not. Errors are `{"message": "..."}` with 400/404.

mod access;
mod cluster_routes;
mod connection;
mod dashboard;
mod domain_events;
mod health_checks;
mod limits;
mod members_json;
mod message;
mod readiness;
mod request;
mod router;
mod server;
mod state;
mod testkit_routes;

pub use access::{guard, ManagementAccess, VerifiedClientCertificate};
pub use dashboard::{DashboardPanel, PanelFuture, PANEL_TIMEOUT};
pub use domain_events::{event_json, EVENT_TYPES};
pub use limits::{
    descriptor_limit, descriptor_share, raise_descriptor_limit, HttpLimits, LOCAL_RESERVE,
};
pub use members_json::{
    island_json, member_json, members_json, ClusterMemberJson, ClusterMembersJson,
    ClusterUnreachableMemberJson, OtherClusterJson,
};
pub use message::MessageJson;
pub use readiness::{ReadinessCheck, ReadinessChecks};
pub use router::router;
pub(crate) use server::serve_app;
pub use server::{serve, ManagementError};
pub use state::ManagementState;
