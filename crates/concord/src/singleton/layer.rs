//! [`ClusterSingletons`]: the layer that hosts a node's named singletons (manager and
//! proxy of each), and [`SingletonRef`], the proxy handle to one of them.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use concord_core::group::MachineGroup;
use concord_core::singleton::{ClusterSingleton, SingletonSettings};
use concord_core::ProtocolId;
use futures_channel::oneshot;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::mpsc;
use tracing::warn;

use super::codec::SingletonCodec;
use super::command::SingletonCommand;
use super::effects::{factory, Factory, Instance, SingletonEffects};
use super::instance::{Behaviour, Wire};
use crate::config::ConfigSection;
use crate::coordinated_shutdown::Phase;
use crate::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
use crate::lease::{FileLease, Lease};
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};
use crate::runtime::LaneOutbound;

/// The layer's name in errors and logs.
const LAYER: &str = "singleton";

const COMMAND_QUEUE: usize = 4096;

/// Why a message to a singleton was not answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SingletonError {
    /// No reply within the timeout (the instance may be moving, or the message was lost).
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The proxy's buffer was full and this message was the oldest: dropped.
    #[error("dropped: {0}")]
    Dropped(String),
    /// The message or the reply does not encode or decode.
    #[error("encoding: {0}")]
    Encoding(String),
    /// The node is shutting down.
    #[error("the singleton layer has stopped")]
    Stopped,
}

/// A singleton to host, typed away for the driver.
struct Spec {
    settings: Option<SingletonSettings>,
    make: Box<dyn FnOnce(concord_core::Address) -> Factory + Send>,
}

/// The Cluster Singleton layer; add singletons with [`ClusterSingletons::singleton`],
/// then add the layer to the node.
///
/// ```no_run
/// # async fn demo(config: concord::Config) -> Result<(), Box<dyn std::error::Error>> {
/// use concord::singleton::{ClusterSingletons, SingletonContext};
/// use std::time::Duration;
/// let mut singletons = ClusterSingletons::new();
/// // A counter that exists once in the cluster, on the oldest node.
/// let counter = singletons.singleton("counter", |mut ctx: SingletonContext<u64, u64>| async move {
///     let mut total = 0;
///     while let Some(env) = ctx.recv().await {
///         total += env.message;
///         if let Some(r) = env.reply {
///             r.reply(total);
///         }
///     }
///     // Stopped: handed over (or the node leaves); state would be saved here.
/// });
/// let node = concord::Node::builder(config).layer(singletons).start().await?;
/// counter.tell(&5).await?;
/// let total = counter.ask(&1, Duration::from_secs(3)).await?;
/// # drop((node, total)); Ok(()) }
/// ```
pub struct ClusterSingletons {
    specs: BTreeMap<String, Spec>,
    commands: mpsc::Receiver<SingletonCommand>,
    commands_tx: mpsc::Sender<SingletonCommand>,
    inbound: Option<mpsc::Receiver<Inbound<concord_core::singleton::SingletonMessage>>>,
}

impl Default for ClusterSingletons {
    fn default() -> Self {
        Self::new()
    }
}

/// The proxy to one singleton: messages go to wherever its instance runs, in order.
pub struct SingletonRef<M, R> {
    name: String,
    commands: mpsc::Sender<SingletonCommand>,
    _types: PhantomData<fn(M) -> R>,
}

impl<M, R> Clone for SingletonRef<M, R> {
    fn clone(&self) -> Self {
        SingletonRef {
            name: self.name.clone(),
            commands: self.commands.clone(),
            _types: PhantomData,
        }
    }
}

impl ClusterSingletons {
    /// No singletons yet.
    pub fn new() -> Self {
        let (commands_tx, commands) = mpsc::channel(COMMAND_QUEUE);
        ClusterSingletons {
            specs: BTreeMap::new(),
            commands,
            commands_tx,
            inbound: None,
        }
    }

    /// Hosts singleton `name` (settings from the node's `[singleton]` and
    /// `[singleton-proxy]`): `behaviour` runs on the oldest node whenever it is started
    /// there and must return when its context's `recv` gives `None`. Returns the proxy.
    pub fn singleton<M: Wire, R: Wire>(
        &mut self,
        name: &str,
        behaviour: impl Behaviour<M, R>,
    ) -> SingletonRef<M, R> {
        self.add(name, None, behaviour)
    }

    /// Like [`ClusterSingletons::singleton`] with explicit settings (`settings.name` is
    /// replaced by `name`).
    pub fn singleton_with_settings<M: Wire, R: Wire>(
        &mut self,
        name: &str,
        settings: SingletonSettings,
        behaviour: impl Behaviour<M, R>,
    ) -> SingletonRef<M, R> {
        self.add(name, Some(settings), behaviour)
    }

    fn add<M: Wire, R: Wire>(
        &mut self,
        name: &str,
        settings: Option<SingletonSettings>,
        behaviour: impl Behaviour<M, R>,
    ) -> SingletonRef<M, R> {
        let behaviour = Arc::new(behaviour);
        let make = Box::new(move |node: concord_core::Address| -> Factory {
            factory::<M, R, _>(behaviour, node)
        });
        self.specs.insert(name.to_string(), Spec { settings, make });
        SingletonRef {
            name: name.to_string(),
            commands: self.commands_tx.clone(),
            _types: PhantomData,
        }
    }
}

