//! Reading a management request: the form of a write (bounded by
//! `management.max-body-size`) and the `{address}` path parameter.

use axum::extract::rejection::FormRejection;
use axum::extract::Form;
use axum::http::StatusCode;
use axum::response::Response;

use super::message::message;

/// A request body over `management.max-body-size`.
pub(super) struct BodyTooLarge;

impl BodyTooLarge {
    pub(super) fn response(self) -> Response {
        message(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large (management.max-body-size)",
        )
    }
}

/// The form of a write, `None` if absent or malformed; `Err` when the body is over the
/// limit (answered 413).
pub(super) fn form_of<T>(form: Result<Form<T>, FormRejection>) -> Result<Option<T>, BodyTooLarge> {
    match form {
        Ok(Form(f)) => Ok(Some(f)),
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(BodyTooLarge),
        Err(_) => Ok(None),
    }
}

/// The `{address}` path parameter (already percent-decoded by axum).
pub(super) fn decode_path(raw: &str) -> String {
    raw.trim_start_matches('/').to_string()
}
