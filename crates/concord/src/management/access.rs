//! Who may use the write routes (Akka Management's `route-providers-read-only` and its
//! bearer-token authentication): every request other than GET/HEAD is a write.
//!
//! - read-only: writes are refused with 403;
//! - bearer token: writes without `Authorization: Bearer <token>` are refused with 401.
//!
//! Reads — including the bootstrap contact point `GET /bootstrap/seed-nodes`, `/ready`,
//! `/alive` and `/metrics` — are always served.

use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::message;

/// Access policy of the write routes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagementAccess {
    /// Refuse all writes.
    pub read_only: bool,
    /// Writes need this bearer token.
    pub bearer_token: Option<String>,
}

impl ManagementAccess {
    /// From `[management]` (see [`crate::config::ManagementConfig::effective_read_only`]).
    pub fn from_config(c: &crate::config::ManagementConfig) -> Self {
        ManagementAccess {
            read_only: c.effective_read_only(),
            bearer_token: c.bearer_token.clone().filter(|t| !t.is_empty()),
        }
    }
}

/// Constant-time comparison (the token is a secret).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Middleware enforcing [`ManagementAccess`].
pub async fn guard(State(access): State<ManagementAccess>, req: Request, next: Next) -> Response {
    if req.method() == Method::GET || req.method() == Method::HEAD {
        return next.run(req).await;
    }
    if access.read_only {
        return message(
            StatusCode::FORBIDDEN,
            "the management API is read-only (management.read-only)",
        );
    }
    if let Some(token) = &access.bearer_token {
        let given = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if !same(given.as_bytes(), token.as_bytes()) {
            let mut r = message(
                StatusCode::UNAUTHORIZED,
                "this route needs `Authorization: Bearer <management.bearer-token>`",
            );
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return r;
        }
    }
    next.run(req).await
}
