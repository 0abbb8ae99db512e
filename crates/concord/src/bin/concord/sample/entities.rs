//! The sample's sharded entities (`concord node --sample`):
//!
//! - `counter` — when the node runs persistence, the event-sourced
//!   [`super::persistent::PersistentCounter`] (and a durable-state `cart` beside it);
//!   otherwise a counter whose every increment is written with `WriteMajority` to
//!   Distributed Data (the `PNCounter` `sample-counter-entity-{id}`) before it answers, so
//!   an acknowledged increment survives the crash of the node hosting it; a new
//!   incarnation reads its value with `ReadMajority` before anything else.
//! - `log` — when the node runs persistence, event-sourced and fed by each node's reliable
//!   producer with a durable queue ([`super::reliable_log`]): every value a node accepted
//!   once, in that node's order, across crashes; otherwise the values it was told, in the
//!   order it received them, in memory only; they move with the entity when its shard moves
//!   (no idle passivation: a passivated log would forget them).
//!
//! Routes (management port, the management API's access rules for writes):
//! `POST /sample/counter/{id}` (form `delta=<i64>`) → `{"id", "value", "node"}` once
//! written; `GET /sample/counter/{id}` → the same without a change; `POST /sample/log/{id}`
//! (form `value=<string>`) → 202 once this node's reliable producer stored it (or, without
//! persistence, once this node's region has the message);
//! `GET /sample/log/{id}` → `{"id", "values": [...], "node"}`.

use std::time::Duration;

use axum::extract::{Form, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use concord_core::ddata::{Key, PNCounter, ReadConsistency, WriteConsistency};
use serde::{Deserialize, Serialize};

use concord::ddata::Replicator;
use concord::persistence::{DurableStateEntity, Persistence};
use concord::sharding::{Entity, EntityContext, ShardRegion, Sharding, ShardingError};

use super::persistent::{Cart, Counters, PersistentCounter, CART_TYPE};
use super::reliable_log::{LogBehavior, ReliableLogs};

/// The counter entity type's name.
pub const COUNTER_TYPE: &str = "counter";
/// The log entity type's name.
pub const LOG_TYPE: &str = "log";
/// How long a route waits for an entity, and a counter for its quorum.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);
/// Longest log value accepted, bytes.
pub const MAX_LOG_VALUE: usize = 4096;

/// What a counter is asked.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CounterMessage {
    /// Add this (may be negative) and answer the new value.
    Add(i64),
    /// Answer the value.
    Get,
}

/// A counter's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CounterValue {
    /// The value, or why there is none (a quorum not reached).
    pub value: Result<i64, String>,
    /// The node hosting the entity.
    pub node: String,
}

/// The sample counter (see the module docs).
pub struct Counter {
    key: Option<Key<PNCounter>>,
    replicator: Replicator,
    /// The value as last read or written; `None` until read.
    value: Option<i64>,
}

