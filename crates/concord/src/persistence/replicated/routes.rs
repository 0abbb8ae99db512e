//! The replicated journal's operator routes on the management port (writes need the
//! management API's authentication, `management::access`):
//!
//! - `GET /persistence/journal/waits`: the segments this node waits for after a ring
//!   change and the replicas each still awaits — `{"waits": [{"segment": 539,
//!   "awaited": ["concord://sys@10.0.0.7:2552"]}]}` (empty when every handoff ended).
//! - `POST /persistence/journal/give-up` with `{"lost": ["concord://sys@10.0.0.7:2552"]}`
//!   (1 to 64 addresses of nodes that are down and removed, their disks gone): this node
//!   and every member of its ring stop waiting for them (docs/PERSISTENCE.md, "Replicas
//!   lost for good"); answers `{"released": [<segment>...], "told": <members>}`, or 400
//!   naming what was refused (an address that does not parse, or of a member that is up).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use concord_core::address::Address;
use concord_core::persistence::journal::JournalError;
use serde::Deserialize;
use serde_json::json;

use super::ReplicatedStore;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GiveUpBody {
    lost: Vec<String>,
}

fn error(e: JournalError) -> Response {
    let status = match e {
        JournalError::Rejected(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(json!({"message": e.to_string()}))).into_response()
}

async fn waits(State(store): State<ReplicatedStore>) -> Response {
    match store.waits().await {
        Ok(w) => Json(json!({
            "waits": w
                .into_iter()
                .map(|(segment, awaited)| json!({
                    "segment": segment,
                    "awaited": awaited.iter().map(ToString::to_string).collect::<Vec<_>>(),
                }))
                .collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => error(e),
    }
}

/// The addresses of a give-up's body.
fn lost(body: &GiveUpBody) -> Result<Vec<Address>, JournalError> {
    body.lost
        .iter()
        .map(|a| {
            a.parse::<Address>()
                .map_err(|e| JournalError::Rejected(format!("{a:?} is not an address: {e}")))
        })
        .collect()
}

async fn give_up(State(store): State<ReplicatedStore>, Json(body): Json<GiveUpBody>) -> Response {
    let lost = match lost(&body) {
        Ok(l) => l,
        Err(e) => return error(e),
    };
    match store.give_up(lost).await {
        Ok(g) => Json(json!({"released": g.released, "told": g.told})).into_response(),
        Err(e) => error(e),
    }
}

/// The routes over `store`.
pub(crate) fn routes(store: ReplicatedStore) -> Router {
    Router::new()
        .route("/persistence/journal/waits", get(waits))
        .route("/persistence/journal/give-up", post(give_up))
        .with_state(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_give_up_body_parses_addresses_and_names_a_bad_one() {
        let body: GiveUpBody =
            serde_json::from_str(r#"{"lost": ["concord://sys@10.0.0.7:2552"]}"#).unwrap();
        assert_eq!(
            lost(&body).unwrap(),
            vec![Address::new("sys", "10.0.0.7", 2552)]
        );
        let bad = GiveUpBody {
            lost: vec!["nowhere".into()],
        };
        let Err(JournalError::Rejected(why)) = lost(&bad) else {
            panic!("refused");
        };
        assert!(why.contains("nowhere"), "{why}");
        assert!(serde_json::from_str::<GiveUpBody>(r#"{"lost": [], "x": 1}"#).is_err());
    }
}
