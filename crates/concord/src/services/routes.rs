//! `GET /cluster/services`: the partition table, the pending changes, the instances per
//! node and this node's local instances (the same JSON is the dashboard's `services`
//! panel; `concord services` prints it).
//!
//! ```json
//! {"node": "...", "version": 7, "writer": "concord://sys@10.0.0.1:25520#42",
//!  "table": [{"path": "echo", "instances": ["concord://sys@10.0.0.2:25520#9", "..."]}],
//!  "pending": [{"path": "echo", "from": "...", "to": "...", "status": "awaiting"}],
//!  "instances_per_node": {"concord://sys@10.0.0.2:25520#9": 1},
//!  "registered": ["echo"], "local": {"echo": "running"}, "buffered": 0,
//!  "stats": {"sent": 0, "delivered": 0, "forwarded": 0, "handoffs": 0, "dropped": {}},
//!  "truncated": false}
//! ```
//!
//! At most [`MAX_PATHS`] paths are listed (in path order); `truncated` says whether some
//! were left out.

use axum::routing::get;
use axum::{Json, Router};
use concord_core::services::PartitionChangeStatus;
use concord_core::UniqueAddress;
use serde_json::{json, Value};

use super::handle::PartitionedServices;

/// Most paths listed.
pub const MAX_PATHS: usize = 500;

fn addr(n: &UniqueAddress) -> String {
    format!("{}#{}", n.address, n.uid)
}

/// The JSON of the services layer on this node (see the module docs).
pub fn services_json(services: &PartitionedServices) -> Value {
    let s = services.snapshot();
    let state = &s.state;
    let table: Vec<Value> = state
        .table
        .iter()
        .take(MAX_PATHS)
        .map(|(p, nodes)| json!({"path": p.as_str(), "instances": nodes.iter().map(addr).collect::<Vec<_>>()}))
        .collect();
    let pending: Vec<Value> = state
        .pending
        .iter()
        .take(MAX_PATHS)
        .map(|c| {
            json!({
                "path": c.path.as_str(),
                "from": c.from.as_ref().map(addr),
                "to": addr(&c.to),
                "status": match c.status {
                    PartitionChangeStatus::Awaiting => "awaiting",
                    PartitionChangeStatus::Complete => "complete",
                },
            })
        })
        .collect();
    let per_node: serde_json::Map<String, Value> = state
        .table
        .instance_counts()
        .iter()
        .map(|(n, c)| (addr(n), json!(c)))
        .collect();
    let local: serde_json::Map<String, Value> = s
        .local
        .iter()
        .map(|(p, h)| (p.as_str().to_string(), json!(h)))
        .collect();
    let dropped: serde_json::Map<String, Value> = s
        .stats
        .dropped
        .iter()
        .map(|(r, n)| (r.as_str().to_string(), json!(n)))
        .collect();
    json!({
        "node": s.node.as_ref().map(addr),
        "version": state.version,
        "writer": state.writer.as_ref().map(addr),
        "table": table,
        "pending": pending,
        "instances_per_node": per_node,
        "registered": s.registered.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "local": local,
        "buffered": s.buffered,
        "stats": {
            "sent": s.stats.sent,
            "delivered": s.stats.delivered,
            "forwarded": s.stats.forwarded,
            "handoffs": s.stats.handoffs,
            "released_by_timeout": s.stats.released_by_timeout,
            "dropped": dropped,
        },
        "truncated": state.table.len() > MAX_PATHS || state.pending.len() > MAX_PATHS,
    })
}

/// The routes: `GET /cluster/services`.
pub fn routes(services: PartitionedServices) -> Router {
    Router::new().route(
        "/cluster/services",
        get(move || {
            let s = services.clone();
            async move { Json(services_json(&s)) }
        }),
    )
}