fn clamp(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

impl Counter {
    /// The counter `id`, backed by `replicator`.
    pub fn new(id: &str, replicator: Replicator) -> Self {
        Counter {
            key: Key::new(format!("sample-counter-entity-{id}")).ok(),
            replicator,
            value: None,
        }
    }

    /// Reads the value with `ReadMajority` (merging it into the local replica).
    async fn load(&mut self) -> Result<i64, String> {
        if let Some(v) = self.value {
            return Ok(v);
        }
        let key = self.key.as_ref().ok_or("the id is too long")?;
        let majority = ReadConsistency::majority(TIMEOUT.as_millis() as u64);
        let v = match self.replicator.get(key, majority).await {
            Ok(c) => c.map_or(0, |c| clamp(c.value())),
            Err(e) => return Err(e.to_string()),
        };
        self.value = Some(v);
        Ok(v)
    }

    async fn add(&mut self, delta: i64) -> Result<i64, String> {
        self.load().await?;
        let key = self.key.as_ref().ok_or("the id is too long")?;
        let me = self.replicator.replica();
        let written = self
            .replicator
            .update(
                key,
                WriteConsistency::majority(TIMEOUT.as_millis() as u64),
                PNCounter::new,
                move |c| c.increment(me, delta),
            )
            .await;
        // The local replica has the increment either way (as Akka's UpdateTimeout): this
        // entity, the only writer, reads it back.
        let local = self
            .replicator
            .get(key, ReadConsistency::Local)
            .await
            .map_err(|e| e.to_string())?
            .map_or(0, |c| clamp(c.value()));
        self.value = Some(local);
        written.map_err(|e| e.to_string())?;
        Ok(local)
    }
}

impl Entity for Counter {
    type Message = CounterMessage;
    type Reply = CounterValue;
    type State = ();

    async fn handle(&mut self, ctx: &mut EntityContext, message: CounterMessage) -> CounterValue {
        let value = match message {
            CounterMessage::Add(delta) => self.add(delta).await,
            CounterMessage::Get => self.load().await,
        };
        CounterValue {
            value,
            node: ctx.node().to_string(),
        }
    }
}

/// What a log is sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum LogMessage {
    /// Keep this value.
    Append(String),
    /// Answer every value.
    Get,
}

/// A log's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogValues {
    /// The values, in the order the entity received them.
    pub values: Vec<String>,
    /// The node hosting the entity.
    pub node: String,
}

/// The sample log (see the module docs).
#[derive(Debug, Default)]
pub struct Log {
    values: Vec<String>,
}

impl Entity for Log {
    type Message = LogMessage;
    type Reply = LogValues;
    type State = Vec<String>;

    async fn handle(&mut self, ctx: &mut EntityContext, message: LogMessage) -> LogValues {
        match message {
            LogMessage::Append(v) => {
                self.values.push(v);
                LogValues {
                    values: Vec::new(),
                    node: ctx.node().to_string(),
                }
            }
            LogMessage::Get => LogValues {
                values: self.values.clone(),
                node: ctx.node().to_string(),
            },
        }
    }

    fn hand_off(&mut self) -> Option<Vec<String>> {
        Some(std::mem::take(&mut self.values))
    }
}

/// The sample's `log`: in memory and told directly, or (when the node runs persistence)
/// event-sourced and fed by each node's reliable producer ([`ReliableLogs`]).
#[derive(Clone)]
pub enum Logs {
    /// In memory, `tell`.
    Plain(ShardRegion<Log>),
    /// Event-sourced, reliable delivery with a durable queue.
    Reliable(ReliableLogs),
}

/// The sample's entity types, as started.
pub struct SampleEntities {
    /// `counter`.
    pub counters: Counters,
    /// `log`.
    pub logs: Logs,
    /// `cart`, when the node runs persistence.
    pub carts: Option<ShardRegion<DurableStateEntity<Cart>>>,
}

/// The sample's entity types, started in `sharding` (the node's `[sharding]` settings;
/// logs are never passivated): with `persistence`, the event-sourced counter and the cart;
/// without, the Distributed Data counter. Errors if `[sharding]` does not parse or
/// validate.
pub fn init(
    sharding: &mut Sharding,
    config: &concord::Config,
    replicator: Replicator,
    persistence: Option<&Persistence>,
) -> Result<SampleEntities, concord::config::ConfigError> {
    let (counters, carts) = match persistence {
        Some(p) => (
            Counters::EventSourced(p.init_event_sourced(
                sharding,
                COUNTER_TYPE,
                |_| PersistentCounter,
                None,
            )),
            Some(p.init_durable_state(sharding, CART_TYPE, |_| Cart, None)),
        ),
        None => (
            Counters::Replicated(sharding.init(
                COUNTER_TYPE,
                move |id: &str, _: Option<()>| Counter::new(id, replicator.clone()),
                None,
            )),
            None,
        ),
    };
    let mut log_settings = config
        .section::<concord::sharding::ShardingConfig>()?
        .settings(LOG_TYPE, config);
    log_settings.passivation_idle_timeout_ms = None;
    let logs = match persistence {
        Some(p) => {
            let settings = config
                .section::<concord::delivery::ReliableDeliveryConfig>()?
                .settings();
            let region = concord::delivery::init_event_sourced_consumer(
                p,
                sharding,
                LOG_TYPE,
                |_| LogBehavior,
                Some(log_settings),
                settings.clone(),
            );
            Logs::Reliable(ReliableLogs::new(region, p.clone(), settings))
        }
        None => Logs::Plain(sharding.init(
            LOG_TYPE,
            |_id: &str, state: Option<Vec<String>>| Log {
                values: state.unwrap_or_default(),
            },
            Some(log_settings),
        )),
    };
    Ok(SampleEntities {
        counters,
        logs,
        carts,
    })
}

