//! `GET /cluster/shards/{name}`: every region of entity type `name` with its shards and
//! their numbers of entities, in Akka Management's shape:
//!
//! ```json
//! {"regions": [{"shardRegion": "concord://shop@10.0.0.1:25520",
//!               "shards": [{"shardId": "17", "numEntities": 3}]}]}
//! ```
//!
//! Regions that do not answer within `sharding.shard-region-query-timeout` are left out
//! (Akka's `GetClusterShardingStats`). 404 `Shard Region {name} is not started` for a type
//! this node does not run.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures_channel::oneshot;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use super::command::ShardingCommand;

/// One shard in the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardInfoJson {
    /// The shard.
    pub shard_id: String,
    /// Entities alive in it.
    pub num_entities: u32,
}

/// One region in the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardRegionJson {
    /// The region's node address.
    pub shard_region: String,
    /// Its shards.
    pub shards: Vec<ShardInfoJson>,
}

/// The answer of `GET /cluster/shards/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRegionsJson {
    /// Every region that answered.
    pub regions: Vec<ShardRegionJson>,
}

#[derive(Clone)]
struct RouteState {
    commands: mpsc::Sender<ShardingCommand>,
    types: Vec<String>,
}

/// The routes over the host's command queue, for the entity types `types`.
pub(crate) fn routes(commands: mpsc::Sender<ShardingCommand>, types: Vec<String>) -> Router {
    Router::new()
        .route("/cluster/shards/{name}", get(shards))
        .with_state(RouteState { commands, types })
}

/// The dashboard's `sharding` panel: per entity type, every region that answered the
/// cluster-wide shard query with its shards (`[shard id, entities]`), and the shards more
/// than one region reported (a handoff in flight: the old home still has it while the
/// new one starts it) —
/// `{"types": [{"name", "regions": [{"region", "shards": [["17", 3], ..]}],
/// "handoffs": ["17", ..]}]}`.
pub(crate) fn dashboard_panel(
    commands: mpsc::Sender<ShardingCommand>,
    types: Vec<String>,
) -> crate::management::DashboardPanel {
    crate::management::DashboardPanel::new("sharding", move || {
        let (commands, types) = (commands.clone(), types.clone());
        async move {
            let mut out = Vec::new();
            for name in types {
                let (reply, rx) = oneshot::channel();
                let query = ShardingCommand::QueryStats {
                    type_name: name.clone(),
                    reply,
                };
                let answer = if commands.send(query).await.is_ok() {
                    rx.await.ok()
                } else {
                    None
                };
                let Some(regions) = answer else {
                    out.push(serde_json::json!({"name": name, "error": "sharding has stopped"}));
                    continue;
                };
                let mut seen = std::collections::BTreeMap::<String, u32>::new();
                let regions: Vec<_> = regions
                    .into_iter()
                    .map(|(r, shards)| {
                        for (id, _) in &shards {
                            *seen.entry(id.clone()).or_default() += 1;
                        }
                        serde_json::json!({"region": r.address.to_string(), "shards": shards})
                    })
                    .collect();
                let handoffs: Vec<String> = seen
                    .into_iter()
                    .filter(|(_, n)| *n > 1)
                    .map(|(id, _)| id)
                    .collect();
                out.push(
                    serde_json::json!({"name": name, "regions": regions, "handoffs": handoffs}),
                );
            }
            serde_json::json!({ "types": out })
        }
    })
}

fn message(status: StatusCode, m: impl std::fmt::Display) -> Response {
    (
        status,
        Json(serde_json::json!({ "message": m.to_string() })),
    )
        .into_response()
}

async fn shards(State(s): State<RouteState>, Path(name): Path<String>) -> Response {
    if !s.types.contains(&name) {
        // Akka Management's answer for a region that is not started.
        return message(
            StatusCode::NOT_FOUND,
            format!("Shard Region {name} is not started"),
        );
    }
    let (reply, rx) = oneshot::channel();
    let query = ShardingCommand::QueryStats {
        type_name: name,
        reply,
    };
    if s.commands.send(query).await.is_err() {
        return message(StatusCode::SERVICE_UNAVAILABLE, "sharding has stopped");
    }
    // The host answers within the query timeout; this bound only guards a stuck node.
    match tokio::time::timeout(Duration::from_secs(30), rx).await {
        Ok(Ok(regions)) => Json(ShardRegionsJson {
            regions: regions
                .into_iter()
                .map(|(r, shards)| ShardRegionJson {
                    shard_region: r.address.to_string(),
                    shards: shards
                        .into_iter()
                        .map(|(shard_id, num_entities)| ShardInfoJson {
                            shard_id,
                            num_entities,
                        })
                        .collect(),
                })
                .collect(),
        })
        .into_response(),
        _ => message(
            StatusCode::SERVICE_UNAVAILABLE,
            "the shard query did not complete",
        ),
    }
}
