//! The node composition: the one place that builds a node from its parts — remoting,
//! membership, the management API, Cluster Bootstrap and the layers the application adds —
//! and ties them to one coordinated shutdown. Nothing below imports it.
//!
//! Order: configuration checked; every protocol registered (membership first, then each
//! layer's); remoting bound; the membership daemon (its host) started; each layer started (its
//! management routes collected); the management API served; then the node joins its seed
//! nodes or runs Cluster Bootstrap.

use std::net::SocketAddr;
use std::sync::Arc;

use concord_core::split_brain_resolver::DowningStrategy;
use concord_core::{Address, ShutdownReason, UniqueAddress};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::bootstrap::{self, BootstrapSettings, JoinDecider, LowestAddressJoinDecider};
use crate::cluster::{self, Cluster, ClusterError, ClusterParts};
use crate::cluster_metrics::{ClusterMetrics, ClusterMetricsConfig};
use crate::config::{Config, ConfigError, ConfigSection};
use crate::coordinated_shutdown::{CoordinatedShutdown, CoordinatedShutdownSettings};
use crate::discovery::{self, ServiceDiscovery};
use crate::host::SystemClock;
use crate::layer::{Layer, LayerContext, LayerError};
use crate::lease::{FileLease, Lease};
use crate::management::{self, ManagementError, ManagementState};
use crate::remote::cluster_secret::ClusterSecret;
use crate::remote::{ProtocolRegistry, Transport, TransportError, TransportSettings};
use crate::tls::TlsContext;

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The remoting port could not be bound.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The management port could not be bound.
    #[error(transparent)]
    Management(#[from] ManagementError),
    /// A layer failed to register or start.
    #[error(transparent)]
    Layer(#[from] LayerError),
    /// Joining the seed nodes was refused.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// Builds a [`Node`]: the configuration plus the parts an application supplies.
pub struct NodeBuilder {
    config: Config,
    discovery: Option<Arc<dyn ServiceDiscovery>>,
    join_decider: Option<Arc<dyn JoinDecider>>,
    layers: Vec<Box<dyn Layer>>,
    readiness: management::ReadinessChecks,
}

impl NodeBuilder {
    /// A builder for a node configured by `config`.
    pub fn new(config: Config) -> Self {
        NodeBuilder {
            config,
            discovery: None,
            join_decider: None,
            layers: Vec::new(),
            readiness: management::ReadinessChecks::new(),
        }
    }

    /// Service discovery for Cluster Bootstrap (default: the configured method).
    pub fn discovery(mut self, d: Arc<dyn ServiceDiscovery>) -> Self {
        self.discovery = Some(d);
        self
    }

    /// Join decider for Cluster Bootstrap (default: [`LowestAddressJoinDecider`]).
    pub fn join_decider(mut self, d: Arc<dyn JoinDecider>) -> Self {
        self.join_decider = Some(d);
        self
    }

    /// The application's readiness checks: `GET /ready` answers 200 only once the node is
    /// Up and every check registered there is met ([`management::ReadinessChecks`]).
    pub fn readiness_checks(mut self, checks: management::ReadinessChecks) -> Self {
        self.readiness = checks;
        self
    }

    /// Adds a layer (see [`crate::layer`]).
    pub fn layer(mut self, layer: impl Layer) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// Starts the node: binds remoting (and the management API when `management.enabled`),
    /// starts membership and the layers, and joins `cluster.seed-nodes` if any — or, with
    /// no seed nodes and `bootstrap.contact-point-discovery.service-name` set, runs Cluster
    /// Bootstrap ([`crate::bootstrap`]).
    pub async fn start(self) -> Result<Node, NodeError> {
        crate::tls::install_default_provider();
        let NodeBuilder {
            mut config,
            discovery,
            join_decider,
            mut layers,
            readiness,
        } = self;
        config.resolve_host_address()?;
        config.validate()?;
        check_sections(&config, &layers)?;
        // Built-in layers the configuration turns on: cluster metrics (first, so that every
        // other layer can read the cluster's load).
        if config.section::<ClusterMetricsConfig>()?.enabled {
            layers.insert(0, Box::new(ClusterMetrics::new()));
        }
        let bootstrap_discovery = if config.bootstrap_enabled() {
            Some(match discovery {
                Some(d) => d,
                None => discovery::from_config(
                    &config,
                    &config.bootstrap.contact_point_discovery.discovery_method,
                )?,
            })
        } else {
            None
        };
        let seeds = config.seed_node_addresses()?;
        // Bind first: with `remote.port = 0` the node advertises the port it got.
        let bind = config.remote.bind_address();
        let listener = tokio::net::TcpListener::bind(&bind)
            .await
            .map_err(|source| TransportError::Bind {
                addr: bind.clone(),
                source,
            })?;
        if config.remote.port == 0 {
            config.remote.port = listener
                .local_addr()
                .map_err(|source| TransportError::Bind { addr: bind, source })?
                .port();
        }
        let self_address = config.self_address();
        let uid = loop {
            let u: u64 = rand::random();
            if u != 0 {
                break u;
            }
        };
        let self_unique_address = UniqueAddress::new(self_address.clone(), uid);
        let span = tracing::info_span!("node", address = %self_address);
        let shutdown = span.in_scope(|| {
            CoordinatedShutdown::new(CoordinatedShutdownSettings::from_config(
                &config.coordinated_shutdown,
            ))
        });

        // Every protocol is registered before remoting binds.
        let mut transport_settings = TransportSettings::from_config(&config.remote);
        transport_settings.tls = TlsContext::for_remote_config(&config.remote)?;
        transport_settings.secret = ClusterSecret::from_config(&config.remote)?;
        if let Some(tls) = &transport_settings.tls {
            tls.spawn_reloader(crate::tls::RELOAD_INTERVAL, "remote");
        }
        for w in config.security_warnings() {
            tracing::warn!("{w}");
        }
        let mut registry = ProtocolRegistry::new();
        let membership_inbound = cluster::register_protocol(&mut registry, &transport_settings)
            .map_err(|e| LayerError::DuplicateProtocol {
                layer: "membership",
                protocol: e.0,
            })?;
        for l in &mut layers {
            l.register(&mut registry, &transport_settings)?;
        }
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let transport = {
            let _g = span.enter();
            Transport::start(
                self_unique_address.clone(),
                listener,
                transport_settings,
                registry,
                events_tx,
            )?
        };

        let lease = sbr_lease(&config, &self_unique_address);
        let cluster = {
            let _g = span.enter();
            Cluster::start(
                &config,
                ClusterParts {
                    self_unique_address,
                    transport: transport.clone(),
                    inbound: membership_inbound,
                    transport_events: events_rx,
                    shutdown: shutdown.clone(),
                    lease,
                },
            )
        };
        // The transport keeps handshake places for members' addresses (issue 24).
        transport.follow_membership(cluster.membership());
        let config = Arc::new(config);
        let node = Node {
            clock: SystemClock::new(),
            cluster: cluster.clone(),
            transport,
            shutdown,
            management_addr: None,
            readiness,
        };
        // From here on a failure stops what was started: the daemon, remoting, the port.
        match node
            .clone()
            .finish_start(
                config,
                layers,
                seeds,
                bootstrap_discovery,
                join_decider,
                span,
            )
            .await
        {
            Ok(node) => Ok(node),
            Err(e) => {
                node.stop().await;
                Err(e)
            }
        }
    }
}

impl Node {
    /// Starts the layers and the management API, then joins or bootstraps.
    async fn finish_start(
        mut self,
        config: Arc<Config>,
        layers: Vec<Box<dyn Layer>>,
        seeds: Vec<Address>,
        bootstrap_discovery: Option<Arc<dyn ServiceDiscovery>>,
        join_decider: Option<Arc<dyn JoinDecider>>,
        span: tracing::Span,
    ) -> Result<Node, NodeError> {
        let mut routes = Vec::new();
        let mut panels = Vec::new();
        let local_load = crate::load::LocalLoad::new();
        let cluster_load = crate::load::ClusterLoad::new();
        for l in layers {
            let ctx = LayerContext {
                clock: self.clock,
                cluster: self.cluster.clone(),
                transport: self.transport.clone(),
                coordinated_shutdown: self.shutdown.clone(),
                config: config.clone(),
                local_load: local_load.clone(),
                cluster_load: cluster_load.clone(),
            };
            let _g = span.enter();
            let started = l.start(ctx)?;
            routes.extend(started.routes);
            panels.extend(started.dashboard);
        }
        if config.management.enabled {
            let state = ManagementState {
                cluster: self.cluster.clone(),
                transport: self.transport.clone(),
                fault_injection: config.testkit.fault_injection,
                warnings: config.security_warnings(),
                panels,
                clock: self.clock,
                started_ms: self.clock.started_ms(),
                readiness: self.readiness.clone(),
            };
            self.management_addr = Some(
                management::serve(state, &config.management, &config.remote.hostname, routes)
                    .instrument(span.clone())
                    .await?,
            );
        }
        if !seeds.is_empty() {
            self.cluster.join_seed_nodes(seeds).await?;
        } else if let (Some(discovery), Some(addr)) = (bootstrap_discovery, self.management_addr) {
            let settings = BootstrapSettings::from_config(&config, addr.port());
            let decider = join_decider.unwrap_or_else(|| {
                Arc::new(LowestAddressJoinDecider::new(settings.decider.clone()))
            });
            tokio::spawn(
                bootstrap::run(
                    self.cluster.clone(),
                    settings,
                    discovery,
                    decider,
                    config.remote.hostname.clone(),
                )
                .instrument(span),
            );
        }
        Ok(self)
    }
}

/// The lease of the lease-majority downing strategy, when configured.
fn sbr_lease(config: &Config, me: &UniqueAddress) -> Option<Arc<dyn Lease>> {
    match config.cluster_settings().downing.map(|d| d.strategy) {
        Some(DowningStrategy::LeaseMajority { .. }) => {
            let lm = &config.cluster.split_brain_resolver.lease_majority;
            let dir = if lm.lease_directory.is_empty() {
                std::env::temp_dir().join("concord-leases")
            } else {
                lm.lease_directory.clone().into()
            };
            Some(Arc::new(FileLease::new(
                dir,
                &config.lease_name(),
                me.to_string(),
                lm.release_after,
            )))
        }
        _ => None,
    }
}

/// Checks the configuration's layer sections: each built-in layer's (parsed and validated
/// whether or not this node runs the layer, so a bad value fails every node that shares the
/// file), and no section that neither a built-in layer nor one of `layers` reads.
fn check_sections(config: &Config, layers: &[Box<dyn Layer>]) -> Result<(), ConfigError> {
    /// Checks section `T` and names its key.
    fn checked<T: ConfigSection>(config: &Config) -> Result<&'static str, ConfigError> {
        config.section::<T>().map(|_| T::KEY)
    }
    let built_in = [
        checked::<crate::ddata::DistributedDataConfig>(config)?,
        checked::<crate::singleton::SingletonConfig>(config)?,
        checked::<crate::singleton::SingletonProxyConfig>(config)?,
        checked::<crate::sharding::ShardingConfig>(config)?,
        checked::<crate::kv::KvConfig>(config)?,
        checked::<crate::persistence::PersistenceConfig>(config)?,
        checked::<crate::delivery::ReliableDeliveryConfig>(config)?,
        checked::<crate::telemetry::TracingConfig>(config)?,
        checked::<ClusterMetricsConfig>(config)?,
        checked::<crate::receptionist::ReceptionistConfig>(config)?,
        checked::<crate::receptionist::PubSubConfig>(config)?,
    ];
    for key in config.sections.keys() {
        let read = built_in.contains(&key.as_str())
            || layers
                .iter()
                .any(|l| l.config_sections().contains(&key.as_str()));
        if !read {
            return Err(ConfigError::new(
                key.as_str(),
                "unknown section: no layer of this node reads it",
            ));
        }
    }
    Ok(())
}

/// A running node: membership, remoting, the management API and the layers, under one
/// coordinated shutdown. Cheap to clone.
#[derive(Clone)]
pub struct Node {
    /// The node's one clock (every layer's host reads it).
    clock: SystemClock,
    cluster: Cluster,
    transport: Transport,
    shutdown: CoordinatedShutdown,
    management_addr: Option<SocketAddr>,
    readiness: management::ReadinessChecks,
}

impl Node {
    /// Starts a node configured by `config` with no extra layers (see [`NodeBuilder`]).
    pub async fn start(config: Config) -> Result<Node, NodeError> {
        NodeBuilder::new(config).start().await
    }

    /// A builder, to add layers, a discovery method or a join decider.
    pub fn builder(config: Config) -> NodeBuilder {
        NodeBuilder::new(config)
    }

    /// Membership: join, leave, down, the view, events.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Remoting (counters, fault injection, sending a registered protocol's messages).
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The readiness checks `GET /ready` requires ([`NodeBuilder::readiness_checks`]): an
    /// application may register more once the node runs.
    pub fn readiness_checks(&self) -> &management::ReadinessChecks {
        &self.readiness
    }

    /// The coordinated shutdown: add tasks, see the reason and the phase.
    pub fn coordinated_shutdown(&self) -> &CoordinatedShutdown {
        &self.shutdown
    }

    /// This node's address.
    pub fn self_address(&self) -> &Address {
        self.cluster.self_address()
    }

    /// The bound remoting socket.
    pub fn remoting_addr(&self) -> SocketAddr {
        self.transport.local_addr()
    }

    /// The bound management HTTP socket, when enabled.
    pub fn management_addr(&self) -> Option<SocketAddr> {
        self.management_addr
    }

    /// Shuts the node down gracefully: runs the coordinated shutdown (the node leaves the
    /// cluster, layers hand their work over, remoting closes) and waits for it; returns
    /// its reason ([`ShutdownReason::Requested`] unless it was already running).
    pub async fn shutdown(&self) -> ShutdownReason {
        self.shutdown.run(ShutdownReason::Requested);
        self.shutdown.completed().await
    }

    /// Waits until the node has shut down (its coordinated shutdown completed).
    pub async fn terminated(&self) -> ShutdownReason {
        self.shutdown.completed().await
    }

    /// Stops the node at once without leaving (like a crash, for tests).
    pub async fn stop(&self) {
        self.cluster.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layer that only claims the section `[my-layer]`.
    struct Claims;

    impl Layer for Claims {
        fn name(&self) -> &'static str {
            "my-layer"
        }

        fn config_sections(&self) -> &'static [&'static str] {
            &["my-layer"]
        }

        fn register(
            &mut self,
            _registry: &mut ProtocolRegistry,
            _settings: &TransportSettings,
        ) -> Result<(), LayerError> {
            Ok(())
        }

        fn start(
            self: Box<Self>,
            _ctx: LayerContext,
        ) -> Result<crate::layer::LayerStarted, LayerError> {
            Ok(crate::layer::LayerStarted::default())
        }
    }

    fn check(toml: &str, layers: Vec<Box<dyn Layer>>) -> Result<(), ConfigError> {
        check_sections(&Config::from_toml(toml).unwrap(), &layers)
    }

    #[test]
    fn built_in_sections_are_checked_whether_or_not_the_layer_runs() {
        assert!(check("[kv]\nn = 5\n[sharding]\nnumber-of-shards = 10", vec![]).is_ok());
        assert_eq!(check("[kv]\nn = 0", vec![]).unwrap_err().key, "kv.n");
        assert_eq!(
            check("[sharding]\nnumber-of-shards = 0", vec![])
                .unwrap_err()
                .key,
            "sharding.number-of-shards"
        );
        assert_eq!(
            check("[singleton-proxy]\nbuffer-size = \"many\"", vec![])
                .unwrap_err()
                .key,
            "singleton-proxy.buffer-size"
        );
    }

    #[test]
    fn a_section_no_layer_reads_is_refused() {
        let e = check("[shardng]\nnumber-of-shards = 10", vec![]).unwrap_err();
        assert_eq!(e.key, "shardng");
        assert!(e.message.contains("no layer"), "{e}");
        let app = "[my-layer]\ninterval = \"1s\"";
        assert_eq!(check(app, vec![]).unwrap_err().key, "my-layer");
        assert!(check(app, vec![Box::new(Claims)]).is_ok());
    }
}
