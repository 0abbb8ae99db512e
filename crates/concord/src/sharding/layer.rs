//! [`Sharding`]: the layer that runs a node's entity types, and the handles an application
//! sends through ([`ShardRegion`], [`EntityRef`]).

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use concord_core::group::MachineGroup;
use concord_core::sharding::{shard_id, ClusterSharding, ShardingSettings};
use concord_core::ProtocolId;
use futures_channel::oneshot;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::codec::ShardingCodec;
use super::command::{AskFailure, ShardingCommand};
use super::effects::{ShardingEffects, TypeEffects};
use super::entity::{decode, encode, erase_factory, Entity, ErasedFactory};
use super::error::ShardingError;
use super::extractor::Extractor;
use super::remember_store::RememberStore;
use super::routes;
use crate::config::ConfigSection;
use crate::coordinated_shutdown::{CoordinatedShutdownSettings, Phase};
use crate::ddata::durable::DurableStore;
use crate::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};
use crate::runtime::BackloggedOutbound;

/// The layer's name in errors and logs.
const LAYER: &str = "sharding";

/// Requests queued from the handles before the driver takes them (callers wait when full).
const COMMAND_QUEUE: usize = 8_192;
/// The file of the sharding replicator's durable keys in the data directory.
pub const DURABLE_FILE: &str = "sharding-ddata.redb";

/// One entity type to run, typed away.
struct Spec {
    type_name: String,
    settings: Option<ShardingSettings>,
    factory: Option<ErasedFactory>,
    extractor: Option<Extractor>,
    proxy: bool,
}

/// The Cluster Sharding layer: start entity types with [`Sharding::init`] (the same on
/// every node), add the layer to the node, then send messages through the returned
/// [`ShardRegion`]s.
///
/// ```no_run
/// # use concord::sharding::{Entity, EntityContext};
/// # #[derive(Default)] struct Room { lines: Vec<String> }
/// # impl Entity for Room {
/// #     type Message = String; type Reply = usize; type State = Vec<String>;
/// #     async fn handle(&mut self, _: &mut EntityContext, m: String) -> usize { self.lines.push(m); self.lines.len() }
/// #     fn hand_off(&mut self) -> Option<Vec<String>> { Some(std::mem::take(&mut self.lines)) }
/// # }
/// # async fn demo(config: concord::Config) -> Result<(), Box<dyn std::error::Error>> {
/// use concord::sharding::Sharding;
/// use std::time::Duration;
/// let mut sharding = Sharding::new();
/// let rooms = sharding.init("room", |_id: &str, state: Option<Vec<String>>| Room {
///     lines: state.unwrap_or_default(),
/// }, None);
/// let node = concord::Node::builder(config).layer(sharding).start().await?;
/// let lobby = rooms.entity_ref("lobby");
/// lobby.tell(&"hello".to_string()).await?;
/// let lines = lobby.ask(&"again".to_string(), Duration::from_secs(3)).await?;
/// # drop((node, lines)); Ok(()) }
/// ```
pub struct Sharding {
    specs: Vec<Spec>,
    commands: mpsc::Receiver<ShardingCommand>,
    commands_tx: mpsc::Sender<ShardingCommand>,
    inbound: Option<mpsc::Receiver<Inbound<concord_core::sharding::ShardingMessage>>>,
}

impl Default for Sharding {
    fn default() -> Self {
        Self::new()
    }
}

/// The region of one entity type on this node: the way to its entities.
pub struct ShardRegion<E: Entity> {
    type_name: Arc<str>,
    commands: mpsc::Sender<ShardingCommand>,
    _types: PhantomData<fn() -> E>,
}

impl<E: Entity> Clone for ShardRegion<E> {
    fn clone(&self) -> Self {
        ShardRegion {
            type_name: self.type_name.clone(),
            commands: self.commands.clone(),
            _types: PhantomData,
        }
    }
}

/// One entity, by id: `tell` and `ask` it wherever it lives.
pub struct EntityRef<E: Entity> {
    region: ShardRegion<E>,
    entity_id: String,
}

impl<E: Entity> Clone for EntityRef<E> {
    fn clone(&self) -> Self {
        EntityRef {
            region: self.region.clone(),
            entity_id: self.entity_id.clone(),
        }
    }
}

impl Sharding {
    /// No entity types yet.
    pub fn new() -> Self {
        let (commands_tx, commands) = mpsc::channel(COMMAND_QUEUE);
        Sharding {
            specs: Vec::new(),
            commands,
            commands_tx,
            inbound: None,
        }
    }

