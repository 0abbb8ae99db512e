//! [`Transport`]: the handle layers send through. It owns the listener ([`super::inbound`]),
//! one outbound association per peer and lane ([`super::association`]), the quarantine set,
//! injected faults and the counters.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use concord_core::{Address, Lane, UniqueAddress};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn, Instrument};

use super::association::run_association;
use super::envelope::Outbound;
use super::faults::{FaultTable, LinkFaults};
use super::inbound::accept_loop;
use super::log_limit::LogLimiter;
use super::registry::ProtocolRegistry;
use super::settings::TransportSettings;
use super::stats::{add, inc, TransportStats};

/// Upper bound of what an envelope adds to its payload (tags, lengths, ids), bytes.
const ENVELOPE_OVERHEAD_MAX: usize = 32;

/// Something the transport tells the membership daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportEvent {
    /// A peer refused our handshake because this incarnation is quarantined.
    QuarantinedBy(Address),
}

/// Why [`Transport::send_wait`] did not queue a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// Larger than `maximum-large-frame-size`.
    #[error("message of {0} bytes exceeds maximum-large-frame-size")]
    TooLarge(usize),
    /// The transport has shut down.
    #[error("the transport has shut down")]
    Shutdown,
}

/// Errors starting the transport.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The remoting port could not be bound.
    #[error("cannot bind remoting to {addr}: {source}")]
    Bind {
        /// What we tried to bind.
        addr: String,
        /// Why it failed.
        source: std::io::Error,
    },
}

type Lanes = [Option<mpsc::Sender<Outbound>>; 3];

pub(crate) struct Inner {
    pub(crate) self_address: UniqueAddress,
    pub(crate) settings: TransportSettings,
    pub(crate) registry: ProtocolRegistry,
    pub(crate) faults: FaultTable,
    pub(crate) events: mpsc::UnboundedSender<TransportEvent>,
    pub(crate) associations: Mutex<HashMap<Address, Lanes>>,
    quarantined: RwLock<HashSet<UniqueAddress>>,
    pub(crate) stats: TransportStats,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) log: LogLimiter,
}

impl Inner {
    pub(crate) fn is_quarantined(&self, node: &UniqueAddress) -> bool {
        self.quarantined
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(node)
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Forgets the association of `to` on `lane` if it is still `tx` (it ended).
    pub(crate) fn remove_association(&self, to: &Address, lane: Lane, tx: &mpsc::Sender<Outbound>) {
        let mut map = self.associations.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lanes) = map.get_mut(to) {
            if lanes[lane.index()]
                .as_ref()
                .is_some_and(|t| t.same_channel(tx))
            {
                lanes[lane.index()] = None;
            }
            if lanes.iter().all(Option::is_none) {
                map.remove(to);
            }
        }
    }
}

/// Handle to the running transport. Cheap to clone.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
    local_addr: SocketAddr,
}

impl Transport {
    /// Binds `bind_addr` and starts accepting connections; inbound envelopes are routed by
    /// `registry`.
    pub async fn bind(
        self_address: UniqueAddress,
        bind_addr: &str,
        settings: TransportSettings,
        registry: ProtocolRegistry,
        events: mpsc::UnboundedSender<TransportEvent>,
    ) -> Result<Transport, TransportError> {
        let listener =
            TcpListener::bind(bind_addr)
                .await
                .map_err(|source| TransportError::Bind {
                    addr: bind_addr.to_string(),
                    source,
                })?;
        Self::start(self_address, listener, settings, registry, events)
    }

    /// Starts on a bound listener (so a node bound to port 0 can advertise the port it got).
    pub fn start(
        self_address: UniqueAddress,
        listener: TcpListener,
        settings: TransportSettings,
        registry: ProtocolRegistry,
        events: mpsc::UnboundedSender<TransportEvent>,
    ) -> Result<Transport, TransportError> {
        let local_addr = listener
            .local_addr()
            .map_err(|source| TransportError::Bind {
                addr: self_address.address.host_port(),
                source,
            })?;
        let (shutdown, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            self_address,
            stats: TransportStats::new(registry.protocols()),
            settings,
            registry,
            faults: FaultTable::default(),
            events,
            associations: Mutex::new(HashMap::new()),
            quarantined: RwLock::new(HashSet::new()),
            shutdown,
            log: LogLimiter::new(Duration::from_secs(10)),
        });
        let span = tracing::Span::current();
        tokio::spawn(accept_loop(inner.clone(), listener).instrument(span));
        Ok(Transport { inner, local_addr })
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// This node's unique address.
    pub fn self_unique_address(&self) -> &UniqueAddress {
        &self.inner.self_address
    }

    /// Counters.
    pub fn stats(&self) -> &TransportStats {
        &self.inner.stats
    }

    /// The settings.
    pub fn settings(&self) -> &TransportSettings {
        &self.inner.settings
    }

    /// Chooses the lane for `o` by size: a frame above `maximum-frame-size` moves to the
    /// large lane; `Err` if it exceeds even the large lane's limit.
    fn route(&self, o: &mut Outbound) -> Result<(), SendError> {
        let size = o.payload.len() + ENVELOPE_OVERHEAD_MAX;
        if size > self.inner.settings.maximum_frame_size && o.lane != Lane::Large {
            o.lane = Lane::Large;
        }
        if size > self.inner.settings.maximum_large_frame_size
            && o.frame_body_len() > self.inner.settings.maximum_large_frame_size
        {
            return Err(SendError::TooLarge(o.payload.len()));
        }
        if let Some(p) = self.inner.stats.protocol(o.protocol) {
            inc(&p.messages_out);
            add(&p.bytes_out, o.payload.len() as u64);
        }
        Ok(())
    }

