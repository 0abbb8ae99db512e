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
//!
//! Layers add their own routes (`LayerStarted::routes`, see the `layer` module); they are merged
//! here. Write routes (everything but GET/HEAD, layers' too) obey [`ManagementAccess`]:
//! read-only (403) and/or a bearer token (401).
//!
//! `{address}` may be the full `concord://system@host:port`, `system@host:port` or
//! `host:port`, percent-encoded or not. Errors are `{"message": "..."}` with 400/404.

mod access;
mod connection;
mod domain_events;
mod limits;
mod server;

use axum::extract::rejection::FormRejection;
use axum::extract::Request;
use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use concord_core::{Address, Member, MemberStatus, MembershipView};
use serde::{Deserialize, Serialize};
use tracing::info;

pub use access::{guard, ManagementAccess, VerifiedClientCertificate};
pub use domain_events::{event_json, EVENT_TYPES};
pub use limits::{
    descriptor_limit, descriptor_share, raise_descriptor_limit, HttpLimits, LOCAL_RESERVE,
};
pub use server::serve;
pub(crate) use server::serve_app;

use crate::cluster::{Cluster, ClusterError};

/// The management API could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind management HTTP to {addr}: {source}")]
pub struct ManagementError {
    /// What we tried to bind.
    pub addr: String,
    /// Why.
    pub source: std::io::Error,
}
use crate::remote::{LinkFaults, Transport};

/// What the management routes act on.
#[derive(Clone)]
pub struct ManagementState {
    /// Membership.
    pub cluster: Cluster,
    /// Remoting (counters for `/metrics`, link faults for `/testkit`).
    pub transport: Transport,
    /// `testkit.fault-injection`: the `/testkit` routes answer only when set.
    pub fault_injection: bool,
    /// Warnings about this node's configuration shown in `GET /cluster/members`
    /// (`warnings`), e.g. remoting exposed without protection (`remote.insecure`).
    pub warnings: Vec<String>,
}

/// `ClusterMember` JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMemberJson {
    /// Full address.
    pub node: String,
    /// Uid, as a string (Akka Management's shape).
    pub node_uid: String,
    /// Status name.
    pub status: String,
    /// Roles, sorted.
    pub roles: Vec<String>,
}

/// `ClusterUnreachableMember` JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUnreachableMemberJson {
    /// Full address.
    pub node: String,
    /// Observers that see it unreachable, sorted.
    pub observed_by: Vec<String>,
}

/// `ClusterMembers` JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMembersJson {
    /// This node.
    pub self_node: String,
    /// Members sorted by `node`.
    pub members: Vec<ClusterMemberJson>,
    /// Unreachable members.
    pub unreachable: Vec<ClusterUnreachableMemberJson>,
    /// Leader, omitted when none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub leader: Option<String>,
    /// Oldest Up member, omitted when none.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub oldest: Option<String>,
    /// Warnings about this node's configuration, omitted when none (e.g.
    /// `remote.insecure`: remoting reachable beyond loopback without TLS or a secret).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub warnings: Vec<String>,
    /// This node's cluster identity (16 hex digits), omitted before it is a member of a
    /// cluster that has one (Concord-specific; docs/MEMBERSHIP.md).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cluster_id: Option<String>,
    /// Other clusters of this system name found through the seed nodes or the bootstrap
    /// contact points (island clusters),
    /// omitted when none. While any is listed, `GET /ready` fails.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub other_clusters: Vec<OtherClusterJson>,
}

/// One other cluster of this system name (`otherClusters` of `GET /cluster/members`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OtherClusterJson {
    /// Its identity, 16 hex digits.
    pub cluster_id: String,
    /// The cluster it was re-formed from, if any.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reformed_from: Option<String>,
    /// The member of it that told this node (`address#uid`).
    pub seen_via: String,
    /// True if this node's cluster proved to be the island (it was re-formed from that
    /// one): with `cluster.island-resolution = rejoin` this node is stopping.
    pub this_cluster_yields: bool,
}

/// `clusterId` and `otherClusters` of `GET /cluster/members` from an island report.
pub fn island_json(r: &crate::cluster::IslandReport) -> (Option<String>, Vec<OtherClusterJson>) {
    (
        r.identity.map(|i| i.id.to_string()),
        r.other_clusters
            .iter()
            .map(|o| OtherClusterJson {
                cluster_id: o.identity.id.to_string(),
                reformed_from: o.identity.reformed_from.map(|c| c.to_string()),
                seen_via: o.seen_via.to_string(),
                this_cluster_yields: o.this_cluster_yields,
            })
            .collect(),
    )
}

/// `{"message": ...}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MessageJson {
    /// Human-readable outcome.
    pub message: String,
}

