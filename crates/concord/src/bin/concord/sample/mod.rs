//! The sample application `concord node --sample` runs (off by default): a singleton that
//! says where it runs, a replicated counter, and two sharded entity types (`counter` and
//! `log`, see [`entities`]) — the smallest use of Cluster Singleton, Distributed Data and
//! Cluster Sharding, visible over the management port:
//!
//! - `GET /sample/singleton` → `{"node": "<address of the member running the singleton>",
//!   "incarnation": <u64 unique per start of the instance>}`, asked through the proxy.
//! - `POST /sample/ddata/counter/{key}` (form `delta=<i64>`, `consistency=local|majority|all`)
//!   → `{"value": <i64>}`: the write at that consistency, then the value read at the same
//!   consistency; a `PNCounter` under the durable key `sample-counter-{key}`.
//! - `GET /sample/ddata/counter/{key}?consistency=local|majority|all` → `{"value": <i64>}`
//!   or 404.
//!
//! - `POST|GET /sample/chat`: the `chat` pub-sub topic ([`chat`]).
//! - `POST /sample/echo`: the partitioned `echo` service, N = 2 ([`echo`]).
//! - `POST|GET /sample/route`: the `sample-echo` service and its routers ([`route`]).
//!
//! A read or write that cannot reach its consistency answers 503 with the reason; bad input
//! 400. Writes obey the management API's access rules (read-only, bearer token). Each start
//! and stop of the sample singleton is logged with its incarnation and the wall clock
//! (`at_ms`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Form, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use concord_core::ddata::{Key, PNCounter, ReadConsistency, WriteConsistency};
use serde::{Deserialize, Serialize};
use tracing::info;

use concord::ddata::{DdataError, Replicator};
use concord::layer::{Layer, LayerContext, LayerError, LayerStarted};
use concord::remote::{ProtocolRegistry, TransportSettings};
use concord::singleton::{ClusterSingletons, SingletonContext, SingletonRef};

pub mod chat;
pub mod echo;
pub mod entities;
pub mod persistent;
pub mod reliable_log;
pub mod route;

pub use entities::SampleEntities;

/// The sample singleton's name.
pub const SINGLETON_NAME: &str = "sample";
/// Durable key pattern of the sample counters.
pub const COUNTER_KEYS: &str = "sample-counter-*";
/// Timeout of majority and all reads and writes of the sample routes.
const TIMEOUT: Duration = Duration::from_secs(3);

/// What the sample singleton is asked.
#[derive(Debug, Serialize, Deserialize)]
pub enum SampleMessage {
    /// Where do you run?
    Where,
}

/// Its answer: (node address, incarnation).
pub type Where = (String, u64);

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Adds the sample singleton to `singletons`; returns its proxy.
pub fn add_singleton(singletons: &mut ClusterSingletons) -> SingletonRef<SampleMessage, Where> {
    singletons.singleton(
        SINGLETON_NAME,
        |mut ctx: SingletonContext<SampleMessage, Where>| async move {
            let node = ctx.node().to_string();
            let incarnation = ctx.incarnation();
            info!(incarnation, at_ms = wall_ms(), "sample singleton started");
            while let Some(env) = ctx.recv().await {
                match env.message {
                    SampleMessage::Where => {
                        if let Some(r) = env.reply {
                            r.reply((node.clone(), incarnation));
                        }
                    }
                }
            }
            info!(incarnation, at_ms = wall_ms(), "sample singleton stopped");
        },
    )
}

/// The sample routes as a layer (no protocol of its own).
pub struct SampleLayer {
    replicator: Replicator,
    singleton: SingletonRef<SampleMessage, Where>,
    entities: SampleEntities,
    pubsub: concord::pubsub::PubSub,
    receptionist: concord::receptionist::Receptionist,
    services: concord::services::PartitionedServices,
    options: SampleOptions,
    readiness: concord::management::ReadinessChecks,
}

/// The sample's settings (`concord node --sample ...`).
#[derive(Clone, Copy, Debug)]
pub struct SampleOptions {
    /// Instances of the `echo` service (`--sample-echo-instances`, default
    /// [`echo::INSTANCES`]).
    pub echo_instances: u32,
}

impl SampleLayer {
    /// Routes over the node's replicator, the sample singleton's proxy, the sample's
    /// entity types (from [`entities::init`]), the node's receptionist (the
    /// `sample-echo` service, and pub-sub on it: the `chat` topic) and its partitioned
    /// services (the `echo` service).
    pub fn new(
        replicator: Replicator,
        singleton: SingletonRef<SampleMessage, Where>,
        entities: SampleEntities,
        receptionist: concord::receptionist::Receptionist,
        services: concord::services::PartitionedServices,
        options: SampleOptions,
    ) -> Self {
        SampleLayer {
            replicator,
            singleton,
            entities,
            pubsub: concord::pubsub::PubSub::new(receptionist.clone()),
            receptionist,
            services,
            options,
            readiness: concord::management::ReadinessChecks::new(),
        }
    }

    /// The node's readiness checks: the sample registers `sample-log-producer` there, met
    /// while the node's log producer runs (`GET /ready` fails meanwhile: a node whose
    /// producer still recovers its queue would make `POST /sample/log` wait).
    pub fn readiness(mut self, checks: concord::management::ReadinessChecks) -> Self {
        self.readiness = checks;
        self
    }
}

#[derive(Clone)]
struct SampleState {
    replicator: Replicator,
    singleton: SingletonRef<SampleMessage, Where>,
}