    fn add<E: Entity>(&mut self, spec: Spec) -> ShardRegion<E> {
        let type_name: Arc<str> = Arc::from(spec.type_name.as_str());
        self.specs.push(spec);
        ShardRegion {
            type_name,
            commands: self.commands_tx.clone(),
            _types: PhantomData,
        }
    }

    /// Runs entity type `entity_type` on this node (Akka's `ClusterSharding.init`): `factory`
    /// builds an entity from its id and the state it handed over when it moved (`None` for a
    /// fresh one). `settings`: `None` takes the node's `[sharding]` configuration. On a node
    /// without the settings' role the region is a proxy (it hosts nothing). Shards by the
    /// default extractor: [`concord_core::sharding::shard_id`] of the entity id.
    pub fn init<E, F>(
        &mut self,
        entity_type: &str,
        factory: F,
        settings: Option<ShardingSettings>,
    ) -> ShardRegion<E>
    where
        E: Entity,
        F: Fn(&str, Option<E::State>) -> E + Send + Sync + 'static,
    {
        self.add(Spec {
            type_name: entity_type.to_string(),
            settings,
            factory: Some(erase_factory::<E, F>(factory)),
            extractor: None,
            proxy: false,
        })
    }

    /// Like [`Sharding::init`] with an own message extractor: entity id → shard id. It must
    /// give the same shard for an id on every node, build and platform, and keep the
    /// number of distinct shards small (Akka: about ten per planned node).
    pub fn init_with_extractor<E, F>(
        &mut self,
        entity_type: &str,
        factory: F,
        settings: Option<ShardingSettings>,
        extractor: impl Fn(&str) -> String + Send + Sync + 'static,
    ) -> ShardRegion<E>
    where
        E: Entity,
        F: Fn(&str, Option<E::State>) -> E + Send + Sync + 'static,
    {
        self.add(Spec {
            type_name: entity_type.to_string(),
            settings,
            factory: Some(erase_factory::<E, F>(factory)),
            extractor: Some(Arc::new(extractor)),
            proxy: false,
        })
    }

    /// A proxy-only region of `entity_type` (Akka's `ShardRegion` proxy): it routes
    /// messages to the entities on the nodes that host them and hosts nothing itself.
    pub fn init_proxy<E: Entity>(
        &mut self,
        entity_type: &str,
        settings: Option<ShardingSettings>,
    ) -> ShardRegion<E> {
        self.add(Spec {
            type_name: entity_type.to_string(),
            settings,
            factory: None,
            extractor: None,
            proxy: true,
        })
    }
}

impl<E: Entity> ShardRegion<E> {
    /// The entity type.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    /// The shards this node's region hosts, with their numbers of entities (Akka's
    /// `GetShardRegionState`).
    ///
    /// # Errors
    /// [`ShardingError::Stopped`] if the node has stopped.
    pub async fn local_shards(&self) -> Result<Vec<(String, u32)>, ShardingError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(ShardingCommand::LocalShards {
                type_name: self.type_name.clone(),
                reply,
            })
            .await
            .map_err(|_| ShardingError::Stopped)?;
        rx.await.map_err(|_| ShardingError::Stopped)
    }

    /// The entity `id` (nothing is created until a message arrives).
    pub fn entity_ref(&self, id: impl Into<String>) -> EntityRef<E> {
        EntityRef {
            region: self.clone(),
            entity_id: id.into(),
        }
    }

    async fn send(
        &self,
        entity: &str,
        message: &E::Message,
        ask: Option<oneshot::Sender<Result<Vec<u8>, AskFailure>>>,
    ) -> Result<(), ShardingError> {
        let payload = encode(message).map_err(ShardingError::Encoding)?;
        self.send_payload(entity, payload, ask).await
    }

    async fn send_payload(
        &self,
        entity: &str,
        payload: Vec<u8>,
        ask: Option<oneshot::Sender<Result<Vec<u8>, AskFailure>>>,
    ) -> Result<(), ShardingError> {
        self.commands
            .send(ShardingCommand::Tell {
                type_name: self.type_name.clone(),
                entity: entity.to_string(),
                payload,
                ask,
                trace: crate::host::trace::current(),
            })
            .await
            .map_err(|_| ShardingError::Stopped)
    }
}

impl<E: Entity> EntityRef<E> {
    /// The entity's id.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// Sends `message`; returns once this node's region has taken it (waiting while the
    /// region pushes back). Delivered once and in send order with this node's other
    /// messages to the entity, also across a rebalance or a graceful leave, unless a node
    /// involved crashes (docs/SHARDING.md).
    ///
    /// # Errors
    /// [`ShardingError::Encoding`] if the message does not encode;
    /// [`ShardingError::Stopped`] if the node has stopped.
    pub async fn tell(&self, message: &E::Message) -> Result<(), ShardingError> {
        self.region.send(&self.entity_id, message, None).await
    }