/// The JSON of one member.
pub fn member_json(m: &Member) -> ClusterMemberJson {
    ClusterMemberJson {
        node: m.address().to_string(),
        node_uid: m.unique_address.uid.to_string(),
        status: m.status.to_string(),
        roles: m.roles.iter().cloned().collect(),
    }
}

/// The `GET /cluster/members` body for a view.
pub fn members_json(self_node: &Address, v: &MembershipView) -> ClusterMembersJson {
    let mut members: Vec<ClusterMemberJson> = v.members.values().map(member_json).collect();
    members.sort_by(|a, b| a.node.cmp(&b.node));
    let mut unreachable: Vec<ClusterUnreachableMemberJson> = v
        .unreachable
        .iter()
        .filter_map(|(node, obs)| {
            let m = v.member(node)?;
            let mut observed_by: Vec<String> = obs.iter().map(|o| o.address.to_string()).collect();
            observed_by.sort();
            Some(ClusterUnreachableMemberJson {
                node: m.address().to_string(),
                observed_by,
            })
        })
        .collect();
    unreachable.sort_by(|a, b| a.node.cmp(&b.node));
    ClusterMembersJson {
        self_node: self_node.to_string(),
        members,
        unreachable,
        leader: v.leader.as_ref().map(|a| a.address.to_string()),
        oldest: v.oldest(None).map(|m| m.address().to_string()),
        warnings: Vec::new(),
        cluster_id: None,
        other_clusters: Vec::new(),
    }
}

/// A request body over `management.max-body-size`.
struct BodyTooLarge;

impl BodyTooLarge {
    fn response(self) -> Response {
        message(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large (management.max-body-size)",
        )
    }
}

/// The form of a write, `None` if absent or malformed; `Err` when the body is over the
/// limit (answered 413).
fn form_of<T>(form: Result<Form<T>, FormRejection>) -> Result<Option<T>, BodyTooLarge> {
    match form {
        Ok(Form(f)) => Ok(Some(f)),
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(BodyTooLarge),
        Err(_) => Ok(None),
    }
}

fn message(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        Json(MessageJson {
            message: msg.into(),
        }),
    )
        .into_response()
}

fn matches_address(m: &Member, given: &str) -> bool {
    let a = m.address();
    let full = a.to_string();
    let no_scheme = full.trim_start_matches("concord://");
    given == full || given == no_scheme || given == a.host_port()
}

fn find_member(v: &MembershipView, given: &str) -> Option<Member> {
    v.members
        .values()
        .find(|m| matches_address(m, given))
        .cloned()
}

/// The `{address}` path parameter (already percent-decoded by axum).
fn decode_path(raw: &str) -> String {
    raw.trim_start_matches('/').to_string()
}

async fn get_members(State(s): State<ManagementState>) -> Json<ClusterMembersJson> {
    let mut body = members_json(s.cluster.self_address(), &s.cluster.view());
    body.warnings = s.warnings.clone();
    (body.cluster_id, body.other_clusters) = island_json(&s.cluster.island_report());
    Json(body)
}

async fn get_member(State(s): State<ManagementState>, Path(address): Path<String>) -> Response {
    let address = decode_path(&address);
    match find_member(&s.cluster.view(), &address) {
        Some(m) => Json(member_json(&m)).into_response(),
        None => message(
            StatusCode::NOT_FOUND,
            format!("Member [{address}] not found"),
        ),
    }
}

#[derive(Deserialize)]
struct OperationForm {
    operation: Option<String>,
}

fn command_error(e: ClusterError) -> Response {
    match e {
        ClusterError::Command(concord_core::CommandError::UnknownMember(a)) => {
            message(StatusCode::NOT_FOUND, format!("Member [{a}] not found"))
        }
        ClusterError::Command(e) => message(StatusCode::BAD_REQUEST, e.to_string()),
        other => message(StatusCode::SERVICE_UNAVAILABLE, other.to_string()),
    }
}

async fn put_member(
    State(s): State<ManagementState>,
    Path(address): Path<String>,
    form: Result<Form<OperationForm>, FormRejection>,
) -> Response {
    let c = &s.cluster;
    let address = decode_path(&address);
    let Some(m) = find_member(&c.view(), &address) else {
        return message(
            StatusCode::NOT_FOUND,
            format!("Member [{address}] not found"),
        );
    };
    let op = match form_of(form) {
        Ok(f) => f.and_then(|f| f.operation).unwrap_or_default(),
        Err(too_large) => return too_large.response(),
    };
    let target = m.address().clone();
    match op.to_ascii_lowercase().as_str() {
        "down" => match c.down(target.clone()).await {
            Ok(()) => {
                info!(member = %target, "down requested through the management API");
                message(StatusCode::OK, format!("Downing {target}"))
            }
            Err(e) => command_error(e),
        },
        "leave" => match c.leave(target.clone()).await {
            Ok(()) => {
                info!(member = %target, "leave requested through the management API");
                message(StatusCode::OK, format!("Leaving {target}"))
            }
            Err(e) => command_error(e),
        },
        _ => message(StatusCode::BAD_REQUEST, "Operation not supported"),
    }
}

