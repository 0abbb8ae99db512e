//! [`ReceptionistLayer`]: the layer that carries messages to registered handles and keeps
//! the registry clean; add it with the Distributed Data layer whose [`Replicator`] it uses.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use concord_core::receptionist::{ReceptionistEnvelope, ReceptionistMachine};
use concord_core::ProtocolId;
use tokio::sync::{mpsc, watch};

use super::codec::ReceptionistCodec;
use super::config::{PubSubConfig, ReceptionistConfig};
use super::effects::{ReceptionistCommand, ReceptionistEffects};
use super::handle::{Receptionist, Shared};
use crate::config::duration::ms;
use crate::config::ConfigSection;
use crate::ddata::Replicator;
use crate::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, TransportSettings};
use crate::runtime::LaneOutbound;

const LAYER: &str = "receptionist";
const COMMAND_QUEUE: usize = 4096;

/// The receptionist layer (Akka's cluster receptionist); see [`Receptionist`].
///
/// ```no_run
/// # async fn demo(config: concord::Config) -> Result<(), Box<dyn std::error::Error>> {
/// use concord::ddata::DistributedData;
/// use concord::receptionist::{ReceptionistLayer, ServiceKey};
/// let (ddata, replicator) = DistributedData::new();
/// let (layer, receptionist) = ReceptionistLayer::new(replicator);
/// let node = concord::Node::builder(config).layer(ddata).layer(layer).start().await?;
/// let key = ServiceKey::<String>::new("greeter")?;
/// let mut me = receptionist.register(&key).await?;
/// for instance in receptionist.find(&key).await?.reachable {
///     receptionist.tell(&key, &instance, &"hello".to_string()).await?;
/// }
/// let hello = me.recv().await;
/// # drop((node, hello)); Ok(()) }
/// ```
pub struct ReceptionistLayer {
    handle: Receptionist,
    commands: mpsc::Receiver<ReceptionistCommand>,
    replicator: Replicator,
    shared: Arc<Shared>,
    inbound: Option<mpsc::Receiver<Inbound<ReceptionistEnvelope>>>,
}

impl ReceptionistLayer {
    /// The layer and its handle, on `replicator` (the node's Distributed Data).
    pub fn new(replicator: Replicator) -> (ReceptionistLayer, Receptionist) {
        let (commands_tx, commands) = mpsc::channel(COMMAND_QUEUE);
        let shared = Arc::new(Shared {
            view: watch::channel(None).0,
            mailbox_size: AtomicU64::new(ReceptionistConfig::default().mailbox_size as u64),
            mailbox_bytes: AtomicU64::new(0),
            max_mailbox_bytes: AtomicU64::new(ReceptionistConfig::default().max_mailbox_bytes),
            node: std::sync::OnceLock::new(),
            pubsub: std::sync::OnceLock::new(),
            cluster_load: std::sync::OnceLock::new(),
        });
        let handle = Receptionist::new(commands_tx, replicator.clone(), shared.clone());
        let layer = ReceptionistLayer {
            handle: handle.clone(),
            commands,
            replicator,
            shared,
            inbound: None,
        };
        (layer, handle)
    }
}

impl Layer for ReceptionistLayer {
    fn name(&self) -> &'static str {
        LAYER
    }

    fn config_sections(&self) -> &'static [&'static str] {
        &[
            <ReceptionistConfig as ConfigSection>::KEY,
            <PubSubConfig as ConfigSection>::KEY,
        ]
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
            ProtocolId::RECEPTIONIST,
            ReceptionistCodec,
        )?);
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let ReceptionistLayer {
            handle,
            commands,
            replicator,
            shared,
            inbound,
        } = *self;
        let inbound = inbound.ok_or(LayerError::NotRegistered { layer: LAYER })?;
        let config = ctx.section::<ReceptionistConfig>(LAYER)?;
        let pubsub = ctx.section::<PubSubConfig>(LAYER)?;
        shared
            .mailbox_size
            .store(config.mailbox_size as u64, Ordering::Relaxed);
        shared
            .max_mailbox_bytes
            .store(config.max_mailbox_bytes, Ordering::Relaxed);
        let _ = shared.pubsub.set(pubsub);
        let _ = shared.cluster_load.set(ctx.cluster_load.clone());
        let me = ctx.cluster.self_unique_address().clone();
        let machine = ReceptionistMachine::new(me.clone(), config.max_registrations);
        let effects = ReceptionistEffects::new(
            replicator,
            handle.clone(),
            shared.view.clone(),
            (
                ms(config.pruning_interval),
                ms(config.prune_removed_older_than),
            ),
            me.address.to_string(),
        );
        let sender = ProtocolSender::new(
            ctx.transport.clone(),
            ProtocolId::RECEPTIONIST,
            Arc::new(ReceptionistCodec),
        );
        ctx.start_host(
            machine,
            effects,
            HostPorts::new(Box::new(LaneOutbound::new(sender)), inbound).commands(commands),
        );
        let _ = shared.node.set(me.address.to_string());
        let panel_handle = handle.clone();
        Ok(LayerStarted {
            routes: Some(super::routes::routes(handle)),
            dashboard: vec![crate::management::DashboardPanel::new(
                "receptionist",
                move || {
                    let r = panel_handle.clone();
                    async move { super::routes::registry_json(&r).await }
                },
            )],
        })
    }
}
