//! The `{"message": ...}` answer of the management routes.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

/// `{"message": ...}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MessageJson {
    /// Human-readable outcome.
    pub message: String,
}

/// A response of `status` with `{"message": msg}`.
pub(super) fn message(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        Json(MessageJson {
            message: msg.into(),
        }),
    )
        .into_response()
}
