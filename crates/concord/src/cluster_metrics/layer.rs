//! [`ClusterMetrics`]: the layer that samples this node's metrics and spreads every node's
//! to every node. The node composition adds it unless `[cluster-metrics] enabled = false`.

use std::sync::Arc;

use concord_core::cluster_metrics::ClusterMetricsCollector;
use concord_core::ProtocolId;

use super::codec::ClusterMetricsCodec;
use super::config::ClusterMetricsConfig;
use super::effects::ClusterMetricsEffects;
use super::sampler::{QueueProbe, Sampler};
use crate::config::ConfigSection;
use crate::layer::{register_protocol, HostPorts, Layer, LayerContext, LayerError, LayerStarted};
use crate::remote::{Inbound, ProtocolRegistry, ProtocolSender, Transport, TransportSettings};
use crate::runtime::LaneOutbound;

const LAYER: &str = "cluster-metrics";

/// The cluster-metrics layer; see the module docs.
#[derive(Default)]
pub struct ClusterMetrics {
    inbound: Option<
        tokio::sync::mpsc::Receiver<Inbound<concord_core::cluster_metrics::ClusterMetricsMessage>>,
    >,
}

impl ClusterMetrics {
    /// The layer (registered by the node composition; an application need not add it).
    pub fn new() -> Self {
        Self::default()
    }
}

struct TransportQueues(Transport);

impl QueueProbe for TransportQueues {
    fn lane_queue(&self) -> u64 {
        self.0.queued_frames()
    }
}

impl Layer for ClusterMetrics {
    fn name(&self) -> &'static str {
        LAYER
    }

    fn config_sections(&self) -> &'static [&'static str] {
        &[<ClusterMetricsConfig as ConfigSection>::KEY]
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
            ProtocolId::CLUSTER_METRICS,
            ClusterMetricsCodec,
        )?);
        Ok(())
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        let inbound = self
            .inbound
            .ok_or(LayerError::NotRegistered { layer: LAYER })?;
        let config = ctx.section::<ClusterMetricsConfig>(LAYER)?;
        let me = ctx.cluster.self_unique_address().clone();
        let machine = ClusterMetricsCollector::new(config.settings(), me.clone(), rand::random());
        let sampler = Sampler::new(
            ctx.local_load.clone(),
            Box::new(TransportQueues(ctx.transport.clone())),
        );
        let effects =
            ClusterMetricsEffects::new(sampler, ctx.cluster_load.clone(), me.address.to_string());
        let sender = ProtocolSender::new(
            ctx.transport.clone(),
            ProtocolId::CLUSTER_METRICS,
            Arc::new(ClusterMetricsCodec),
        );
        ctx.start_host(
            machine,
            effects,
            HostPorts::new(Box::new(LaneOutbound::new(sender)), inbound),
        );
        let load = ctx.cluster_load.clone();
        Ok(LayerStarted {
            routes: Some(super::routes::routes(ctx.cluster_load.clone())),
            dashboard: vec![crate::management::DashboardPanel::new(
                "cluster-metrics",
                move || {
                    let load = load.clone();
                    async move { serde_json::json!(super::routes::metrics_json(&load.current())) }
                },
            )],
        })
    }
}
