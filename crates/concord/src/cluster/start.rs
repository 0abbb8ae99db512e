//! Starting the membership layer: its protocol's registration, and [`Cluster::start`]
//! (the membership daemon on the runtime's driver loop and its coordinated-shutdown tasks).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use concord_core::{ClusterCore, ClusterMessage, ProtocolId, UniqueAddress};
use tokio::sync::{broadcast, mpsc, watch};

use super::codec::MembershipCodec;
use super::effects::MembershipEffects;
use super::membership_record;
use super::runtime_sinks::RuntimeSinks;
use crate::clock::Clock;
use crate::config::Config;
use crate::coordinated_shutdown::CoordinatedShutdown;
use crate::host::LayerHost;
use crate::lease::Lease;
use crate::metrics;
use crate::remote::registry::DuplicateProtocol;
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, Transport, TransportEvent};
use crate::runtime::{HostChannels, LaneOutbound, TokioSpawner};

use super::handle::Cluster;
use super::shared::Shared;

/// Registers the membership protocol; its inbound messages arrive on the returned queue.
pub(crate) fn register_protocol(
    registry: &mut ProtocolRegistry,
    settings: &crate::remote::TransportSettings,
) -> Result<mpsc::Receiver<Inbound<ClusterMessage>>, DuplicateProtocol> {
    registry.register(
        ProtocolId::MEMBERSHIP,
        Arc::new(MembershipCodec {
            max_decompressed_gossip_bytes: settings.maximum_decompressed_gossip_size,
        }),
        settings.inbound_queue_size,
    )
}

/// What [`Cluster::start`] needs.
pub(crate) struct ClusterParts {
    pub(crate) self_unique_address: UniqueAddress,
    pub(crate) transport: Transport,
    pub(crate) inbound: mpsc::Receiver<Inbound<ClusterMessage>>,
    pub(crate) transport_events: mpsc::UnboundedReceiver<TransportEvent>,
    pub(crate) shutdown: CoordinatedShutdown,
    pub(crate) lease: Option<Arc<dyn Lease>>,
}

impl Cluster {
    /// Starts the membership daemon (the membership layer's host on the runtime's driver
    /// loop) on `parts.transport` and adds the membership tasks to the coordinated
    /// shutdown. Called by the node composition ([`crate::Node`]).
    pub(crate) fn start(config: &Config, parts: ClusterParts) -> Cluster {
        let clock = Clock::new();
        let roles = config.cluster.roles.iter().cloned().collect();
        let seed = parts.self_unique_address.uid ^ rand::random::<u64>();
        let mut core = ClusterCore::new(
            parts.self_unique_address.clone(),
            roles,
            config.cluster.app_version.clone(),
            config.cluster_settings(),
            clock.now_ms(),
            seed,
        );
        let record_dir = config
            .cluster
            .membership_record
            .then(|| config.data_dir_path());
        if let Some(dir) = &record_dir {
            let record = membership_record::read(dir, &parts.self_unique_address.address);
            if let Some(r) = record {
                let cluster = r
                    .cluster
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "unknown".into());
                tracing::info!(
                    %cluster, file = %membership_record::path(dir).display(),
                    "this node was a member of a cluster (membership record): it will not form a new cluster on seed-node-timeout"
                );
            }
            core.set_membership_record(record);
        }
        let (commands, command_rx) = mpsc::channel(256);
        let (views_tx, views) = watch::channel(Arc::new(core.membership_view()));
        let (ended_tx, ended) = watch::channel(None);
        let (batches, _) = broadcast::channel(config.cluster.event_buffer_size.max(1));
        let shared = Arc::new(Shared {
            self_unique_address: parts.self_unique_address.clone(),
            commands,
            views,
            batches,
            ended,
            shutdown: parts.shutdown.clone(),
            remoting_addr: parts.transport.local_addr(),
            max_heartbeat_rtt_ms: AtomicU64::new(0),
            last_heartbeat_rtt_ms: AtomicU64::new(0),
            core_stats: std::sync::Mutex::default(),
            islands: std::sync::Mutex::default(),
            sbr_decisions: std::sync::Mutex::default(),
        });
        let sinks = RuntimeSinks::new(
            parts.transport.clone(),
            shared.clone(),
            views_tx,
            ended_tx,
            clock,
        );
        let effects = MembershipEffects::new(Box::new(sinks), parts.lease, record_dir);
        let label = parts.self_unique_address.address.to_string();
        let sender = ProtocolSender::new(
            parts.transport.clone(),
            ProtocolId::MEMBERSHIP,
            Arc::new(MembershipCodec::default()),
        );
        let outbound = LaneOutbound::new(sender).with_observer(move |m: &ClusterMessage, bytes| {
            metrics::message_sent(&label, m.kind(), bytes, m.is_gossip());
        });
        let host = LayerHost::new(
            core,
            effects,
            parts.self_unique_address,
            Arc::new(clock),
            Arc::new(TokioSpawner::current()),
            Box::new(outbound),
        );
        // The membership layer is the source of membership: no feed, and it does not end
        // with it (only on `Shutdown`, `Stop` or a closed queue).
        let channels = HostChannels {
            commands: Some(command_rx),
            inbound: Some(parts.inbound),
            ..HostChannels::default()
        };
        tokio::spawn(tracing::Instrument::instrument(
            super::daemon::run(
                host,
                clock,
                channels,
                parts.transport_events,
                parts.transport,
                shared.clone(),
            ),
            tracing::Span::current(),
        ));
        let cluster = Cluster { shared };
        super::shutdown_tasks::register(&cluster, &parts.shutdown);
        cluster
    }
}