/// The routes' state.
#[derive(Clone)]
pub(crate) struct EntityRoutes {
    pub(crate) counters: Counters,
    pub(crate) logs: Logs,
}

pub(crate) fn message(status: StatusCode, m: impl std::fmt::Display) -> Response {
    (
        status,
        Json(serde_json::json!({ "message": m.to_string() })),
    )
        .into_response()
}

pub(crate) fn sharding_error(e: ShardingError) -> Response {
    let status = match e {
        ShardingError::Encoding(_) => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    message(status, e)
}

#[derive(Debug, Deserialize)]
pub(crate) struct DeltaForm {
    delta: i64,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ValueForm {
    value: String,
}

fn counter_answer(id: &str, r: Result<CounterValue, ShardingError>) -> Response {
    match r {
        Ok(CounterValue {
            value: Ok(value),
            node,
        }) => Json(serde_json::json!({ "id": id, "value": value, "node": node })).into_response(),
        Ok(CounterValue {
            value: Err(why), ..
        }) => message(StatusCode::SERVICE_UNAVAILABLE, why),
        Err(e) => sharding_error(e),
    }
}

pub(crate) async fn post_counter(
    State(s): State<EntityRoutes>,
    Path(id): Path<String>,
    form: Result<Form<DeltaForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else {
        return message(StatusCode::BAD_REQUEST, "form field: delta=<i64>");
    };
    let r = s.counters.ask(&id, CounterMessage::Add(f.delta)).await;
    counter_answer(&id, r)
}

pub(crate) async fn get_counter(State(s): State<EntityRoutes>, Path(id): Path<String>) -> Response {
    let r = s.counters.ask(&id, CounterMessage::Get).await;
    counter_answer(&id, r)
}

pub(crate) async fn post_log(
    State(s): State<EntityRoutes>,
    Path(id): Path<String>,
    form: Result<Form<ValueForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else {
        return message(StatusCode::BAD_REQUEST, "form field: value=<string>");
    };
    if f.value.len() > MAX_LOG_VALUE {
        return message(
            StatusCode::BAD_REQUEST,
            format!("a value is at most {MAX_LOG_VALUE} bytes"),
        );
    }
    let logs = match s.logs {
        Logs::Reliable(r) => return r.append(&id, f.value).await,
        Logs::Plain(logs) => logs,
    };
    match logs.entity_ref(id).tell(&LogMessage::Append(f.value)).await {
        Ok(()) => StatusCode::ACCEPTED.into_response(),
        Err(e) => sharding_error(e),
    }
}

pub(crate) async fn get_log(State(s): State<EntityRoutes>, Path(id): Path<String>) -> Response {
    let logs = match s.logs {
        Logs::Reliable(r) => return r.read(&id).await,
        Logs::Plain(logs) => logs,
    };
    match logs
        .entity_ref(id.clone())
        .ask(&LogMessage::Get, TIMEOUT)
        .await
    {
        Ok(v) => Json(serde_json::json!({ "id": id, "values": v.values, "node": v.node }))
            .into_response(),
        Err(e) => sharding_error(e),
    }
}
