//! [`DistributedData`]: the layer that runs a node's replicator — registers the protocol,
//! loads the durable keys (before anything is served), starts the driver task and serves
//! `GET /cluster/ddata`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use concord_core::ddata::replicator::DataTypeRegistry;
use concord_core::ddata::{Replicator as ReplicatorMachine, ReplicatorSettings};
use concord_core::ProtocolId;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tracing::{info, Instrument};

use super::codec::ReplicatorCodec;
use super::driver::Driver;
use super::durable::DurableStore;
use super::replicator::{Job, Replicator};
use crate::clock::Clock;
use crate::layer::{
    register_protocol, DriverInputs, Layer, LayerContext, LayerError, LayerStarted,
};
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};

/// Jobs queued from the handles before the driver takes them (callers wait when full).
const JOB_QUEUE: usize = 4096;
/// Housekeeping period (metrics, closed subscriptions).
const TICK: std::time::Duration = std::time::Duration::from_secs(1);

/// The Distributed Data layer; add it with `Node::builder(config).layer(layer)` and use
/// the [`Replicator`] handle returned with it.
pub struct DistributedData {
    settings: Option<ReplicatorSettings>,
    registry: DataTypeRegistry,
    jobs: mpsc::Receiver<Job>,
    handle: Replicator,
    inbound: Option<mpsc::Receiver<Inbound<concord_core::ddata::ReplicatorMessage>>>,
}

impl DistributedData {
    /// The layer (settings from the node's `[distributed-data]`) and its handle. The
    /// handle queues calls until the node has started.
    pub fn new() -> (DistributedData, Replicator) {
        Self::build(None)
    }

    /// The layer with explicit settings (the node's `[distributed-data]` is ignored).
    pub fn with_settings(settings: ReplicatorSettings) -> (DistributedData, Replicator) {
        Self::build(Some(settings))
    }

    fn build(settings: Option<ReplicatorSettings>) -> (DistributedData, Replicator) {
        let (tx, rx) = mpsc::channel(JOB_QUEUE);
        let replica = Arc::new(AtomicU64::new(0));
        let handle = Replicator { jobs: tx, replica };
        (
            DistributedData {
                settings,
                registry: DataTypeRegistry::default(),
                jobs: rx,
                handle: handle.clone(),
                inbound: None,
            },
            handle,
        )
    }

    /// Registers a data type before start (every node must register the types it
    /// replicates, so that it can merge values it receives before it uses them itself).
    pub fn register<T: concord_core::ddata::ReplicatedType>(mut self) -> Self
    where
        T::Delta: Serialize + DeserializeOwned,
    {
        self.registry.register::<T>();
        self
    }
}

fn error(message: impl std::fmt::Display) -> LayerError {
    LayerError {
        layer: "distributed-data",
        message: message.to_string(),
    }
}

impl Layer for DistributedData {
    fn name(&self) -> &'static str {
        "distributed-data"
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        self.inbound = Some(register_protocol(
            "distributed-data",
            registry,
            settings,
            ProtocolId::DISTRIBUTED_DATA,
            ReplicatorCodec,
        )?);
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let DistributedData {
            settings,
            registry,
            jobs,
            handle,
            inbound,
        } = *self;
        let inbound = inbound.ok_or_else(|| error("started before it was registered"))?;
        let settings = settings.unwrap_or_else(|| ctx.config.replicator_settings());
        let me = ctx.cluster.self_unique_address().clone();
        handle.replica.store(me.uid, Ordering::Relaxed);
        let clock = Clock::new();
        let mut machine = ReplicatorMachine::new(
            settings.clone(),
            me.clone(),
            registry,
            rand::random(),
            clock.now_ms(),
        );
        // Durable keys are loaded before the replicator serves anything.
        let store = if settings.durable_keys.is_empty() {
            None
        } else {
            let dir = ctx.config.data_dir_path();
            let store = DurableStore::open(&dir).map_err(error)?;
            let records = store.load_all().map_err(error)?;
            for (key, envelope) in &records {
                machine.load_durable(key, envelope).map_err(|e| {
                    error(format!(
                        "durable store {}: record `{key}`: {e}",
                        store.file().display()
                    ))
                })?;
            }
            info!(file = %store.file().display(), keys = records.len(), "durable keys loaded");
            Some(Arc::new(store))
        };
        let sender = ProtocolSender::new(
            ctx.transport.clone(),
            ProtocolId::DISTRIBUTED_DATA,
            Arc::new(ReplicatorCodec),
        );
        let driver = Driver::new(machine, clock, sender, store, me.address.to_string());
        let inputs = DriverInputs::new(jobs, inbound, ctx.cluster.clone(), TICK);
        tokio::spawn(driver.run(inputs).instrument(tracing::info_span!("ddata")));
        Ok(LayerStarted {
            routes: Some(routes(handle)),
        })
    }
}

/// `GET /cluster/ddata`: the keys with type, size and durability.
pub(crate) fn routes(replicator: Replicator) -> Router {
    Router::new()
        .route("/cluster/ddata", get(list_keys))
        .with_state(replicator)
}

async fn list_keys(State(r): State<Replicator>) -> Response {
    match r.keys().await {
        Ok(keys) => Json(serde_json::json!({ "keys": keys })).into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "message": e.to_string() })),
        )
            .into_response(),
    }
}
