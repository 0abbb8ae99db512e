//! The sample's `chat` topic (distributed pub-sub, docs/SERVICES.md): every node running
//! `--sample` subscribes; a message posted on any node is published to all of them.
//!
//! - `POST /sample/chat` (form `text=<1 to 1000 bytes>`) → `{"nodes": <nodes it was sent
//!   to>}`: published from this node (at most once).
//! - `GET /sample/chat` → `{"messages": [{"from": "<node>", "text": "..."}]}`: the last 100
//!   messages this node received, oldest first.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use axum::extract::{Form, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use concord::pubsub::{PubSub, Topic};
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::message;

/// Messages kept per node.
const KEPT: usize = 100;
/// Longest text, bytes.
const MAX_TEXT: usize = 1000;

/// One chat message.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatMessage {
    /// The node that published it.
    pub from: String,
    /// Its text.
    pub text: String,
}

#[derive(Clone)]
struct ChatState {
    topic: Arc<Topic<ChatMessage>>,
    node: String,
    received: Arc<Mutex<VecDeque<ChatMessage>>>,
}

#[derive(Deserialize)]
struct Post {
    text: String,
}

/// Subscribes this node to `chat` and returns its routes.
pub fn routes(pubsub: &PubSub, node: String) -> Router {
    let received = Arc::new(Mutex::new(VecDeque::new()));
    let topic = match pubsub.topic::<ChatMessage>("chat") {
        Ok(t) => Arc::new(t),
        Err(e) => {
            warn!(error = %e, "sample chat: no topic");
            return Router::new();
        }
    };
    let (t, r) = (topic.clone(), received.clone());
    tokio::spawn(async move {
        let mut sub = match t.subscribe().await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "sample chat: cannot subscribe");
                return;
            }
        };
        while let Some(m) = sub.recv().await {
            let mut r = r.lock().unwrap_or_else(|p| p.into_inner());
            if r.len() >= KEPT {
                r.pop_front();
            }
            r.push_back(m);
        }
    });
    Router::new()
        .route("/sample/chat", get(read).post(post))
        .with_state(ChatState {
            topic,
            node,
            received,
        })
}

async fn read(State(s): State<ChatState>) -> Json<serde_json::Value> {
    let messages: Vec<ChatMessage> = s
        .received
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .cloned()
        .collect();
    Json(serde_json::json!({ "messages": messages }))
}

async fn post(State(s): State<ChatState>, Form(p): Form<Post>) -> Response {
    if p.text.is_empty() || p.text.len() > MAX_TEXT {
        return message(
            StatusCode::BAD_REQUEST,
            format!("text must be 1 to {MAX_TEXT} bytes"),
        );
    }
    let m = ChatMessage {
        from: s.node.clone(),
        text: p.text,
    };
    match s.topic.publish(&m).await {
        Ok(nodes) => Json(serde_json::json!({ "nodes": nodes })).into_response(),
        Err(e) => message(StatusCode::SERVICE_UNAVAILABLE, e),
    }
}
