//! The sample `log` when the node runs persistence: an event-sourced entity fed by a
//! **reliable producer with a durable queue** on every node (docs/RELIABLE_DELIVERY.md).
//!
//! `POST /sample/log/{id}` (form `value=<string>`) answers 202 once this node's producer
//! `sample-log@<node address>` has stored the value in its durable queue (the replicated
//! journal); the producer delivers it to the log, which persists it with the record of what
//! it handled (`ReliableEventSourced`): each value a node accepted is appended once, in that
//! node's order — across rebalances, leaves and the crash of the log's node — and a node
//! that crashed and is started again with its data sends what it accepted and had not
//! delivered. 503 while the producer's buffer is full or its store is unavailable (the
//! producer is started when the node starts, and again whenever its store failed). `GET /sample/log/{id}` →
//! `{"id", "values": [...], "node"}`.

use std::sync::{Arc, OnceLock};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use concord::coordinated_shutdown::CoordinatedShutdown;
use concord::delivery::{ConsumerEnvelope, DeliveryError, ReliableEventSourced, ShardingProducer};
use concord::management::ReadinessCheck;
use concord::persistence::{Effect, EventSourced, EventSourcedEntity, Persistence};
use concord::sharding::{EntityContext, ShardRegion};
use concord_core::delivery::DeliverySettings;
use concord_core::Address;

use super::entities::{message, sharding_error, LogMessage, LogValues, TIMEOUT};

/// The name of each node's log producer (`sample-log@<node address>`).
pub const LOG_PRODUCER: &str = "sample-log";
/// First wait before the producer is started again after a failed start.
const SUPERVISOR_BACKOFF_MIN: std::time::Duration = std::time::Duration::from_millis(200);
/// Longest wait between two starts.
const SUPERVISOR_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// A value appended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Appended(pub String);

/// The event-sourced log.
pub struct LogBehavior;

impl EventSourced for LogBehavior {
    type Command = LogMessage;
    type Event = Appended;
    type State = Vec<String>;
    type Reply = LogValues;

    async fn handle_command(
        &mut self,
        ctx: &mut EntityContext,
        values: &Vec<String>,
        command: LogMessage,
    ) -> Effect<Self> {
        let node = ctx.node().to_string();
        match command {
            LogMessage::Append(v) => Effect::persist(Appended(v)).reply(LogValues {
                values: Vec::new(),
                node,
            }),
            LogMessage::Get => Effect::reply(LogValues {
                values: values.clone(),
                node,
            }),
        }
    }

    fn apply_event(values: &mut Vec<String>, event: &Appended) {
        values.push(event.0.clone());
    }
}

/// The log's region.
pub type LogRegion = ShardRegion<EventSourcedEntity<ReliableEventSourced<LogBehavior>>>;

type LogProducer = ShardingProducer<EventSourcedEntity<ReliableEventSourced<LogBehavior>>>;

/// The reliable logs of this node: the region and the node's producer (kept running by
/// [`ReliableLogs::start`]).
#[derive(Clone)]
pub struct ReliableLogs {
    region: LogRegion,
    persistence: Persistence,
    settings: DeliverySettings,
    node: Arc<OnceLock<Address>>,
    producer: Arc<tokio::sync::Mutex<Option<LogProducer>>>,
}

impl ReliableLogs {
    /// Over `region`, with producers on `persistence`'s store.
    pub fn new(region: LogRegion, persistence: Persistence, settings: DeliverySettings) -> Self {
        ReliableLogs {
            region,
            persistence,
            settings,
            node: Arc::new(OnceLock::new()),
            producer: Arc::new(tokio::sync::Mutex::new(None)),
        }
    }

