//! The cluster extension: start a node, join, leave, down, subscribe to events.
//!
//! [`Cluster`] is the handle users hold; a daemon task owns the sans-IO
//! [`concord_core::ClusterCore`] and drives it with the transport and timers.
//!
//! ```no_run
//! use concord::{Cluster, Config};
//! use concord_core::ClusterEvent;
//!
//! # async fn run() -> anyhow::Result<()> {
//! let mut config = Config::default();
//! config.system = "shop".into();
//! config.remote.port = 25520;
//! config.cluster.seed_nodes = vec!["127.0.0.1:25520".into()];
//! let cluster = Cluster::start(config).await?;
//! let mut sub = cluster.subscribe().await?;
//! println!("{} members now", sub.snapshot.members.len());
//! while let Ok(event) = sub.events.recv().await {
//!     if let ClusterEvent::MemberUp(m) = event {
//!         println!("{} is up", m.address());
//!     }
//! }
//! # Ok(()) }
//! ```

mod daemon;

use std::net::SocketAddr;
use std::sync::Arc;

use concord_core::{
    Address, ClusterEvent, CommandError, CoreStats, CurrentClusterState, Member, ShutdownReason,
    UniqueAddress,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::config::{Config, ConfigError};
use crate::lease::{FileLease, Lease};
use crate::remote::transport::{Transport, TransportError};
use concord_core::split_brain_resolver::DowningStrategy;

pub(crate) use daemon::Command;

/// What the management API and library users read: a snapshot of this node's view.
#[derive(Clone, Debug, Default)]
pub struct ClusterSnapshot {
    /// Members, unreachable, leader, ...
    pub state: CurrentClusterState,
    /// This node's member entry.
    pub self_member: Option<Member>,
    /// Protocol counters.
    pub stats: CoreStats,
}

/// Parts a user can supply to [`Cluster::start_with`].
#[derive(Clone, Default)]
pub struct ClusterExtensions {
    /// Service discovery for Cluster Bootstrap (default: the configured method).
    pub discovery: Option<Arc<dyn crate::discovery::ServiceDiscovery>>,
    /// Join decider for Cluster Bootstrap (default: [`crate::bootstrap::LowestAddressJoinDecider`]).
    pub join_decider: Option<Arc<dyn crate::bootstrap::JoinDecider>>,
}

/// A subscription: the current state first, then every event after it.
pub struct Subscription {
    /// The state at the time of subscribing.
    pub snapshot: CurrentClusterState,
    /// Events after the snapshot. Lagging receivers lose the oldest events.
    pub events: broadcast::Receiver<ClusterEvent>,
}

/// Errors of [`Cluster`] operations.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The remoting port could not be bound.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The management port could not be bound.
    #[error("cannot bind management HTTP to {addr}: {source}")]
    Management {
        /// What we tried to bind.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The command was refused; nothing changed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// The node has shut down.
    #[error("the cluster node has shut down")]
    Terminated,
}

struct Inner {
    self_unique_address: UniqueAddress,
    commands: mpsc::Sender<Command>,
    snapshot: watch::Receiver<Arc<ClusterSnapshot>>,
    terminated: watch::Receiver<Option<ShutdownReason>>,
    transport: Transport,
    management_addr: std::sync::OnceLock<SocketAddr>,
    fault_injection: bool,
}

/// Handle to a running cluster node. Cheap to clone.
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

impl Cluster {
    /// Starts a node: binds remoting (and the management API when
    /// `management.enabled`), starts the daemon, and joins `cluster.seed-nodes` if any —
    /// or, with no seed nodes and `bootstrap.contact-point-discovery.service-name` set, runs
    /// Cluster Bootstrap ([`crate::bootstrap`]).
    pub async fn start(config: Config) -> Result<Cluster, ClusterError> {
        Self::start_with(config, ClusterExtensions::default()).await
    }

    /// [`Cluster::start`] with user-supplied parts: a service discovery method and/or a join
    /// decider for Cluster Bootstrap.
    pub async fn start_with(
        mut config: Config,
        extensions: ClusterExtensions,
    ) -> Result<Cluster, ClusterError> {
        config.resolve_host_address()?;
        config.validate()?;
        let bootstrap_discovery = if config.bootstrap_enabled() {
            Some(match extensions.discovery.clone() {
                Some(d) => d,
                None => crate::discovery::from_config(
                    &config,
                    &config.bootstrap.contact_point_discovery.discovery_method,
                )?,
            })
        } else {
            None
        };
        let seeds = config.seed_node_addresses()?;
        let self_address = config.self_address();
        let uid = loop {
            let u: u64 = rand::random();
            if u != 0 {
                break u;
            }
        };
        let self_unique_address = UniqueAddress::new(self_address.clone(), uid);
        let span = tracing::info_span!("node", address = %self_address);
        let (inbound_tx, inbound_rx) = mpsc::channel(4096);
        let (transport_events_tx, transport_events_rx) = mpsc::unbounded_channel();
        let bind_host = config
            .remote
            .bind_hostname
            .clone()
            .unwrap_or_else(|| config.remote.hostname.clone());
        let bind = if bind_host.contains(':') {
            format!("[{bind_host}]:{}", config.remote.port)
        } else {
            format!("{bind_host}:{}", config.remote.port)
        };
        let transport = {
            let _g = span.enter();
            Transport::bind(
                self_unique_address.clone(),
                &bind,
                config.transport_settings(),
                inbound_tx,
                transport_events_tx,
            )
            .await?
        };
        let (commands, command_rx) = mpsc::channel(256);
        let (snapshot_tx, snapshot) = watch::channel(Arc::new(ClusterSnapshot::default()));
        let (terminated_tx, terminated) = watch::channel(None);
        let lease: Option<Arc<dyn Lease>> =
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
                        self_unique_address.to_string(),
                        lm.release_after,
                    )))
                }
                _ => None,
            };
        let daemon = daemon::Daemon::new(
            &config,
            self_unique_address.clone(),
            transport.clone(),
            snapshot_tx,
            terminated_tx,
            lease,
        );
        tokio::spawn(tracing::Instrument::instrument(
            daemon.run(command_rx, inbound_rx, transport_events_rx),
            span.clone(),
        ));
        let cluster = Cluster {
            inner: Arc::new(Inner {
                self_unique_address,
                commands,
                snapshot,
                terminated,
                transport,
                management_addr: std::sync::OnceLock::new(),
                fault_injection: config.testkit.fault_injection,
            }),
        };
        if config.management.enabled {
            let addr = {
                let _g = span.enter();
                crate::management::serve(cluster.clone(), &config.management).await?
            };
            let _ = cluster.inner.management_addr.set(addr);
        }
        if !seeds.is_empty() {
            cluster.join_seed_nodes(seeds).await?;
        } else if let (Some(discovery), Some(addr)) =
            (bootstrap_discovery, cluster.management_addr())
        {
            let settings = crate::bootstrap::BootstrapSettings::from_config(&config, addr.port());
            let decider = extensions.join_decider.unwrap_or_else(|| {
                Arc::new(crate::bootstrap::LowestAddressJoinDecider::new(
                    settings.decider.clone(),
                ))
            });
            tokio::spawn(tracing::Instrument::instrument(
                crate::bootstrap::run(
                    cluster.clone(),
                    settings,
                    discovery,
                    decider,
                    config.remote.hostname.clone(),
                ),
                span.clone(),
            ));
        }
        Ok(cluster)
    }

    /// This node's address.
    pub fn self_address(&self) -> &Address {
        &self.inner.self_unique_address.address
    }

    /// This node's unique address (address + uid of this incarnation).
    pub fn self_unique_address(&self) -> &UniqueAddress {
        &self.inner.self_unique_address
    }

    /// The bound remoting socket.
    pub fn remoting_addr(&self) -> SocketAddr {
        self.inner.transport.local_addr()
    }

    /// The bound management HTTP socket, when enabled.
    pub fn management_addr(&self) -> Option<SocketAddr> {
        self.inner.management_addr.get().copied()
    }

    /// True when `testkit.fault-injection = on`.
    pub fn fault_injection_enabled(&self) -> bool {
        self.inner.fault_injection
    }

    /// The transport (counters for metrics).
    pub fn transport(&self) -> &Transport {
        &self.inner.transport
    }

    async fn command<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, ClusterError> {
        let (tx, rx) = oneshot::channel();
        self.inner
            .commands
            .send(make(tx))
            .await
            .map_err(|_| ClusterError::Terminated)?;
        rx.await.map_err(|_| ClusterError::Terminated)
    }

    /// Joins the cluster of the node at `address` (own address: form a new cluster).
    pub async fn join(&self, address: Address) -> Result<(), ClusterError> {
        Ok(self.command(|r| Command::Join(address, r)).await??)
    }

    /// Joins via seed nodes (InitJoin to all, Join the first that answers).
    pub async fn join_seed_nodes(&self, seeds: Vec<Address>) -> Result<(), ClusterError> {
        Ok(self.command(|r| Command::JoinSeedNodes(seeds, r)).await??)
    }

    /// Graceful leave of the member at `address` (this node or another).
    pub async fn leave(&self, address: Address) -> Result<(), ClusterError> {
        Ok(self.command(|r| Command::Leave(address, r)).await??)
    }

    /// Marks the member at `address` Down.
    pub async fn down(&self, address: Address) -> Result<(), ClusterError> {
        Ok(self.command(|r| Command::Down(address, r)).await??)
    }

    /// Starts a full cluster shutdown (Up → PreparingForShutdown → ReadyForShutdown).
    pub async fn prepare_for_full_cluster_shutdown(&self) -> Result<(), ClusterError> {
        Ok(self.command(Command::PrepareForFullShutdown).await??)
    }

    /// Subscribes to domain events: the current state first, then every change.
    pub async fn subscribe(&self) -> Result<Subscription, ClusterError> {
        let (snapshot, events) = self.command(Command::Subscribe).await?;
        Ok(Subscription { snapshot, events })
    }

    /// The latest snapshot of this node's view.
    pub fn state(&self) -> Arc<ClusterSnapshot> {
        self.inner.snapshot.borrow().clone()
    }

    /// Why the node shut down, once it has.
    pub fn shutdown_reason(&self) -> Option<ShutdownReason> {
        *self.inner.terminated.borrow()
    }

    /// Waits until the node has shut down (removed, downed, ...).
    pub async fn terminated(&self) -> ShutdownReason {
        let mut rx = self.inner.terminated.clone();
        loop {
            if let Some(r) = *rx.borrow_and_update() {
                return r;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().unwrap_or(ShutdownReason::Removed);
            }
        }
    }

    /// Stops the node at once without leaving (like a crash, for tests).
    pub async fn stop(&self) {
        let _ = self.inner.commands.send(Command::Stop).await;
        self.inner.transport.shutdown();
    }
}