    /// Sends `message` and waits up to `timeout` for the entity's reply.
    ///
    /// # Errors
    /// [`ShardingError::Timeout`] (the reply may still come later and is dropped),
    /// [`ShardingError::Dropped`] (a buffer was full: the message was not delivered),
    /// [`ShardingError::Failed`] (the message or reply did not decode, the entity's
    /// mailbox was full, or its handler panicked), [`ShardingError::Encoding`],
    /// [`ShardingError::Stopped`].
    pub async fn ask(
        &self,
        message: &E::Message,
        timeout: Duration,
    ) -> Result<E::Reply, ShardingError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let pending = match tokio::time::timeout_at(deadline, self.send_ask(message)).await {
            Ok(p) => p?,
            Err(_) => return Err(ShardingError::Timeout(timeout)),
        };
        match tokio::time::timeout_at(deadline, pending.reply()).await {
            Ok(r) => r,
            Err(_) => Err(ShardingError::Timeout(timeout)),
        }
    }

    /// Sends `message` as an ask and returns once this node's region has taken it (in send
    /// order with this node's other messages to the entity, like [`EntityRef::tell`]); the
    /// reply is awaited separately with [`PendingReply::reply`]. Lets a caller keep several
    /// asks in flight to one entity in a known order (reliable delivery does).
    ///
    /// # Errors
    /// [`ShardingError::Encoding`], [`ShardingError::Stopped`].
    pub fn send_ask(
        &self,
        message: &E::Message,
    ) -> impl std::future::Future<Output = Result<PendingReply<E::Reply>, ShardingError>> + Send + '_
    {
        // Encoded before the future: it holds no reference to the message.
        let payload = encode(message).map_err(ShardingError::Encoding);
        async move {
            let (tx, rx) = oneshot::channel();
            self.region
                .send_payload(&self.entity_id, payload?, Some(tx))
                .await?;
            Ok(PendingReply {
                rx,
                _reply: PhantomData,
            })
        }
    }
}

/// The reply of an ask sent with [`EntityRef::send_ask`].
pub struct PendingReply<R> {
    rx: oneshot::Receiver<Result<Vec<u8>, AskFailure>>,
    _reply: PhantomData<fn() -> R>,
}

impl<R: serde::de::DeserializeOwned> PendingReply<R> {
    /// Waits for the reply (bound it with a timeout: a reply lost with a crashed node
    /// never comes).
    ///
    /// # Errors
    /// As [`EntityRef::ask`], but for the timeout.
    pub async fn reply(self) -> Result<R, ShardingError> {
        match self.rx.await {
            Err(_) => Err(ShardingError::Stopped),
            Ok(Err(AskFailure::Dropped(reason))) => {
                Err(ShardingError::Dropped(reason.as_str().to_string()))
            }
            Ok(Err(AskFailure::Failed(why))) => Err(ShardingError::Failed(why)),
            Ok(Ok(bytes)) => decode(&bytes).map_err(ShardingError::Encoding),
        }
    }
}