impl Layer for SampleLayer {
    fn name(&self) -> &'static str {
        "sample"
    }

    fn register(
        &mut self,
        _: &mut ProtocolRegistry,
        _: &TransportSettings,
    ) -> Result<(), LayerError> {
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        if let entities::Logs::Reliable(r) = &self.entities.logs {
            r.start(
                ctx.cluster.self_address().clone(),
                ctx.coordinated_shutdown.clone(),
                self.readiness.register("sample-log-producer"),
            );
        }
        let state = SampleState {
            replicator: self.replicator,
            singleton: self.singleton,
        };
        let entity_routes = entities::EntityRoutes {
            counters: self.entities.counters,
            logs: self.entities.logs,
        };
        let mut routes = Router::new()
            .route("/sample/singleton", get(singleton))
            .route(
                "/sample/ddata/counter/{key}",
                get(read_counter).post(write_counter),
            )
            .with_state(state)
            .merge(
                Router::new()
                    .route(
                        "/sample/counter/{id}",
                        get(entities::get_counter).post(entities::post_counter),
                    )
                    .route(
                        "/sample/log/{id}",
                        get(entities::get_log).post(entities::post_log),
                    )
                    .with_state(entity_routes),
            );
        if let Some(carts) = self.entities.carts {
            routes = routes.merge(persistent::cart_routes(carts));
        }
        routes = routes.merge(chat::routes(
            &self.pubsub,
            ctx.cluster.self_address().to_string(),
        ));
        routes = routes.merge(echo::routes(&self.services, self.options.echo_instances));
        routes = routes.merge(route::routes(
            self.receptionist,
            ctx.cluster.self_address().to_string(),
        ));
        Ok(LayerStarted {
            routes: Some(routes),
            ..LayerStarted::default()
        })
    }
}

fn message(status: StatusCode, m: impl std::fmt::Display) -> Response {
    (
        status,
        Json(serde_json::json!({ "message": m.to_string() })),
    )
        .into_response()
}

async fn singleton(State(s): State<SampleState>) -> Response {
    match s.singleton.ask(&SampleMessage::Where, TIMEOUT).await {
        Ok((node, incarnation)) => {
            Json(serde_json::json!({ "node": node, "incarnation": incarnation })).into_response()
        }
        Err(e) => message(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the sample singleton did not answer: {e}"),
        ),
    }
}

/// `local`, `majority` or `all`.
#[derive(Debug, Clone, Copy, Deserialize, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Level {
    #[default]
    Local,
    Majority,
    All,
}

#[derive(Debug, Deserialize)]
struct ReadQuery {
    #[serde(default)]
    consistency: Level,
}

#[derive(Debug, Deserialize)]
struct WriteForm {
    delta: i64,
    #[serde(default)]
    consistency: Level,
}

fn key(k: &str) -> Result<Key<PNCounter>, concord_core::ddata::replicator::InvalidKey> {
    Key::new(format!("sample-counter-{k}"))
}

fn value(c: &PNCounter) -> i64 {
    let v = c.value();
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

fn ddata_error(e: DdataError) -> Response {
    let status = match e {
        DdataError::GetFailure(_) | DdataError::UpdateTimeout(_) | DdataError::Stopped => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        DdataError::StoreFailure(_) => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    };
    message(status, e)
}

async fn read_counter(
    State(s): State<SampleState>,
    Path(k): Path<String>,
    query: Result<Query<ReadQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(q)) = query else {
        return message(
            StatusCode::BAD_REQUEST,
            "consistency must be local, majority or all",
        );
    };
    let key = match key(&k) {
        Ok(k) => k,
        Err(e) => return message(StatusCode::BAD_REQUEST, e),
    };
    match s.replicator.get(&key, read_level(q.consistency)).await {
        Ok(Some(c)) => Json(serde_json::json!({ "value": value(&c) })).into_response(),
        Ok(None) => message(StatusCode::NOT_FOUND, format!("no counter `{k}`")),
        Err(e) => ddata_error(e),
    }
}

async fn write_counter(
    State(s): State<SampleState>,
    Path(k): Path<String>,
    form: Result<Form<WriteForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else {
        return message(
            StatusCode::BAD_REQUEST,
            "form fields: delta=<i64>, consistency=local|majority|all",
        );
    };
    let key = match key(&k) {
        Ok(k) => k,
        Err(e) => return message(StatusCode::BAD_REQUEST, e),
    };
    let consistency = match f.consistency {
        Level::Local => WriteConsistency::Local,
        Level::Majority => WriteConsistency::majority(TIMEOUT.as_millis() as u64),
        Level::All => WriteConsistency::All {
            timeout_ms: TIMEOUT.as_millis() as u64,
        },
    };
    let me = s.replicator.replica();
    let delta = f.delta;
    if let Err(e) = s
        .replicator
        .update(&key, consistency, PNCounter::new, move |c| {
            c.increment(me, delta)
        })
        .await
    {
        return ddata_error(e);
    }
    // The value after the write, read at the same level (so it includes what the
    // replicas written to had from others).
    match s.replicator.get(&key, read_level(f.consistency)).await {
        Ok(Some(c)) => Json(serde_json::json!({ "value": value(&c) })).into_response(),
        Ok(None) => message(StatusCode::INTERNAL_SERVER_ERROR, "the counter vanished"),
        Err(e) => ddata_error(e),
    }
}

fn read_level(l: Level) -> ReadConsistency {
    match l {
        Level::Local => ReadConsistency::Local,
        Level::Majority => ReadConsistency::majority(TIMEOUT.as_millis() as u64),
        Level::All => ReadConsistency::All {
            timeout_ms: TIMEOUT.as_millis() as u64,
        },
    }
}
