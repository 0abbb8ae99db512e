//! The key-value store's HTTP API (Riak KV's HTTP API is the model), on its own port
//! (`kv.http-port`):
//!
//! - `PUT /kv/{key}?w=&n=` — body: the value; header `X-Concord-Context`: the context of
//!   the last read (opaque; without it the write is kept next to existing versions as a
//!   sibling) → `204`; `503` naming the replicas that answered when W was not reached;
//!   `413` over `kv.max-value-size`; `400` for a bad key, context or parameter.
//! - `GET /kv/{key}?r=&n=` → `200` with the value (`application/octet-stream`) and
//!   `X-Concord-Context`; `300` with every sibling when versions are concurrent —
//!   `{"siblings": ["<base64>", ...]}` (`application/json`; standard base64, in a fixed
//!   order), and the context that resolves them; `404` when absent or deleted (with the
//!   tombstone's context, if any); `503` when R was not reached.
//! - `DELETE /kv/{key}?w=&n=` with `X-Concord-Context` (or without: the key is read first)
//!   → `204`; `404` if there was nothing to delete.
//! - `GET /kv-status` → the ring (each member and the segments it replicates), this node's
//!   keys, the keys still to hand off, segments still synchronising, transfers in
//!   progress, and the counters.
//!
//! `r` and `w` take `one`, `quorum`, `all` or a number; `n` a number (1 to 9). Keys are
//! the path after `/kv/`, percent-decoded (slashes allowed), at most 1024 bytes. Every
//! request obeys the management API's write rules (token or client certificate, `Host`
//! and `Origin` naming this node; see [`crate::management::ManagementAccess`]).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use concord_core::kv::{KvError, Quorum, ReadOptions, WriteOptions};
use serde_json::json;

use super::handle::{Context, KvStore};
use crate::management::ManagementAccess;

/// The context header.
pub const CONTEXT_HEADER: &str = "x-concord-context";

/// The routes of the key-value API, every request guarded by `access`.
pub fn router(store: KvStore, access: ManagementAccess) -> Router {
    let limit = access.max_body_bytes;
    Router::new()
        .route("/kv/{*key}", get(get_key).put(put_key).delete(delete_key))
        .route("/kv-status", get(status))
        .with_state(store)
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            access,
            crate::management::guard,
        ))
}

/// `GET /kv-status` alone (served on the management port too: it shows no data).
pub fn status_router(store: KvStore) -> Router {
    Router::new()
        .route("/kv-status", get(status))
        .with_state(store)
}

fn message(code: StatusCode, text: impl Into<String>) -> Response {
    (code, Json(json!({ "message": text.into() }))).into_response()
}

/// The response for a failed request.
fn error(e: KvError) -> Response {
    match e {
        KvError::Invalid(m) => message(StatusCode::BAD_REQUEST, m),
        KvError::TooLarge(m) => message(StatusCode::PAYLOAD_TOO_LARGE, m),
        KvError::NotFound => message(StatusCode::NOT_FOUND, "not found"),
        KvError::Overloaded(_) => message(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
        KvError::Storage(_) => message(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        KvError::Unavailable(ref f) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "message": e.to_string(),
                "quorum": f.quorum,
                "needed": f.needed,
                "counted": f.counted.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                "uncounted": f.uncounted.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
                "failed": f.failed.iter().map(|(a, why)| json!({"node": a.to_string(), "reason": why})).collect::<Vec<_>>(),
                "unanswered": f.unanswered.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            })),
        )
            .into_response(),
    }
}

fn quorum(q: &HashMap<String, String>, name: &str) -> Result<Option<Quorum>, KvError> {
    q.get(name)
        .map(|v| Quorum::parse(v).map_err(|e| KvError::Invalid(format!("{name}: {e}"))))
        .transpose()
}

fn n(q: &HashMap<String, String>) -> Result<Option<u8>, KvError> {
    q.get("n")
        .map(|v| {
            v.trim()
                .parse::<u8>()
                .map_err(|_| KvError::Invalid(format!("n: `{v}` is not a number from 1 to 9")))
        })
        .transpose()
}

fn context(headers: &HeaderMap) -> Result<Option<Context>, KvError> {
    headers
        .get(CONTEXT_HEADER)
        .map(|v| {
            v.to_str()
                .map_err(|_| KvError::Invalid("the context header is not text".into()))
                .and_then(Context::from_token)
        })
        .transpose()
}