async fn delete_member(State(s): State<ManagementState>, Path(address): Path<String>) -> Response {
    let c = &s.cluster;
    let address = decode_path(&address);
    let Some(m) = find_member(&c.view(), &address) else {
        return message(
            StatusCode::NOT_FOUND,
            format!("Member [{address}] not found"),
        );
    };
    let target = m.address().clone();
    match c.leave(target.clone()).await {
        Ok(()) => message(StatusCode::OK, format!("Leaving {target}")),
        Err(e) => command_error(e),
    }
}

#[derive(Deserialize)]
struct JoinForm {
    address: Option<String>,
}

async fn post_members(
    State(s): State<ManagementState>,
    form: Result<Form<JoinForm>, FormRejection>,
) -> Response {
    let c = &s.cluster;
    let raw = match form_of(form) {
        Ok(f) => f.and_then(|f| f.address),
        Err(too_large) => return too_large.response(),
    };
    let Some(raw) = raw else {
        return message(StatusCode::BAD_REQUEST, "missing form field `address`");
    };

    let address = match crate::config::parse_node_address(&raw, &c.self_address().system) {
        Ok(a) => a,
        Err(e) => return message(StatusCode::BAD_REQUEST, e),
    };
    if let Some(me) = c.view().self_member() {
        if me.status != MemberStatus::Removed {
            return message(
                StatusCode::CONFLICT,
                format!(
                    "this node is already a member of a cluster ({}); a node joins once",
                    me.status
                ),
            );
        }
    }
    match c.join(address.clone()).await {
        Ok(()) => message(StatusCode::OK, format!("Joining {address}")),
        Err(e) => command_error(e),
    }
}

async fn ready(State(s): State<ManagementState>) -> Response {
    let c = &s.cluster;
    if let Some(reason) = c.shutdown_reason() {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Not Healthy: shutting down ({reason:?})"),
        )
            .into_response();
    }
    let islands = c.island_report();
    if let Some(o) = islands.other_clusters.first() {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "Not Healthy: another cluster of this system name was found ({} via {}; this cluster {}), see GET /cluster/members otherClusters",
                o.identity,
                o.seen_via,
                islands.identity.map(|i| i.to_string()).unwrap_or_default()
            ),
        )
            .into_response();
    }
    match c.view().self_member().map(|m| m.status) {
        Some(MemberStatus::Up | MemberStatus::WeaklyUp) => (StatusCode::OK, "OK").into_response(),
        Some(st) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Not Healthy: member status is {st}, not Up or WeaklyUp"),
        )
            .into_response(),
        None => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "Not Healthy: not a member of a cluster yet",
        )
            .into_response(),
    }
}

async fn alive() -> &'static str {
    "OK"
}

async fn metrics_text(State(s): State<ManagementState>) -> Response {
    crate::metrics::record_transport(s.cluster.self_address(), s.transport.stats());
    let (open, cap) = s.transport.inbound_connections();
    crate::metrics::record_connections(
        s.cluster.self_address(),
        open,
        cap,
        s.transport.settings().tls.as_deref().map(|t| &t.stats),
    );
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        crate::metrics::render(),
    )
        .into_response()
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct FaultForm {
    /// `both`, `out`, `in` or `none`.
    blackhole: Option<String>,
    drop_probability: Option<f64>,
    delay: Option<String>,
}

#[derive(Serialize)]
struct FaultJson {
    peer: String,
    #[serde(flatten)]
    faults: LinkFaults,
}

fn fault_injection_disabled() -> Response {
    message(
        StatusCode::FORBIDDEN,
        "fault injection is disabled; set `testkit.fault-injection = true` to use /testkit routes",
    )
}

async fn get_faults(State(s): State<ManagementState>) -> Response {
    if !s.fault_injection {
        return fault_injection_disabled();
    }
    let list: Vec<FaultJson> = s
        .transport
        .all_faults()
        .into_iter()
        .map(|(a, f)| FaultJson {
            peer: a.to_string(),
            faults: f,
        })
        .collect();
    Json(list).into_response()
}

async fn clear_faults(State(s): State<ManagementState>) -> Response {
    if !s.fault_injection {
        return fault_injection_disabled();
    }
    s.transport.clear_faults();
    message(StatusCode::OK, "All injected faults cleared")
}

