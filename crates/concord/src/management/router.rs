//! The management API's router: every route in one table, the layers' routes merged in,
//! the write guard, and the routes that only hand on (`/metrics`, the bootstrap contact point).

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

use super::access::{self, ManagementAccess};
use super::cluster_routes::{
    delete_member, get_member, get_members, post_members, put_cluster, put_member,
};
use super::domain_events;
use super::health_checks::{alive, ready};
use super::message::message;
use super::state::ManagementState;
use super::testkit_routes::{clear_faults, get_faults, put_fault};

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

async fn seed_nodes(State(s): State<ManagementState>) -> Json<crate::bootstrap::SeedNodesJson> {
    Json(crate::bootstrap::contact_point::seed_nodes_json(
        &s.cluster.self_address().to_string(),
        &s.cluster.view(),
    ))
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
        .with_state(state.clone())
        .merge(super::dashboard::routes(state));
    for e in extra {
        r = r.merge(e);
    }
    let limit = access.max_body_bytes;
    r.fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(access, access::guard))
}
