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
use concord_core::ddata::{Replicator as ReplicatorMachine, ReplicatorMessage, ReplicatorSettings};
use concord_core::ProtocolId;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tracing::info;

use super::codec::ReplicatorCodec;
use super::command::ReplicatorCommand;
use super::durable::DurableStore;
use super::effects::ReplicatorEffects;
use super::replicator::Replicator;
use crate::config::ConfigSection;
use crate::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};
use crate::runtime::{HostThread, LaneOutbound};

/// The layer's name in errors and logs.
const LAYER: &str = "distributed-data";

/// Commands queued from the handles before the host takes them (callers wait when full).
const COMMAND_QUEUE: usize = 4096;

/// The Distributed Data layer; add it with `Node::builder(config).layer(layer)` and use
/// the [`Replicator`] handle returned with it.
pub struct DistributedData {
    settings: Option<ReplicatorSettings>,
    registry: DataTypeRegistry,
    commands: mpsc::Receiver<ReplicatorCommand>,
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
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let replica = Arc::new(AtomicU64::new(0));
        let handle = Replicator {
            commands: tx,
            replica,
        };
        (
            DistributedData {
                settings,
                registry: DataTypeRegistry::default(),
                commands: rx,
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

impl Layer for DistributedData {
    fn name(&self) -> &'static str {
        "distributed-data"
    }

    fn config_sections(&self) -> &'static [&'static str] {
        &[<super::DistributedDataConfig as ConfigSection>::KEY]
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
            commands,
            handle,
            inbound,
        } = *self;
        let inbound = inbound.ok_or(LayerError::NotRegistered { layer: LAYER })?;
        let settings = match settings {
            Some(s) => s,
            None => ctx
                .section::<super::DistributedDataConfig>(LAYER)?
                .settings(&ctx.config),
        };
        let me = ctx.cluster.self_unique_address().clone();
        handle.replica.store(me.uid, Ordering::Relaxed);
        let clock = ctx.clock;
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
            let store = DurableStore::open(&dir).map_err(storage_error)?;
            let records = store.load_all().map_err(storage_error)?;
            for (key, envelope) in &records {
                machine.load_durable(key, envelope).map_err(|e| {
                    storage_error(format!(
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
        let node = me.address.to_string();
        let gossip_node = node.clone();
        let outbound = LaneOutbound::new(sender).with_observer(move |m, bytes| {
            if matches!(
                m,
                ReplicatorMessage::Status { .. } | ReplicatorMessage::Gossip { .. }
            ) {
                super::metrics::ddata_gossip_bytes(&gossip_node, bytes);
            }
        });
        // Durable writes block: a replicator with durable keys runs on a thread of its own.
        let thread = if store.is_some() {
            HostThread::Dedicated
        } else {
            HostThread::Task
        };
        let effects = ReplicatorEffects::new(store, node);
        ctx.start_host(
            machine,
            effects,
            HostPorts::new(Box::new(outbound), inbound)
                .commands(commands)
                .thread(thread),
        );
        Ok(LayerStarted {
            routes: Some(routes(handle.clone())),
            dashboard: vec![dashboard_panel(handle)],
        })
    }
}

/// `GET /cluster/ddata`: the keys with type, size and durability.
pub(crate) fn routes(replicator: Replicator) -> Router {
    Router::new()
        .route("/cluster/ddata", get(list_keys))
        .with_state(replicator)
}

/// The dashboard's `ddata` panel: `{"keys": [..]}` as `GET /cluster/ddata` answers.
fn dashboard_panel(replicator: Replicator) -> crate::management::DashboardPanel {
    crate::management::DashboardPanel::new("ddata", move || {
        let r = replicator.clone();
        async move {
            match r.keys().await {
                Ok(keys) => serde_json::json!({ "keys": keys }),
                Err(e) => serde_json::json!({ "error": e.to_string() }),
            }
        }
    })
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

/// A store of the layer that cannot be opened or read.
fn storage_error(e: impl std::fmt::Display) -> LayerError {
    LayerError::Storage {
        layer: LAYER,
        message: e.to_string(),
    }
}
