//! [`PersistenceLayer`]: starts the node's store from `[persistence]` and makes the
//! [`Persistence`] handle ready; and the handle's helpers that run persistent behaviours
//! as sharded entities.

use std::sync::Arc;

use tracing::{error, info, warn};

use super::config::{PersistenceConfig, PostgresConfig};
use super::durable_state::{DurableState, DurableStateEntity};
use super::event_sourced::EventSourced;
use super::event_sourced_entity::EventSourcedEntity;
use super::handle::Persistence;
use super::memory::InMemoryStore;
use super::postgres::PostgresStore;
use super::store::Stores;
use crate::config::ConfigSection;
use crate::coordinated_shutdown::Phase;
use crate::layer::{Layer, LayerContext, LayerError, LayerStarted};
use crate::remote::{ProtocolRegistry, TransportSettings};
use crate::sharding::{ShardRegion, Sharding};
use concord_core::sharding::ShardingSettings;

const NAME: &str = "persistence";

/// The persistence layer of a node: see [`Persistence::layer`].
pub struct PersistenceLayer {
    stores: Option<Stores>,
    handle: Persistence,
    journal: Option<
        tokio::sync::mpsc::Receiver<
            crate::remote::Inbound<concord_core::persistence::journal::JournalMessage>,
        >,
    >,
}

impl Persistence {
    /// The layer (add it to the node) and its handle. The store is `[persistence]`'s
    /// `store`: `"replicated"` (the default) replicates the journal on the cluster's own
    /// nodes; `"postgres"` connects at start (the entities' commands wait for it, up to
    /// 30 s) and creates the schema; `"memory"` is this process's memory.
    pub fn layer() -> (PersistenceLayer, Persistence) {
        let handle = Persistence::pending();
        (
            PersistenceLayer {
                stores: None,
                handle: handle.clone(),
                journal: None,
            },
            handle,
        )
    }

    /// The layer with `stores` instead of `[persistence].store` (an application's own
    /// store, or one [`InMemoryStore`] shared by the nodes of a test).
    pub fn layer_with(stores: Stores) -> (PersistenceLayer, Persistence) {
        let (mut layer, handle) = Persistence::layer();
        layer.stores = Some(stores);
        (layer, handle)
    }

    /// The sharding factory of event-sourced entity type `entity_type`: `behavior` builds
    /// a behaviour from an entity id. For [`Sharding::init`]; see also
    /// [`Persistence::init_event_sourced`].
    pub fn event_sourced<B, F>(
        &self,
        entity_type: &str,
        behavior: F,
    ) -> impl Fn(&str, Option<()>) -> EventSourcedEntity<B> + Send + Sync + 'static
    where
        B: EventSourced,
        F: Fn(&str) -> B + Send + Sync + 'static,
    {
        let entity_type: Arc<str> = Arc::from(entity_type);
        let handle = self.clone();
        move |id: &str, _| {
            EventSourcedEntity::new(behavior(id), entity_type.clone(), handle.clone())
        }
    }

    /// Runs event-sourced entity type `entity_type` sharded (Akka's
    /// `ClusterSharding.init(Entity(typeKey)(ctx => EventSourcedBehavior(...)))`): each
    /// entity's persistence id is `<entity_type>|<entity id>`. An `ask` answers
    /// `Result<Reply, PersistenceError>`.
    pub fn init_event_sourced<B, F>(
        &self,
        sharding: &mut Sharding,
        entity_type: &str,
        behavior: F,
        settings: Option<ShardingSettings>,
    ) -> ShardRegion<EventSourcedEntity<B>>
    where
        B: EventSourced,
        F: Fn(&str) -> B + Send + Sync + 'static,
    {
        let factory = self.event_sourced(entity_type, behavior);
        sharding.init(entity_type, factory, settings)
    }

    /// Runs durable-state entity type `entity_type` sharded.
    pub fn init_durable_state<B, F>(
        &self,
        sharding: &mut Sharding,
        entity_type: &str,
        behavior: F,
        settings: Option<ShardingSettings>,
    ) -> ShardRegion<DurableStateEntity<B>>
    where
        B: DurableState,
        F: Fn(&str) -> B + Send + Sync + 'static,
    {
        let entity_type_arc: Arc<str> = Arc::from(entity_type);
        let handle = self.clone();
        sharding.init(
            entity_type,
            move |id: &str, _: Option<()>| {
                DurableStateEntity::new(behavior(id), entity_type_arc.clone(), handle.clone())
            },
            settings,
        )
    }
}

/// The PostgreSQL URL from `url-file` (first line) or the `url-env` variable.
fn postgres_url(c: &PostgresConfig) -> Result<String, String> {
    if let Some(path) = &c.url_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("persistence.postgres.url-file {}: {e}", path.display()))?;
        let line = text.lines().next().unwrap_or("").trim().to_string();
        if line.is_empty() {
            return Err(format!(
                "persistence.postgres.url-file {} is empty",
                path.display()
            ));
        }
        return Ok(line);
    }
    std::env::var(&c.url_env).map_err(|_| {
        format!(
            "persistence.store = \"postgres\" needs the connection URL in persistence.postgres.url-file or the environment variable {}",
            c.url_env
        )
    })
}

