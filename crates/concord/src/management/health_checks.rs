//! The health checks (Akka Management's): `GET /ready` and `GET /alive`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use concord_core::MemberStatus;

use super::state::ManagementState;

pub(super) async fn ready(State(s): State<ManagementState>) -> Response {
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
        Some(MemberStatus::Up | MemberStatus::WeaklyUp) => {
            let unmet = s.readiness.unmet();
            if unmet.is_empty() {
                (StatusCode::OK, "OK").into_response()
            } else {
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!(
                        "Not Healthy: readiness checks not met: {}",
                        unmet.join(", ")
                    ),
                )
                    .into_response()
            }
        }
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

pub(super) async fn alive() -> &'static str {
    "OK"
}
