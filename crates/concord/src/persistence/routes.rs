//! `GET /persistence/events/{type}`: the events of an entity type after an offset — what a
//! projection or read model needs (Akka's `eventsBySlices`), at least once and resumable.
//!
//! - `?from=<offset>` (default `0`, the start; or the `Last-Event-ID` header of a
//!   reconnecting event stream), `?slices=<min>-<max>` (default `0-1023`),
//!   `?limit=<n>` (1–1000, default 100).
//! - `Accept: text/event-stream` (or `?follow=true`): Server-Sent Events that follow the
//!   stream as events are committed: `id: <offset>`, `event: event`, `data: <json>`; the
//!   store is polled every 500 ms when there is nothing new. A client that reconnects with
//!   `Last-Event-ID` resumes after the last event it got (the header wins over `from`). At
//!   most [`MAX_FOLLOWERS`] streams at once per node (503 beyond).
//! - Otherwise one page of JSON: `{"events": [<json>...], "next": "<offset>"}` — pass
//!   `next` as `from` to read on.
//!
//! An event's JSON: `{"offset": "17.4", "persistenceId": "counter|a", "seqNr": 3,
//! "timestampMs": 1700000000000, "event": <the event as JSON, or null if it is not
//! self-describing MessagePack>, "payload": "<standard base64>"}`.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use base64::Engine as _;
use concord_core::persistence::{PersistenceId, NUMBER_OF_SLICES};
use serde_json::{json, Value};

use super::handle::Persistence;
use super::incarnation::STORE_START_TIMEOUT;
use super::store::{EventEnvelope, EventsQuery, Offset};

/// Most events per page or poll.
pub const MAX_LIMIT: usize = 1000;

/// How often an idle event stream polls the store.
const REFRESH: Duration = Duration::from_millis(500);

/// Event streams (`follow`) open at once on a node; more answer 503 (each polls the store
/// through the pool that appends and recoveries use).
pub const MAX_FOLLOWERS: usize = 16;

/// The JSON of one event (see the module docs).
pub fn event_json(e: &EventEnvelope) -> Value {
    let event = rmp_serde::from_slice::<Value>(&e.event.payload).unwrap_or(Value::Null);
    json!({
        "offset": e.offset.to_string(),
        "persistenceId": e.event.persistence_id.to_string(),
        "seqNr": e.event.seq_nr,
        "timestampMs": e.event.timestamp_ms,
        "event": event,
        "payload": base64::engine::general_purpose::STANDARD.encode(&e.event.payload),
    })
}

#[derive(Debug)]
struct Params {
    query: EventsQuery,
    follow: bool,
}

fn bad(message: impl Into<String>) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"message": message.into()})),
    )
        .into_response()
}

/// Parses the query string and headers.
fn params(entity_type: &str, raw: Option<&str>, headers: &HeaderMap) -> Result<Params, String> {
    PersistenceId::new(entity_type, "x").map_err(|e| e.to_string())?;
    // A reconnecting event stream repeats its URL (with its `from`) and adds
    // `Last-Event-ID`: the header wins.
    let resume = match headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        Some(id) => Some(id.parse::<Offset>()?),
        None => None,
    };
    let mut after = Offset::START;
    let mut slices = 0..=NUMBER_OF_SLICES - 1;
    let mut limit = 100usize;
    let mut follow = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/event-stream"));
    for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "from" => after = v.parse::<Offset>()?,
            "slices" => {
                let (a, b) = v
                    .split_once('-')
                    .ok_or("slices is <min>-<max>, e.g. 0-1023")?;
                let (a, b) = (
                    a.trim()
                        .parse::<u16>()
                        .map_err(|_| "slices: not a number")?,
                    b.trim()
                        .parse::<u16>()
                        .map_err(|_| "slices: not a number")?,
                );
                if a > b || b >= NUMBER_OF_SLICES {
                    return Err(format!("slices must be within 0-{}", NUMBER_OF_SLICES - 1));
                }
                slices = a..=b;
            }
            "limit" => {
                limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|l| (1..=MAX_LIMIT).contains(l))
                    .ok_or(format!("limit must be from 1 to {MAX_LIMIT}"))?;
            }
            "follow" => follow = v == "true",
            other => return Err(format!("unknown parameter {other:?}")),
        }
    }
    Ok(Params {
        query: EventsQuery {
            entity_type: entity_type.to_string(),
            slices,
            after: resume.unwrap_or(after),
            limit,
        },
        follow,
    })
}