impl Layer for PersistenceLayer {
    fn name(&self) -> &'static str {
        NAME
    }

    fn config_sections(&self) -> &'static [&'static str] {
        &[PersistenceConfig::KEY]
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        if self.stores.is_none() {
            self.journal = Some(crate::layer::register_protocol(
                NAME,
                registry,
                settings,
                concord_core::ProtocolId::JOURNAL,
                super::replicated::JournalCodec,
            )?);
        }
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let config: PersistenceConfig = ctx.section(NAME)?;
        let settings = config.settings();
        let config_error = |message: String| LayerError::Config {
            layer: NAME,
            message,
        };
        let node = ctx.cluster.self_address().to_string();
        let mut started = LayerStarted {
            routes: Some(super::routes::routes(self.handle.clone())),
            dashboard: Vec::new(),
        };
        if let Some(stores) = self.stores {
            self.handle.start(stores, settings);
            return Ok(started);
        }
        match config.store.as_str() {
            "replicated" | "" => {
                let inbound = self
                    .journal
                    .ok_or(LayerError::NotRegistered { layer: NAME })?;
                let journal = concord_core::persistence::journal::JournalSettings {
                    request_timeout_ms: u64::try_from(settings.write_timeout.as_millis())
                        .unwrap_or(u64::MAX),
                    stream_delay_ms: u64::try_from(config.events_delay.as_millis())
                        .unwrap_or(u64::MAX),
                    ..Default::default()
                };
                let store = super::replicated::start(&ctx, inbound, journal)?;
                info!(%node, "persistence: the replicated journal runs here");
                // A leaving node hands its copies to the replicas left before it goes (in
                // a list that shrank they may be the only way to the last writes).
                let leaving = store.clone();
                let exiting = node.clone();
                if let Err(e) = ctx.coordinated_shutdown.add_task(
                    Phase::ClusterExiting,
                    "journal-handoff",
                    move || async move {
                        if !leaving.wait_handed_over().await {
                            warn!(node = %exiting, "replicated journal: leaving before every copy was handed over");
                        }
                    },
                ) {
                    warn!(error = %e, "cannot add the journal's handoff to coordinated shutdown");
                }
                started.routes = started
                    .routes
                    .map(|r| r.merge(super::replicated::routes(store.clone())));
                started.dashboard.push(dashboard_panel(
                    "replicated",
                    self.handle.clone(),
                    Some(store.clone()),
                ));
                self.handle.start(Stores::of(store), settings);
            }
            "memory" => {
                started
                    .dashboard
                    .push(dashboard_panel("memory", self.handle.clone(), None));
                self.handle
                    .start(Stores::of(InMemoryStore::new()), settings);
            }
            "postgres" => {
                started
                    .dashboard
                    .push(dashboard_panel("postgres", self.handle.clone(), None));
                let url = postgres_url(&config.postgres).map_err(config_error)?;
                let pg = config.postgres.clone();
                let handle = self.handle.clone();
                let shutdown = ctx.coordinated_shutdown.clone();
                let connect = async move {
                    let mut backoff = std::time::Duration::from_millis(200);
                    loop {
                        match PostgresStore::connect(&url, pg.pool_size, pg.timeout).await {
                            Ok(store) => {
                                info!(%node, "persistence: PostgreSQL connected, schema ready");
                                handle.start(Stores::of(store), settings);
                                return;
                            }
                            Err(e) => {
                                error!(%node, error = %e, retry_in_ms = backoff.as_millis() as u64, "persistence: cannot start the PostgreSQL store");
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(std::time::Duration::from_secs(10));
                            }
                        }
                    }
                };
                // Until connected, or until the node shuts down.
                tokio::spawn(async move {
                    tokio::select! {
                        () = connect => {}
                        _ = shutdown.started() => {}
                    }
                });
            }
            other => return Err(config_error(format!("unknown persistence.store {other:?}"))),
        }
        Ok(started)
    }
}

/// The dashboard's `persistence` panel: `{"store", "ready" (the store is started: false
/// while PostgreSQL is not connected yet), "waits"?: [{"segment", "awaited": [..]}]}` (the
/// replicated journal's segments waiting for a ring change's handoff, as
/// `GET /persistence/journal/waits`).
fn dashboard_panel(
    store: &'static str,
    handle: Persistence,
    replicated: Option<super::replicated::ReplicatedStore>,
) -> crate::management::DashboardPanel {
    crate::management::DashboardPanel::new("persistence", move || {
        let (handle, replicated) = (handle.clone(), replicated.clone());
        async move {
            let mut v = serde_json::json!({"store": store, "ready": handle.stores().is_some()});
            if let Some(r) = replicated {
                v["waits"] = match r.waits().await {
                    Ok(w) => w
                        .into_iter()
                        .map(|(segment, awaited)| {
                            serde_json::json!({
                                "segment": segment,
                                "awaited": awaited.iter().map(ToString::to_string).collect::<Vec<_>>(),
                            })
                        })
                        .collect(),
                    Err(e) => serde_json::json!({"error": e.to_string()}),
                };
            }
            v
        }
    })
}