impl Layer for Sharding {
    fn name(&self) -> &'static str {
        "sharding"
    }

    fn config_sections(&self) -> &'static [&'static str] {
        &[<super::ShardingConfig as ConfigSection>::KEY]
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        self.inbound = Some(register_protocol(
            "sharding",
            registry,
            settings,
            ProtocolId::SHARDING,
            ShardingCodec,
        )?);
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let Sharding {
            specs,
            commands,
            commands_tx,
            inbound,
        } = *self;
        let inbound = inbound.ok_or(LayerError::NotRegistered { layer: LAYER })?;
        let me = ctx.cluster.self_unique_address().clone();
        let now = ctx.clock.now_ms();
        let mut machines = MachineGroup::new(ProtocolId::SHARDING);
        let mut types = BTreeMap::new();
        let mut needs_durable = false;
        let mut needs_remember_store = false;
        let section = ctx.section::<super::ShardingConfig>(LAYER)?;
        for spec in specs {
            if types.contains_key(&spec.type_name) {
                return Err(LayerError::Config {
                    layer: LAYER,
                    message: format!("entity type `{}` is started twice", spec.type_name),
                });
            }
            let mut settings = spec
                .settings
                .unwrap_or_else(|| section.settings(&spec.type_name, &ctx.config));
            settings.type_name = spec.type_name.clone();
            settings.proxy_only |= spec.proxy;
            if settings.remember_entities {
                match settings.remember_entities_store {
                    concord_core::sharding::RememberEntitiesStore::DistributedData => {
                        needs_durable = true
                    }
                    concord_core::sharding::RememberEntitiesStore::External => {
                        needs_remember_store = true
                    }
                }
            }
            let shards = settings.number_of_shards;
            let extractor: Extractor = spec
                .extractor
                .unwrap_or_else(|| Arc::new(move |id: &str| shard_id(&id.to_string(), shards)));
            let mailbox = settings.entity_mailbox_size;
            let machine = ClusterSharding::new(settings, me.clone(), rand::random(), now);
            machines.insert(spec.type_name.clone(), machine);
            types.insert(
                spec.type_name,
                TypeEffects::new(spec.factory, extractor, mailbox),
            );
        }
        let dir = ctx.config.data_dir_path();
        let store = if needs_durable {
            let store = DurableStore::open_file(&dir, DURABLE_FILE).map_err(storage_error)?;
            let records = store.load_all().map_err(storage_error)?;
            for (key, envelope) in &records {
                // Keys are `shard-<type>-...`: each belongs to its type's machine.
                if let Some(machine) = machines.iter_mut().find_map(|(t, m)| {
                    key.strip_prefix("shard-")
                        .is_some_and(|rest| rest.starts_with(&format!("{t}-")))
                        .then_some(m)
                }) {
                    machine.load_durable(key, envelope).map_err(|e| {
                        storage_error(format!(
                            "durable store {}: record `{key}`: {e}",
                            store.file().display()
                        ))
                    })?;
                }
            }
            info!(file = %store.file().display(), keys = records.len(), "sharding durable keys loaded");
            Some(Arc::new(store))
        } else {
            None
        };
        let remember = if needs_remember_store {
            Some(Arc::new(RememberStore::open(&dir).map_err(storage_error)?))
        } else {
            None
        };
        let names: Vec<String> = types.keys().cloned().collect();
        let sender = ProtocolSender::new(
            ctx.transport.clone(),
            ProtocolId::SHARDING,
            Arc::new(ShardingCodec),
        );
        let wake = Arc::new(tokio::sync::Notify::new());
        let outbound = BackloggedOutbound::new(sender, wake.clone());
        let effects = ShardingEffects::with_types(types, store, remember, me.address.to_string())
            .reporting_load(ctx.local_load.clone())
            .reading_cluster_load(ctx.cluster_load.clone());
        ctx.start_host(
            machines,
            effects,
            HostPorts::new(Box::new(outbound), inbound)
                .commands(commands)
                .wake(wake),
        );
        add_shutdown_tasks(&ctx, commands_tx.clone());
        Ok(LayerStarted {
            routes: Some(routes::routes(commands_tx.clone(), names.clone())),
            dashboard: vec![routes::dashboard_panel(commands_tx, names)],
        })
    }
}

/// The region hand-over in `cluster-sharding-shutdown-region` (entities stopped if it
/// does not finish in time) and the coordinators' hand-over in `cluster-exiting`.
fn add_shutdown_tasks(ctx: &LayerContext, commands: mpsc::Sender<ShardingCommand>) {
    let phase = Phase::ClusterShardingShutdownRegion;
    let budget = CoordinatedShutdownSettings::from_config(&ctx.config.coordinated_shutdown)
        .timeout(phase)
        .saturating_sub(Duration::from_millis(500))
        .max(Duration::from_millis(500));
    let region = commands.clone();
    if let Err(e) =
        ctx.coordinated_shutdown
            .add_task(phase, "sharding-shutdown-region", move || async move {
                let (done, rx) = oneshot::channel();
                if region
                    .send(ShardingCommand::GracefulShutdown { done })
                    .await
                    .is_err()
                {
                    return;
                }
                if tokio::time::timeout(budget, rx).await.is_err() {
                    warn!("shards were not all handed over in time; stopping their entities here");
                    let _ = region.send(ShardingCommand::StopHosting).await;
                }
            })
    {
        warn!(error = %e, "cannot add the sharding hand-over to coordinated shutdown");
    }
    if let Err(e) = ctx.coordinated_shutdown.add_task(
        Phase::ClusterExiting,
        "sharding-coordinator-exiting",
        move || async move {
            let (done, rx) = oneshot::channel();
            if commands
                .send(ShardingCommand::SelfExiting { done })
                .await
                .is_ok()
            {
                let _ = rx.await;
            }
        },
    ) {
        warn!(error = %e, "cannot add the shard coordinator's hand-over to coordinated shutdown");
    }
}

/// A store of the layer that cannot be opened or read.
fn storage_error(e: impl std::fmt::Display) -> LayerError {
    LayerError::Storage {
        layer: LAYER,
        message: e.to_string(),
    }
}