fn with_context(mut r: Response, c: Option<&Context>) -> Response {
    if let Some(v) = c.and_then(|c| HeaderValue::from_str(&c.to_token()).ok()) {
        r.headers_mut().insert(CONTEXT_HEADER, v);
    }
    r
}

async fn put_key(
    State(store): State<KvStore>,
    Path(key): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let options = match (n(&q), quorum(&q, "w")) {
        (Ok(n), Ok(w)) => WriteOptions { n, w },
        (Err(e), _) | (_, Err(e)) => return error(e),
    };
    let ctx = match context(&headers) {
        Ok(c) => c,
        Err(e) => return error(e),
    };
    match store.put(&key, body.to_vec(), ctx.as_ref(), options).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error(e),
    }
}

async fn get_key(
    State(store): State<KvStore>,
    Path(key): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let options = match (n(&q), quorum(&q, "r")) {
        (Ok(n), Ok(r)) => ReadOptions { n, r },
        (Err(e), _) | (_, Err(e)) => return error(e),
    };
    let v = match store.get(&key, options).await {
        Ok(v) => v,
        Err(e) => return error(e),
    };
    let r = match v.values.as_slice() {
        [] => message(StatusCode::NOT_FOUND, "not found"),
        [one] => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            one.clone(),
        )
            .into_response(),
        many => {
            let b64 = base64::engine::general_purpose::STANDARD;
            let siblings: Vec<String> = many.iter().map(|s| b64.encode(s)).collect();
            (
                StatusCode::MULTIPLE_CHOICES,
                Json(json!({ "siblings": siblings })),
            )
                .into_response()
        }
    };
    with_context(r, v.context.as_ref())
}

async fn delete_key(
    State(store): State<KvStore>,
    Path(key): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let options = match (n(&q), quorum(&q, "w")) {
        (Ok(n), Ok(w)) => WriteOptions { n, w },
        (Err(e), _) | (_, Err(e)) => return error(e),
    };
    let ctx = match context(&headers) {
        Ok(c) => c,
        Err(e) => return error(e),
    };
    match store.delete(&key, ctx.as_ref(), options).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error(e),
    }
}

async fn status(State(store): State<KvStore>) -> Response {
    match status_json(&store).await {
        Ok(v) => Json(v).into_response(),
        Err(e) => error(e),
    }
}

/// The dashboard's `kv` panel: what `GET /kv-status` answers.
pub(crate) fn dashboard_panel(store: KvStore) -> crate::management::DashboardPanel {
    crate::management::DashboardPanel::new("kv", move || {
        let store = store.clone();
        async move {
            status_json(&store)
                .await
                .unwrap_or_else(|e| json!({"error": e.to_string()}))
        }
    })
}

/// The body of `GET /kv-status`.
async fn status_json(store: &KvStore) -> Result<serde_json::Value, KvError> {
    let r = store.status().await?;
    let s = &r.status;
    let t = &r.stats;
    Ok(json!({
        "n": s.n,
        "ring": s.ownership.iter().map(|(m, segs)| json!({"node": m.address.to_string(), "segments": segs})).collect::<Vec<_>>(),
        "keys": s.keys,
        "misplacedKeys": s.misplaced_keys,
        "pendingSegments": s.pending_segments,
        "handoffsInProgress": s.handoffs_in_progress,
        "exchangesInProgress": s.exchanges_in_progress,
        "requestsInProgress": s.requests_in_progress,
        "fileBytes": r.file_bytes,
        "transfers": {
            "handoffKeysSent": t.handoff_keys_sent,
            "handoffKeysReceived": t.handoff_keys_received,
            "handoffKeysRemoved": t.handoff_keys_removed,
            "antiEntropyExchanges": t.ae_exchanges,
            "antiEntropyKeysRepaired": t.ae_keys_repaired,
        },
        "requests": {
            "writesOk": t.writes_ok,
            "writesFailed": t.writes_failed,
            "readsOk": t.reads_ok,
            "readsFailed": t.reads_failed,
            "hintedWrites": t.hinted_writes,
            "readRepairs": t.read_repairs,
            "tombstonesReaped": t.tombstones_reaped,
            "overloaded": t.overloaded,
        },
        "invalidMessages": t.invalid_messages,
        "storageErrors": t.storage_errors,
    }))
}
