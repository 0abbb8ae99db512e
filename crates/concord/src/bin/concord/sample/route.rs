//! The sample's `sample-echo` service (the receptionist and its routers, docs/SERVICES.md):
//! every node running `--sample` registers one handle under the key `sample-echo` that
//! counts the messages it receives, so that a test can see where a router sends.
//!
//! - `POST /sample/route?logic=<logic>&n=<1 to 100000>[&selector=<selector>]` → `{"sent":
//!   <messages sent to instances>, "instances": <instances routed over>}`: `n` tells from
//!   this node through a `ServiceRouter` over the key's reachable instances (one router
//!   per logic, kept and following the key). `logic`: `round-robin`, `random`,
//!   `consistent-hashing` (the message number as the key), `adaptive` (weighted by the
//!   nodes' capacity from cluster metrics; `selector`: `cpu`, `load`, `memory`, `queues` or
//!   `mix`, the default) or `broadcast`. At most once: a message to a full mailbox is
//!   dropped.
//! - `GET /sample/route` → `{"node": "<address>", "received": <messages this node's handle
//!   received since it started>, "instances": <reachable instances this node lists>}`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use concord::receptionist::{Receptionist, RoutingLogic, ServiceKey, ServiceRouter};
use concord_core::cluster_metrics::CapacitySelector;
use serde::Deserialize;
use tokio::sync::Mutex;
use tracing::warn;

use super::message;

/// The key every sample node registers its handle under.
pub const KEY: &str = "sample-echo";
/// Most messages one request sends.
const MAX_N: u64 = 100_000;

#[derive(Clone)]
struct RouteState {
    receptionist: Receptionist,
    key: ServiceKey<u64>,
    node: String,
    received: Arc<AtomicU64>,
    /// One router per logic (and selector), made on first use.
    routers: Arc<Mutex<BTreeMap<String, Arc<ServiceRouter<u64>>>>>,
}

#[derive(Deserialize)]
struct SendQuery {
    logic: String,
    n: u64,
    #[serde(default)]
    selector: Option<CapacitySelector>,
}

/// Registers this node's `sample-echo` handle (its task counts what arrives) and returns
/// the routes.
pub fn routes(receptionist: Receptionist, node: String) -> Router {
    let key = match ServiceKey::<u64>::new(KEY) {
        Ok(k) => k,
        Err(e) => {
            warn!(error = %e, "sample route: no key");
            return Router::new();
        }
    };
    let received = Arc::new(AtomicU64::new(0));
    let (r, k, count) = (receptionist.clone(), key.clone(), received.clone());
    tokio::spawn(async move {
        let mut handle = match r.register(&k).await {
            Ok(h) => h,
            Err(e) => {
                warn!(error = %e, "sample route: cannot register the handle");
                return;
            }
        };
        while handle.recv().await.is_some() {
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    Router::new()
        .route("/sample/route", get(read).post(send))
        .with_state(RouteState {
            receptionist,
            key,
            node,
            received,
            routers: Arc::new(Mutex::new(BTreeMap::new())),
        })
}

async fn read(State(s): State<RouteState>) -> Response {
    match s.receptionist.find(&s.key).await {
        Ok(listing) => Json(serde_json::json!({
            "node": s.node,
            "received": s.received.load(Ordering::Relaxed),
            "instances": listing.reachable.len(),
        }))
        .into_response(),
        Err(e) => message(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}

fn logic_of(q: &SendQuery) -> Option<RoutingLogic> {
    Some(match q.logic.as_str() {
        "round-robin" => RoutingLogic::RoundRobin,
        "random" => RoutingLogic::Random,
        "consistent-hashing" => RoutingLogic::ConsistentHashing,
        "adaptive" => RoutingLogic::Adaptive(q.selector.unwrap_or_default()),
        "broadcast" => RoutingLogic::Broadcast,
        _ => return None,
    })
}

async fn send(
    State(s): State<RouteState>,
    query: Result<Query<SendQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let usage = "query: logic=round-robin|random|consistent-hashing|adaptive|broadcast, \
                 n=1..100000, selector=cpu|load|memory|queues|mix (adaptive)";
    let Ok(Query(q)) = query else {
        return message(StatusCode::BAD_REQUEST, usage);
    };
    let Some(logic) = logic_of(&q).filter(|_| (1..=MAX_N).contains(&q.n)) else {
        return message(StatusCode::BAD_REQUEST, usage);
    };
    let name = format!("{logic:?}");
    let router = {
        let mut routers = s.routers.lock().await;
        match routers.get(&name) {
            Some(r) => r.clone(),
            None => match s.receptionist.router(&s.key, logic).await {
                Ok(r) => routers.entry(name).or_insert(Arc::new(r)).clone(),
                Err(e) => return message(StatusCode::SERVICE_UNAVAILABLE, e),
            },
        }
    };
    let mut sent = 0;
    for i in 0..q.n {
        let result = if logic == RoutingLogic::ConsistentHashing {
            router.tell_keyed(&i.to_le_bytes(), &i).await
        } else {
            router.tell(&i).await
        };
        match result {
            Ok(n) => sent += n,
            Err(e) => return message(StatusCode::SERVICE_UNAVAILABLE, e),
        }
    }
    Json(serde_json::json!({ "sent": sent, "instances": router.instances().len() })).into_response()
}