    /// Once the node runs: its address (the producer's id and metrics label), and a task
    /// that keeps the node's producer running until the node shuts down — started at once
    /// (a node restarted with its data sends what its durable queue holds without waiting
    /// for a request) and again, with a backoff, whenever it stops (its store failed).
    /// `ready` is met while the producer runs.
    pub fn start(&self, node: Address, shutdown: CoordinatedShutdown, ready: ReadinessCheck) {
        let _ = self.node.set(node);
        let logs = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.started() => {}
                () = logs.supervise(&ready) => {}
            }
        });
    }

    async fn supervise(&self, ready: &ReadinessCheck) {
        let mut backoff = SUPERVISOR_BACKOFF_MIN;
        loop {
            match self.producer().await {
                Ok(p) => {
                    backoff = SUPERVISOR_BACKOFF_MIN;
                    ready.set(true);
                    p.stopped().await;
                    ready.set(false);
                    let mut slot = self.producer.lock().await;
                    if slot.as_ref().is_some_and(|q| q.is_same(&p)) {
                        *slot = None;
                    }
                }
                Err(e) => {
                    // At most one line per backoff; a warning once it keeps failing (the
                    // first attempts of a starting node wait for the journal).
                    let retry_in_ms = backoff.as_millis() as u64;
                    if backoff >= SUPERVISOR_BACKOFF_MAX {
                        tracing::warn!(error = %e, retry_in_ms, "the sample log producer did not start; trying again");
                    } else {
                        tracing::info!(error = %e, retry_in_ms, "the sample log producer did not start yet; trying again");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(SUPERVISOR_BACKOFF_MAX);
                }
            }
        }
    }

    /// The node's producer, started (recovering its durable queue) if it is not running.
    async fn producer(&self) -> Result<LogProducer, String> {
        let mut slot = self.producer.lock().await;
        if let Some(p) = slot.as_ref() {
            return Ok(p.clone());
        }
        let node = self
            .node
            .get()
            .cloned()
            .ok_or_else(|| "the node is starting".to_string())?;
        let stores = self
            .persistence
            .stores_within(TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        let p = ShardingProducer::start_durable(
            format!("{LOG_PRODUCER}@{node}"),
            &node,
            self.region.clone(),
            self.settings.clone(),
            &stores,
        )
        .await
        .map_err(|e| e.to_string())?;
        *slot = Some(p.clone());
        Ok(p)
    }

    /// `POST /sample/log/{id}`: 202 once the value is in the durable queue.
    pub async fn append(&self, id: &str, value: String) -> Response {
        let producer = match self.producer().await {
            Ok(p) => p,
            Err(e) => {
                return message(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("the log producer is not running: {e}"),
                )
            }
        };
        match producer.send(id, &LogMessage::Append(value)).await {
            Ok(_) => StatusCode::ACCEPTED.into_response(),
            Err(e @ DeliveryError::BufferFull { .. }) => {
                message(StatusCode::SERVICE_UNAVAILABLE, e)
            }
            Err(e @ (DeliveryError::BadEntityId | DeliveryError::Encoding(_))) => {
                message(StatusCode::BAD_REQUEST, e)
            }
            Err(e) => {
                // Stopped (its store failed): the next request starts it again.
                let mut slot = self.producer.lock().await;
                // Only this very producer: one started meanwhile runs on.
                if slot.as_ref().is_some_and(|p| p.is_same(&producer)) {
                    *slot = None;
                }
                message(StatusCode::SERVICE_UNAVAILABLE, e)
            }
        }
    }

    /// `GET /sample/log/{id}`.
    pub async fn read(&self, id: &str) -> Response {
        match self
            .region
            .entity_ref(id.to_string())
            .ask(&ConsumerEnvelope::Direct(LogMessage::Get), TIMEOUT)
            .await
        {
            Ok(Ok(r)) => match r.reply {
                Some(v) => {
                    Json(serde_json::json!({ "id": id, "values": v.values, "node": v.node }))
                        .into_response()
                }
                None => message(StatusCode::SERVICE_UNAVAILABLE, "the log did not answer"),
            },
            Ok(Err(e)) => message(StatusCode::SERVICE_UNAVAILABLE, e),
            Err(e) => sharding_error(e),
        }
    }
}