#[derive(Clone)]
struct RouteState {
    persistence: Persistence,
    followers: Arc<tokio::sync::Semaphore>,
}

async fn events(
    State(state): State<RouteState>,
    Path(entity_type): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
) -> Response {
    let p = match params(&entity_type, raw.as_deref(), &headers) {
        Ok(p) => p,
        Err(e) => return bad(e),
    };
    let running = match state.persistence.running(STORE_START_TIMEOUT).await {
        Ok(r) => r,
        Err(e) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"message": e.to_string()})),
            )
                .into_response()
        }
    };
    let journal = running.stores.journal.clone();
    if !p.follow {
        return match journal.events_by_slices(&p.query).await {
            Ok(page) => {
                let next = page.last().map_or(p.query.after, |e| e.offset);
                Json(json!({
                    "events": page.iter().map(event_json).collect::<Vec<_>>(),
                    "next": next.to_string(),
                }))
                .into_response()
            }
            Err(e) => (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"message": e.to_string()})),
            )
                .into_response(),
        };
    }
    // Follow: page after page; poll when idle; a store error ends the stream (the client
    // reconnects with Last-Event-ID). The permit lives as long as the stream.
    let Ok(permit) = state.followers.clone().try_acquire_owned() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"message": format!("at most {MAX_FOLLOWERS} event streams at once")})),
        )
            .into_response();
    };
    let state = (
        (journal, permit),
        p.query,
        Vec::<EventEnvelope>::new().into_iter(),
        false,
    );
    let stream = futures_util::stream::unfold(
        state,
        |((journal, permit), mut query, mut pending, ended)| async move {
            if ended {
                return None;
            }
            loop {
                if let Some(e) = pending.next() {
                    query.after = e.offset;
                    let ev = Event::default()
                        .id(e.offset.to_string())
                        .event("event")
                        .data(event_json(&e).to_string());
                    return Some((
                        Ok::<_, Infallible>(ev),
                        ((journal, permit), query, pending, false),
                    ));
                }
                match journal.events_by_slices(&query).await {
                    Ok(page) if page.is_empty() => tokio::time::sleep(REFRESH).await,
                    Ok(page) => pending = page.into_iter(),
                    Err(e) => {
                        let ev = Event::default()
                            .event("error")
                            .data(json!({"message": e.to_string()}).to_string());
                        return Some((Ok(ev), ((journal, permit), query, pending, true)));
                    }
                }
            }
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// The routes over `persistence`'s journal.
pub(crate) fn routes(persistence: Persistence) -> Router {
    Router::new()
        .route("/persistence/events/{entity_type}", get(events))
        .with_state(RouteState {
            persistence,
            followers: Arc::new(tokio::sync::Semaphore::new(MAX_FOLLOWERS)),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked_and_last_event_id_resumes() {
        let h = HeaderMap::new();
        let p = params("counter", Some("from=3.4&slices=0-511&limit=5"), &h).unwrap();
        assert_eq!(p.query.after.to_string(), "3.4");
        assert_eq!(p.query.slices, 0..=511);
        assert_eq!(p.query.limit, 5);
        assert!(!p.follow);
        for q in [
            "from=x",
            "slices=5-1",
            "slices=0-1024",
            "limit=0",
            "limit=1001",
            "other=1",
        ] {
            assert!(params("counter", Some(q), &h).is_err(), "{q}");
        }
        assert!(params("a|b", None, &h).is_err(), "not an entity type");
        let mut h = HeaderMap::new();
        h.insert("last-event-id", "9.9".parse().unwrap());
        h.insert("accept", "text/event-stream".parse().unwrap());
        let p = params("counter", None, &h).unwrap();
        assert_eq!(p.query.after.to_string(), "9.9");
        assert!(p.follow);
        let p = params("counter", Some("from=1.1"), &h).unwrap();
        assert_eq!(
            p.query.after.to_string(),
            "9.9",
            "Last-Event-ID wins over from"
        );
    }
}
