//! [`KeyValueStore`]: the layer that runs a node's part of the key-value store —
//! registers the protocol, opens `<data-dir>/kv.redb` (before anything is served), starts
//! the driver thread, serves the HTTP API on `kv.http-port`, and hands this node's keys to
//! their owners inside coordinated shutdown (`cluster-exiting`) before it leaves.

use std::sync::Arc;
use std::time::Duration;

use concord_core::kv::{KvMachine, KvMessage, KvSettings};
use concord_core::ProtocolId;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::codec::KvCodec;
use super::command::KvCommand;
use super::effects::KvEffects;
use super::handle::KvStore;
use super::storage::RedbStorage;
use crate::config::ConfigSection;
use crate::coordinated_shutdown::Phase;
use crate::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
use crate::management::ManagementAccess;
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};
use crate::runtime::{HostThread, LaneOutbound};

/// The layer's name in errors and logs.
const LAYER: &str = "key-value-store";

/// Requests queued from the handles before the host takes them (callers wait when full).
const COMMAND_QUEUE: usize = 8192;

/// The key-value store layer; add it with `Node::builder(config).layer(layer)` and use the
/// [`KvStore`] handle returned with it. Every node that hosts data (every member, or those
/// with `kv.role`) must run it.
pub struct KeyValueStore {
    settings: Option<KvSettings>,
    commands: mpsc::Receiver<KvCommand>,
    handle: KvStore,
    inbound: Option<mpsc::Receiver<Inbound<KvMessage>>>,
}

impl KeyValueStore {
    /// The layer (settings from the node's `[kv]`) and its handle.
    pub fn new() -> (KeyValueStore, KvStore) {
        Self::build(None)
    }

    /// The layer with explicit settings (the node's `[kv]` is ignored but for the HTTP
    /// API's port and host).
    pub fn with_settings(settings: KvSettings) -> (KeyValueStore, KvStore) {
        Self::build(Some(settings))
    }

    fn build(settings: Option<KvSettings>) -> (KeyValueStore, KvStore) {
        let (tx, rx) = mpsc::channel(COMMAND_QUEUE);
        let handle = KvStore {
            commands: tx,
            http: Arc::default(),
        };
        (
            KeyValueStore {
                settings,
                commands: rx,
                handle: handle.clone(),
                inbound: None,
            },
            handle,
        )
    }
}

impl Layer for KeyValueStore {
    fn name(&self) -> &'static str {
        "key-value-store"
    }

    fn config_sections(&self) -> &'static [&'static str] {
        &[<super::KvConfig as ConfigSection>::KEY]
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        self.inbound = Some(register_protocol(
            "key-value-store",
            registry,
            settings,
            ProtocolId::KEY_VALUE,
            KvCodec,
        )?);
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let KeyValueStore {
            settings,
            commands,
            handle,
            inbound,
        } = *self;
        let inbound = inbound.ok_or(LayerError::NotRegistered { layer: LAYER })?;
        let section = ctx.section::<super::KvConfig>(LAYER)?;
        let settings = settings.unwrap_or_else(|| section.settings());
        let me = ctx.cluster.self_unique_address().clone();
        let storage = RedbStorage::open(&ctx.config.data_dir_path()).map_err(storage_error)?;
        let file = storage.file().to_path_buf();
        let clock = ctx.clock;
        let machine = KvMachine::new(
            settings,
            me.clone(),
            storage,
            rand::random(),
            clock.now_ms(),
        )
        .map_err(|e| storage_error(format!("{}: {e}", file.display())))?;
        info!(file = %file.display(), keys = machine.store_ref().key_count(), "key-value store opened");
        let sender = ProtocolSender::new(
            ctx.transport.clone(),
            ProtocolId::KEY_VALUE,
            Arc::new(KvCodec),
        );
        // The host blocks on its storage: a thread of its own, on the node's runtime.
        ctx.start_host(
            machine,
            KvEffects::new(me.address.to_string()),
            HostPorts::new(Box::new(LaneOutbound::new(sender)), inbound)
                .commands(commands)
                .thread(HostThread::Dedicated),
        );
        // A leaving node hands its keys to their owners before it goes.
        let waiting = handle.clone();
        if let Err(e) = ctx.coordinated_shutdown.add_task(
            Phase::ClusterExiting,
            "kv-handoff",
            move || async move {
                if !waiting.wait_handoff(Duration::from_secs(3600)).await {
                    warn!("key-value store: leaving before every key was handed off");
                }
            },
        ) {
            warn!(error = %e, "cannot add the key-value handoff to coordinated shutdown");
        }
        if let Some(port) = section.http_port {
            serve(&ctx, &section, &handle, port)?;
        }
        Ok(LayerStarted {
            routes: Some(super::http::status_router(handle.clone())),
            dashboard: vec![super::http::dashboard_panel(handle)],
        })
    }
}

/// Binds `kv.http-hostname:port` and serves the HTTP API (HTTPS with `[management.tls]`).
fn serve(
    ctx: &LayerContext,
    section: &super::KvConfig,
    store: &KvStore,
    port: u16,
) -> Result<(), LayerError> {
    let config = &ctx.config;
    let host = section.http_hostname.as_str();
    let bind = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let bound = |source: std::io::Error| LayerError::Bind {
        layer: LAYER,
        addr: bind.clone(),
        source,
    };
    let std_listener = std::net::TcpListener::bind(&bind).map_err(bound)?;
    std_listener.set_nonblocking(true).map_err(bound)?;
    let addr = std_listener.local_addr().map_err(bound)?;
    let listener = tokio::net::TcpListener::from_std(std_listener).map_err(bound)?;
    let tls = config
        .management
        .tls
        .as_ref()
        .map(crate::tls::TlsContext::for_management)
        .transpose()
        .map_err(|e| LayerError::Start {
            layer: LAYER,
            message: format!("key-value HTTPS: {e}"),
        })?;
    let access = ManagementAccess::for_data_api(
        config,
        host,
        addr,
        section.max_value_size.saturating_add(64 * 1024),
    );
    let app = super::http::router(store.clone(), access);
    let limits = section
        .http_limits()
        .fitted(ctx.transport.inbound_connections().1);
    crate::management::serve_app(listener, tls, app, ctx.cluster.clone(), "kv", limits);
    let _ = store.http.set(addr);
    info!(%addr, https = config.management.tls.is_some(), "key-value HTTP API listening");
    Ok(())
}

/// A store of the layer that cannot be opened or read.
fn storage_error(e: impl std::fmt::Display) -> LayerError {
    LayerError::Storage {
        layer: LAYER,
        message: e.to_string(),
    }
}