impl<M: Serialize, R: DeserializeOwned> SingletonRef<M, R> {
    /// The singleton's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    async fn send(
        &self,
        message: &M,
        ask: Option<oneshot::Sender<Result<Vec<u8>, String>>>,
    ) -> Result<(), SingletonError> {
        let payload =
            postcard::to_stdvec(message).map_err(|e| SingletonError::Encoding(e.to_string()))?;
        self.commands
            .send(SingletonCommand::Tell {
                name: self.name.clone(),
                payload,
                ask,
                trace: crate::host::trace::current(),
            })
            .await
            .map_err(|_| SingletonError::Stopped)
    }

    /// Sends `message` to the instance, wherever it runs (buffered while it moves).
    pub async fn tell(&self, message: &M) -> Result<(), SingletonError> {
        self.send(message, None).await
    }

    /// Sends `message` and waits up to `timeout` for the instance's reply.
    pub async fn ask(&self, message: &M, timeout: Duration) -> Result<R, SingletonError> {
        let (tx, rx) = oneshot::channel();
        self.send(message, Some(tx)).await?;
        match tokio::time::timeout(timeout, rx).await {
            Err(_) => Err(SingletonError::Timeout(timeout)),
            Ok(Err(_)) => Err(SingletonError::Stopped),
            Ok(Ok(Err(reason))) => Err(SingletonError::Dropped(reason)),
            Ok(Ok(Ok(bytes))) => {
                postcard::from_bytes(&bytes).map_err(|e| SingletonError::Encoding(e.to_string()))
            }
        }
    }
}

impl Layer for ClusterSingletons {
    fn name(&self) -> &'static str {
        "singleton"
    }

    fn config_sections(&self) -> &'static [&'static str] {
        &[
            <super::SingletonConfig as ConfigSection>::KEY,
            <super::SingletonProxyConfig as ConfigSection>::KEY,
        ]
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        self.inbound = Some(register_protocol(
            "singleton",
            registry,
            settings,
            ProtocolId::SINGLETON,
            SingletonCodec,
        )?);
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let ClusterSingletons {
            specs,
            commands,
            commands_tx,
            inbound,
        } = *self;
        let inbound = inbound.ok_or(LayerError::NotRegistered { layer: LAYER })?;
        let me = ctx.cluster.self_unique_address().clone();
        let status_tx = commands_tx.clone();
        let mut machines = MachineGroup::new(ProtocolId::SINGLETON);
        let mut instances = BTreeMap::new();
        let section = ctx.section::<super::SingletonConfig>(LAYER)?;
        let proxy_section = ctx.section::<super::SingletonProxyConfig>(LAYER)?;
        for (name, spec) in specs {
            let mut settings = spec
                .settings
                .unwrap_or_else(|| section.settings(&name, &proxy_section, &ctx.config));
            settings.name = name.clone();
            let lease: Option<Arc<dyn Lease>> = settings.use_lease.then(|| {
                let lm = &ctx.config.cluster.split_brain_resolver.lease_majority;
                let dir = if lm.lease_directory.is_empty() {
                    std::env::temp_dir().join("concord-leases")
                } else {
                    lm.lease_directory.clone().into()
                };
                Arc::new(FileLease::new(
                    dir,
                    &format!("{}-singleton-{name}", ctx.config.system),
                    me.address.to_string(),
                    lm.release_after,
                )) as Arc<dyn Lease>
            });
            let machine = ClusterSingleton::new(settings, me.clone(), rand::random());
            machines.insert(name.clone(), machine);
            instances.insert(name, Instance::new((spec.make)(me.address.clone()), lease));
        }
        let sender = ProtocolSender::new(
            ctx.transport.clone(),
            ProtocolId::SINGLETON,
            Arc::new(SingletonCodec),
        );
        let effects = SingletonEffects::with_instances(instances, me.address.to_string());
        ctx.start_host(
            machines,
            effects,
            HostPorts::new(Box::new(LaneOutbound::new(sender)), inbound).commands(commands),
        );
        // The hand-over of a leaving node runs before remoting closes.
        if let Err(e) = ctx.coordinated_shutdown.add_task(
            Phase::ClusterExiting,
            "singleton-exiting",
            move || async move {
                let (done, rx) = oneshot::channel();
                if commands_tx
                    .send(SingletonCommand::SelfExiting { done })
                    .await
                    .is_ok()
                {
                    let _ = rx.await;
                }
            },
        ) {
            warn!(error = %e, "cannot add the singleton hand-over to coordinated shutdown");
        }
        Ok(LayerStarted {
            routes: None,
            dashboard: vec![dashboard_panel(status_tx)],
        })
    }
}

/// The dashboard's `singleton` panel: `{"singletons": [{"name", "role", "state" (this
/// node's manager state), "runningHere", "runsOn" (where this node's proxy sends), "buffered"}]}`.
fn dashboard_panel(
    commands: tokio::sync::mpsc::Sender<SingletonCommand>,
) -> crate::management::DashboardPanel {
    crate::management::DashboardPanel::new("singleton", move || {
        let commands = commands.clone();
        async move {
            let (reply, rx) = oneshot::channel();
            if commands
                .send(SingletonCommand::Status { reply })
                .await
                .is_err()
            {
                return serde_json::json!({"error": "the singleton layer has stopped"});
            }
            match rx.await {
                Ok(s) => serde_json::json!({ "singletons": s }),
                Err(_) => serde_json::json!({"error": "the singleton layer has stopped"}),
            }
        }
    })
}