/// `PUT /testkit/faults/{address}` with form fields `blackhole=both|out|in|none`,
/// `drop-probability=0..1`, `delay=100ms`. Only with `testkit.fault-injection = true`.
async fn put_fault(
    State(s): State<ManagementState>,
    Path(address): Path<String>,
    form: Result<Form<FaultForm>, FormRejection>,
) -> Response {
    if !s.fault_injection {
        return fault_injection_disabled();
    }
    let system = &s.cluster.self_address().system;
    let peer = match crate::config::parse_node_address(&decode_path(&address), system) {
        Ok(a) => a,
        Err(e) => return message(StatusCode::BAD_REQUEST, e),
    };
    let f = match form_of(form) {
        Ok(Some(f)) => f,
        Ok(None) => {
            return message(
                StatusCode::BAD_REQUEST,
                "expected form fields blackhole, drop-probability, delay",
            )
        }
        Err(too_large) => return too_large.response(),
    };
    let mut faults = LinkFaults::default();
    match f
        .blackhole
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("none") => {}
        Some("both") => {
            faults.blackhole_inbound = true;
            faults.blackhole_outbound = true;
        }
        Some("out") => faults.blackhole_outbound = true,
        Some("in") => faults.blackhole_inbound = true,
        Some(other) => {
            return message(
                StatusCode::BAD_REQUEST,
                format!("blackhole must be both, out, in or none, not `{other}`"),
            )
        }
    }
    if let Some(p) = f.drop_probability {
        if !(0.0..=1.0).contains(&p) {
            return message(
                StatusCode::BAD_REQUEST,
                "drop-probability must be between 0 and 1",
            );
        }
        faults.drop_probability = p;
    }
    if let Some(d) = f.delay {
        match humantime::parse_duration(&d) {
            Ok(d) => faults.delay_ms = d.as_millis() as u64,
            Err(e) => return message(StatusCode::BAD_REQUEST, format!("delay `{d}`: {e}")),
        }
    }
    s.transport.set_faults(peer.clone(), faults);
    message(StatusCode::OK, format!("Faults set for {peer}"))
}

async fn seed_nodes(State(s): State<ManagementState>) -> Json<crate::bootstrap::SeedNodesJson> {
    Json(crate::bootstrap::contact_point::seed_nodes_json(
        &s.cluster.self_address().to_string(),
        &s.cluster.view(),
    ))
}

async fn put_cluster(
    State(s): State<ManagementState>,
    form: Result<Form<OperationForm>, FormRejection>,
) -> Response {
    let c = &s.cluster;
    let op = match form_of(form) {
        Ok(f) => f.and_then(|f| f.operation).unwrap_or_default(),
        Err(too_large) => return too_large.response(),
    };
    if !op.eq_ignore_ascii_case("prepare-for-full-shutdown") {
        return message(
            StatusCode::BAD_REQUEST,
            "Operation not supported (expected operation=prepare-for-full-shutdown)",
        );
    }
    match c.prepare_for_full_cluster_shutdown().await {
        Ok(()) => {
            info!("full cluster shutdown prepared through the management API");
            message(StatusCode::OK, "Preparing for full cluster shutdown")
        }
        Err(e) => command_error(e),
    }
}

/// Unknown routes: 404, and for `/cluster/shards/{name}` Akka Management's answer while no
/// layer (sharding) has registered that route.
async fn not_found(req: Request) -> Response {
    match req.uri().path().strip_prefix("/cluster/shards/") {
        Some(name) if !name.is_empty() && !name.contains('/') => message(
            StatusCode::NOT_FOUND,
            format!("Shard Region {name} is not started"),
        ),
        _ => message(StatusCode::NOT_FOUND, "no such route"),
    }
}

/// The management routes, plus the layers' `extra` routes, write routes guarded by `access`.
///
/// Panics if a layer registers a route the management API already has (a programming
/// error, found when the node starts).
pub fn router(state: ManagementState, access: ManagementAccess, extra: Vec<Router>) -> Router {
    let mut r = Router::new()
        .route("/cluster", axum::routing::put(put_cluster))
        .route("/cluster/domain-events", get(domain_events::domain_events))
        .route("/bootstrap/seed-nodes", get(seed_nodes))
        .route("/cluster/members", get(get_members).post(post_members))
        .route("/cluster/members/", get(get_members).post(post_members))
        .route(
            "/cluster/members/{*address}",
            get(get_member).put(put_member).delete(delete_member),
        )
        .route("/ready", get(ready))
        .route("/alive", get(alive))
        .route("/metrics", get(metrics_text))
        .route("/testkit/faults", get(get_faults).delete(clear_faults))
        .route("/testkit/faults/{*address}", axum::routing::put(put_fault))
        .with_state(state);
    for e in extra {
        r = r.merge(e);
    }
    let limit = access.max_body_bytes;
    r.fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(access, access::guard))
}
