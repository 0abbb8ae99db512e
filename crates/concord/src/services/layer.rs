//! [`ServicesLayer`]: the layer that runs partitioned services on a node.

use std::sync::Arc;
use std::time::Duration;

use concord_core::services::{ServicesMachine, ServicesMessage};
use concord_core::ProtocolId;
use tokio::sync::{mpsc, watch};
use tracing::warn;

use super::codec::ServicesCodec;
use super::config::ServicesConfig;
use super::effects::{ServicesCommand, ServicesEffects};
use super::handle::{PartitionedServices, ServicesSnapshot, Shared};
use crate::config::ConfigSection;
use crate::coordinated_shutdown::{CoordinatedShutdownSettings, Phase};
use crate::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};
use crate::runtime::LaneOutbound;

const LAYER: &str = "services";
const COMMAND_QUEUE: usize = 4096;

/// The partitioned-services layer (the original spec's partitioning); see
/// [`PartitionedServices`].
///
/// ```no_run
/// # async fn demo(config: concord::Config) -> Result<(), Box<dyn std::error::Error>> {
/// use concord::services::{InstancePolicy, Service, ServiceContext, ServicesLayer};
/// struct Echo;
/// impl Service for Echo {
///     type Message = String;
///     type Reply = String;
///     async fn handle(&mut self, ctx: &mut ServiceContext, text: String) -> String {
///         format!("{text} from {}", ctx.node())
///     }
/// }
/// let (layer, services) = ServicesLayer::new();
/// let node = concord::Node::builder(config).layer(layer).start().await?;
/// let echo = services.register("echo", InstancePolicy::Fixed(2), |_| Echo).await?;
/// let answer = echo.ask(&"hello".to_string(), std::time::Duration::from_secs(5)).await?;
/// # drop((node, answer)); Ok(()) }
/// ```
pub struct ServicesLayer {
    handle: PartitionedServices,
    commands: mpsc::Receiver<ServicesCommand>,
    commands_tx: mpsc::Sender<ServicesCommand>,
    shared: Arc<Shared>,
    inbound: Option<mpsc::Receiver<Inbound<ServicesMessage>>>,
}

impl ServicesLayer {
    /// The layer and its handle.
    pub fn new() -> (ServicesLayer, PartitionedServices) {
        let (commands_tx, commands) = mpsc::channel(COMMAND_QUEUE);
        let shared = Arc::new(Shared {
            snapshot: watch::channel(Arc::new(ServicesSnapshot::default())).0,
        });
        let handle = PartitionedServices {
            commands: commands_tx.clone(),
            shared: shared.clone(),
        };
        let layer = ServicesLayer {
            handle: handle.clone(),
            commands,
            commands_tx,
            shared,
            inbound: None,
        };
        (layer, handle)
    }
}

impl Layer for ServicesLayer {
    fn name(&self) -> &'static str {
        LAYER
    }

    fn config_sections(&self) -> &'static [&'static str] {
        &[<ServicesConfig as ConfigSection>::KEY]
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        self.inbound = Some(register_protocol(
            LAYER,
            registry,
            settings,
            ProtocolId::SERVICES,
            ServicesCodec,
        )?);
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let ServicesLayer {
            handle,
            commands,
            commands_tx,
            shared,
            inbound,
        } = *self;
        let inbound = inbound.ok_or(LayerError::NotRegistered { layer: LAYER })?;
        let config = ctx.section::<ServicesConfig>(LAYER)?;
        let me = ctx.cluster.self_unique_address().clone();
        let machine = ServicesMachine::new(me.clone(), config.settings(&ctx.config), me.uid);
        let effects = ServicesEffects::new(
            commands_tx.clone(),
            config.max_pending_asks,
            config.mailbox_size,
            ctx.cluster_load.clone(),
            shared.snapshot.clone(),
            me.address.clone(),
        );
        let sender = ProtocolSender::new(
            ctx.transport.clone(),
            ProtocolId::SERVICES,
            Arc::new(ServicesCodec),
        );
        ctx.start_host(
            machine,
            effects,
            HostPorts::new(Box::new(LaneOutbound::new(sender)), inbound).commands(commands),
        );
        add_drain_task(&ctx, &config, commands_tx, handle.clone());
        let panel = handle.clone();
        Ok(LayerStarted {
            routes: Some(super::routes::routes(handle)),
            dashboard: vec![crate::management::DashboardPanel::new(
                "services",
                move || {
                    let s = panel.clone();
                    async move { super::routes::services_json(&s) }
                },
            )],
        })
    }
}

/// In `cluster-sharding-shutdown-region` (before the node leaves), the node drains: the
/// leader hands its instances off; the task waits until it hosts nothing, at most
/// `services.drain-timeout` (or the phase's budget).
fn add_drain_task(
    ctx: &LayerContext,
    config: &ServicesConfig,
    commands: mpsc::Sender<ServicesCommand>,
    services: PartitionedServices,
) {
    let phase = Phase::ClusterShardingShutdownRegion;
    let budget = CoordinatedShutdownSettings::from_config(&ctx.config.coordinated_shutdown)
        .timeout(phase)
        .saturating_sub(Duration::from_millis(500))
        .max(Duration::from_millis(500))
        .min(config.drain_timeout);
    let result = ctx
        .coordinated_shutdown
        .add_task(phase, "services-drain", move || async move {
            if services.snapshot().registered.is_empty() {
                return;
            }
            if commands.send(ServicesCommand::Drain).await.is_err() {
                return;
            }
            let mut changes = services.subscribe();
            let drained = async {
                loop {
                    if changes.borrow_and_update().hosts_nothing {
                        return;
                    }
                    if changes.changed().await.is_err() {
                        return;
                    }
                }
            };
            if tokio::time::timeout(budget, drained).await.is_err() {
                warn!("services: this node's instances were not all handed off in time");
            }
        });
    if let Err(e) = result {
        warn!(error = %e, "cannot add the services drain to coordinated shutdown");
    }
}
