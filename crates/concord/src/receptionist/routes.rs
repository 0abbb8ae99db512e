//! `GET /cluster/receptionist`: every service key this node's replica of the registry holds,
//! with its instances as this node lists them (the same JSON is the dashboard's
//! `receptionist` panel).
//!
//! ```json
//! {"keys": [{"key": "greeter", "count": 1, "instances": ["concord://sys@10.0.0.1:25520#42#7"],
//!   "unreachable": 0}], "truncated": false}
//! ```
//!
//! At most [`MAX_KEYS`] keys (in key order) and [`MAX_INSTANCES`] instances per key are
//! shown; `truncated` says whether some were left out.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use concord_core::ddata::{Key, ORSet, ReadConsistency};
use concord_core::receptionist::{listing, ServiceKeyId};
use serde_json::{json, Value};

use super::handle::Receptionist;

/// Most keys shown.
pub const MAX_KEYS: usize = 200;
/// Most instances shown per key.
pub const MAX_INSTANCES: usize = 100;

/// The JSON of the registry (see the module docs).
pub async fn registry_json(receptionist: &Receptionist) -> Value {
    let keys = match receptionist.replicator.keys().await {
        Ok(k) => k,
        Err(e) => return json!({ "error": e.to_string() }),
    };
    let view = receptionist.shared.view.borrow().clone();
    let mut out = Vec::new();
    let mut truncated = false;
    for info in keys {
        let Some(id) = ServiceKeyId::of_ddata_key(&info.key) else {
            continue;
        };
        if out.len() >= MAX_KEYS {
            truncated = true;
            break;
        }
        let Ok(key) = Key::<ORSet<String>>::new(&info.key) else {
            continue;
        };
        let Ok(Some(set)) = receptionist
            .replicator
            .get(&key, ReadConsistency::Local)
            .await
        else {
            continue;
        };
        let Some(view) = view.as_ref() else {
            continue;
        };
        let l = listing(&id, set.elements(), view);
        truncated |= l.all.len() > MAX_INSTANCES;
        let instances: Vec<String> = l
            .all
            .iter()
            .take(MAX_INSTANCES)
            .map(|i| i.to_string())
            .collect();
        out.push(json!({
            "key": id.as_str(),
            "count": l.all.len(),
            "instances": instances,
            "unreachable": l.all.len() - l.reachable.len(),
        }));
    }
    json!({ "keys": out, "truncated": truncated })
}

async fn get_registry(State(r): State<Receptionist>) -> Json<Value> {
    Json(registry_json(&r).await)
}

/// The route over `receptionist`.
pub(crate) fn routes(receptionist: Receptionist) -> Router {
    Router::new()
        .route("/cluster/receptionist", get(get_registry))
        .with_state(receptionist)
}
