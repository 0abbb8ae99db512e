//! The sample's partitioned `echo` service (docs/SERVICES.md): every node running
//! `--sample` registers it with N = 2 instances (`--sample-echo-instances`, or the
//! environment variable `CONCORD_SAMPLE_ECHO_INSTANCES`, sets another N); the leader places them and moves them
//! when nodes come and go.
//!
//! - `POST /sample/echo` (form `text=<1 to 1000 bytes>`, optional `routing=round-robin|
//!   random|adaptive|consistent-hashing`, `selector=cpu|load|memory|queues|mix` for
//!   adaptive (default `mix`) and `key=<text>` for consistent hashing) →
//!   `{"node": "<node of the instance that answered>", "incarnation": <u64 per instance
//!   start>, "handled": <messages that instance handled>, "text": "<the text>"}`; 503 when
//!   no instance answered within 3 s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use concord::services::{
    InstancePolicy, PartitionPath, PartitionedServices, RoutingLogic, Service, ServiceContext,
    ServiceRef,
};
use concord_core::cluster_metrics::CapacitySelector;
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::message;

/// The service's path.
pub const PATH: &str = "echo";
/// Its instances unless `--sample-echo-instances` says otherwise.
pub const INSTANCES: u32 = 2;
/// Longest text, bytes.
const MAX_TEXT: usize = 1000;
const TIMEOUT: Duration = Duration::from_secs(3);

static INCARNATIONS: AtomicU64 = AtomicU64::new(1);

/// An instance: it answers with where it runs.
pub struct Echo {
    node: String,
    incarnation: u64,
    handled: u64,
}

/// Its answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EchoReply {
    /// The node of the instance.
    pub node: String,
    /// The instance's incarnation (unique per start on its node).
    pub incarnation: u64,
    /// Messages this instance has handled, this one included.
    pub handled: u64,
    /// The text sent.
    pub text: String,
}

impl Service for Echo {
    type Message = String;
    type Reply = EchoReply;

    async fn handle(&mut self, _ctx: &mut ServiceContext, text: String) -> EchoReply {
        self.handled += 1;
        EchoReply {
            node: self.node.clone(),
            incarnation: self.incarnation,
            handled: self.handled,
            text,
        }
    }
}

#[derive(Clone)]
struct EchoState {
    echo: ServiceRef<Echo>,
}

#[derive(Deserialize)]
struct Post {
    text: String,
    routing: Option<String>,
    selector: Option<CapacitySelector>,
    key: Option<String>,
}

/// Registers `echo` with `instances` instances on this node (in the background) and
/// returns its routes.
pub fn routes(services: &PartitionedServices, instances: u32) -> Router {
    let s = services.clone();
    tokio::spawn(async move {
        let registered = s
            .register(
                PATH,
                InstancePolicy::Fixed(instances),
                |ctx: &ServiceContext| Echo {
                    node: ctx.node().to_string(),
                    incarnation: INCARNATIONS.fetch_add(1, Ordering::Relaxed),
                    handled: 0,
                },
            )
            .await;
        if let Err(e) = registered {
            warn!(error = %e, "sample echo: not registered");
        }
    });
    let path = PartitionPath::new(PATH).unwrap_or_else(|_| unreachable!("a valid path"));
    Router::new()
        .route("/sample/echo", post(ask))
        .with_state(EchoState {
            echo: services.service_ref(path),
        })
}

async fn ask(State(s): State<EchoState>, Form(p): Form<Post>) -> Response {
    if p.text.is_empty() || p.text.len() > MAX_TEXT {
        return message(StatusCode::BAD_REQUEST, "text must be 1 to 1000 bytes");
    }
    let logic = match p.routing.as_deref() {
        None | Some("round-robin") => RoutingLogic::RoundRobin,
        Some("random") => RoutingLogic::Random,
        Some("adaptive") => RoutingLogic::Adaptive(p.selector.unwrap_or(CapacitySelector::Mix)),
        Some("consistent-hashing") => RoutingLogic::ConsistentHashing,
        Some(other) => {
            return message(
                StatusCode::BAD_REQUEST,
                format!(
                "unknown routing `{other}`: round-robin, random, adaptive or consistent-hashing"
            ),
            )
        }
    };
    let echo = s.echo.with_routing(logic);
    let answer = match p.key {
        Some(key) => echo.ask_keyed(key.as_bytes(), &p.text, TIMEOUT).await,
        None => echo.ask(&p.text, TIMEOUT).await,
    };
    match answer {
        Ok(r) => Json(r).into_response(),
        Err(e) => message(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the echo service did not answer: {e}"),
        ),
    }
}
