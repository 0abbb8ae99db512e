//! The link fault injection routes: `GET|DELETE /testkit/faults` and
//! `PUT /testkit/faults/{address}` (only with `testkit.fault-injection = true`).

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::message::message;
use super::request::{decode_path, form_of};
use super::state::ManagementState;
use crate::remote::LinkFaults;

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) struct FaultForm {
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

pub(super) async fn get_faults(State(s): State<ManagementState>) -> Response {
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

pub(super) async fn clear_faults(State(s): State<ManagementState>) -> Response {
    if !s.fault_injection {
        return fault_injection_disabled();
    }
    s.transport.clear_faults();
    message(StatusCode::OK, "All injected faults cleared")
}

/// `PUT /testkit/faults/{address}` with form fields `blackhole=both|out|in|none`,
/// `drop-probability=0..1`, `delay=100ms`. Only with `testkit.fault-injection = true`.
pub(super) async fn put_fault(
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
