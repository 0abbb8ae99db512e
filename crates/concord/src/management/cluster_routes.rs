//! The cluster membership routes (Akka Management's `ClusterHttpManagementRoutes`):
//! `/cluster/members` (list, one, join, down, leave) and `PUT /cluster`.

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use concord_core::{Member, MemberStatus, MembershipView};
use serde::Deserialize;
use tracing::info;

use super::members_json::{island_json, member_json, members_json, ClusterMembersJson};
use super::message::message;
use super::request::{decode_path, form_of};
use super::state::ManagementState;
use crate::cluster::ClusterError;

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

/// No member has the address the `{address}` path parameter names (answered 404).
struct UnknownMember(String);

impl UnknownMember {
    fn response(self) -> Response {
        message(
            StatusCode::NOT_FOUND,
            format!("Member [{}] not found", self.0),
        )
    }
}

/// The member that the `{address}` path parameter `raw` names.
fn named_member(v: &MembershipView, raw: &str) -> Result<Member, UnknownMember> {
    let address = decode_path(raw);
    find_member(v, &address).ok_or(UnknownMember(address))
}

pub(super) async fn get_members(State(s): State<ManagementState>) -> Json<ClusterMembersJson> {
    let mut body = members_json(s.cluster.self_address(), &s.cluster.view());
    body.warnings = s.warnings.clone();
    (body.cluster_id, body.other_clusters) = island_json(&s.cluster.island_report());
    Json(body)
}

pub(super) async fn get_member(
    State(s): State<ManagementState>,
    Path(address): Path<String>,
) -> Response {
    match named_member(&s.cluster.view(), &address) {
        Ok(m) => Json(member_json(&m)).into_response(),
        Err(unknown) => unknown.response(),
    }
}

#[derive(Deserialize)]
pub(super) struct OperationForm {
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

pub(super) async fn put_member(
    State(s): State<ManagementState>,
    Path(address): Path<String>,
    form: Result<Form<OperationForm>, FormRejection>,
) -> Response {
    let c = &s.cluster;
    let m = match named_member(&c.view(), &address) {
        Ok(m) => m,
        Err(unknown) => return unknown.response(),
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

pub(super) async fn delete_member(
    State(s): State<ManagementState>,
    Path(address): Path<String>,
) -> Response {
    let c = &s.cluster;
    let m = match named_member(&c.view(), &address) {
        Ok(m) => m,
        Err(unknown) => return unknown.response(),
    };
    let target = m.address().clone();
    match c.leave(target.clone()).await {
        Ok(()) => message(StatusCode::OK, format!("Leaving {target}")),
        Err(e) => command_error(e),
    }
}

#[derive(Deserialize)]
pub(super) struct JoinForm {
    address: Option<String>,
}

pub(super) async fn post_members(
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

pub(super) async fn put_cluster(
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