    /// Applies injected faults; `None` if the message is dropped or delayed.
    fn with_faults(&self, o: Outbound) -> Option<Outbound> {
        let Some(faults) = self.inner.faults.get(&o.to) else {
            return Some(o);
        };
        if faults.blackhole_outbound
            || (faults.drop_probability > 0.0 && rand::random::<f64>() < faults.drop_probability)
        {
            self.inner.stats.dropped(o.lane, 1);
            return None;
        }
        if faults.delay_ms > 0 {
            let this = self.clone();
            let delay = Duration::from_millis(faults.delay_ms);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                this.enqueue(o);
            });
            return None;
        }
        Some(o)
    }

    /// Queues a message for its destination; never blocks. Dropped (and counted) when the
    /// peer's lane queue is full, or the message is larger than the large lane allows.
    pub fn send(&self, mut o: Outbound) {
        if let Err(e) = self.route(&mut o) {
            self.too_large(&o, e);
            return;
        }
        if let Some(o) = self.with_faults(o) {
            self.enqueue(o);
        }
    }

    /// Queues a message, waiting while the peer's lane queue is full (for senders that
    /// want backpressure rather than drops, e.g. user messaging and `concord bench`).
    pub async fn send_wait(&self, mut o: Outbound) -> Result<(), SendError> {
        if let Err(e) = self.route(&mut o) {
            self.too_large(&o, e.clone());
            return Err(e);
        }
        let Some(o) = self.with_faults(o) else {
            return Ok(());
        };
        if self.inner.is_shut_down() {
            return Err(SendError::Shutdown);
        }
        let tx = self.association(&o.to, o.lane);
        tx.send(o).await.map_err(|_| SendError::Shutdown)
    }

    fn too_large(&self, o: &Outbound, e: SendError) {
        self.inner.stats.dropped(Lane::Large, 1);
        if let Some(suppressed) = self.inner.log.allow("too-large") {
            warn!(to = %o.to, protocol = %o.protocol, size = o.payload.len(), suppressed, "dropping message: {e}");
        }
    }

    /// The queue of the association to `to` on `lane`, started if needed.
    fn association(&self, to: &Address, lane: Lane) -> mpsc::Sender<Outbound> {
        let mut map = self
            .inner
            .associations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let lanes = map.entry(to.clone()).or_default();
        if let Some(tx) = &lanes[lane.index()] {
            if !tx.is_closed() {
                return tx.clone();
            }
        }
        let (tx, rx) = mpsc::channel(self.inner.settings.queue_size(lane));
        lanes[lane.index()] = Some(tx.clone());
        let span = tracing::Span::current();
        tokio::spawn(
            run_association(self.inner.clone(), to.clone(), lane, tx.clone(), rx).instrument(span),
        );
        tx
    }

    fn enqueue(&self, o: Outbound) {
        if self.inner.is_shut_down() {
            return;
        }
        let lane = o.lane;
        let existing = {
            let map = self
                .inner
                .associations
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            map.get(&o.to).and_then(|l| l[lane.index()].clone())
        };
        let tx = match existing {
            Some(tx) if !tx.is_closed() => tx,
            _ => self.association(&o.to, lane),
        };
        if tx.try_send(o).is_err() {
            self.inner.stats.dropped(lane, 1);
        }
    }

    /// Faults injected on the link to `peer`.
    pub fn faults_for(&self, peer: &Address) -> LinkFaults {
        self.inner.faults.get(peer).unwrap_or_default()
    }

    /// Injects `faults` on the link to `peer` (clear faults remove the entry).
    pub fn set_faults(&self, peer: Address, faults: LinkFaults) {
        self.inner.faults.set(peer, faults);
    }

    /// All injected faults.
    pub fn all_faults(&self) -> Vec<(Address, LinkFaults)> {
        self.inner.faults.all()
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        self.inner.faults.clear();
    }

    /// Refuses this incarnation from now on (a removed or replaced node): its connections
    /// are refused and closed, messages to it are dropped.
    pub fn quarantine(&self, node: &UniqueAddress) {
        let mut q = self
            .inner
            .quarantined
            .write()
            .unwrap_or_else(|p| p.into_inner());
        if q.insert(node.clone()) {
            info!(%node, "quarantined: connections from and messages to this incarnation are refused");
        }
    }

    /// True if `node` is quarantined.
    pub fn is_quarantined(&self, node: &UniqueAddress) -> bool {
        self.inner.is_quarantined(node)
    }

    /// Waits (at most `timeout`) until every association has taken what was queued for it,
    /// so the last messages of a stopping node go out before [`Transport::shutdown`].
    pub async fn drain(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let empty = {
                let map = self
                    .inner
                    .associations
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                map.values()
                    .flatten()
                    .flatten()
                    .all(|tx| tx.is_closed() || tx.capacity() == tx.max_capacity())
            };
            if empty || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Stops accepting and closes every connection (what is queued is dropped).
    pub fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
        let mut map = self
            .inner
            .associations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.clear();
    }

    /// True once [`Transport::shutdown`] ran.
    pub fn is_shut_down(&self) -> bool {
        self.inner.is_shut_down()
    }
}
