//! [`Transport`]: the handle layers send through. It owns the listener (`inbound`), one
//! outbound queue and writer per peer and lane (`outbound_lane`, `association`), the quarantine set,
//! injected faults and the counters.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use concord_core::{Address, Lane, MembershipView, ProtocolId, UniqueAddress};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tracing::{info, warn, Instrument};

use super::admission::resolve_member_names;
use super::association::run_lane_writer;
use super::envelope::{Frame, Outbound, ENVELOPE_OVERHEAD_MAX};
use super::faults::{FaultTable, LinkFaults};
use super::inbound::accept_loop;
use super::inbound_limits::InboundLimits;
use super::log_limit::LogLimiter;
use super::outbound_lane::{LaneQueue, OutboundLane, PushError};
use super::registry::ProtocolRegistry;
use super::settings::TransportSettings;
use super::stats::{add, TransportStats};
use super::transport_state::Inner;
pub use super::transport_state::TransportEvent;

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

/// Handle to the running transport. Cheap to clone.
#[derive(Clone)]
pub struct Transport {
    pub(super) inner: Arc<Inner>,
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
        let inbound = InboundLimits::new(&settings);
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
            shut_down: AtomicBool::new(false),
            listening: watch::channel(true).0,
            log: LogLimiter::new(Duration::from_secs(10)),
            inbound,
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

    /// Peers this node holds outbound lanes to (queues and writer tasks), a bound on the
    /// outbound state (lanes to unreachable peers are retired after a few failed connects).
    pub fn outbound_peers(&self) -> usize {
        self.inner
            .associations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Frames waiting in this node's outbound lane queues, over all peers and lanes (a
    /// sample of the node's load, see [`crate::cluster_metrics`]).
    pub fn queued_frames(&self) -> u64 {
        let map = self
            .inner
            .associations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.values()
            .flat_map(|lanes| lanes.iter().flatten())
            .map(|q| q.queued().0)
            .sum()
    }

    /// Inbound connections open now (handshakes included) and the cap in effect
    /// (`max-inbound-connections`, at most half the file-descriptor limit).
    pub fn inbound_connections(&self) -> (usize, usize) {
        (self.inner.inbound.open(), self.inner.inbound.max_open())
    }

    /// The addresses of the current members (the node passes the membership view's), so
    /// that connections from their hosts keep the handshake places reserved for members
    /// (`reserved-member-handshakes`) and are not limited per address. IP addresses apply at
    /// once; host names are resolved in the background (each within 2 s). A call with the
    /// same hosts as the last one costs a set comparison.
    pub fn set_member_addresses<'a>(&self, addresses: impl IntoIterator<Item = &'a Address>) {
        let hosts = addresses.into_iter().map(|a| a.host.as_str());
        let names = self.inner.inbound.handshakes.set_member_hosts(hosts);
        if names.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let admission = Arc::downgrade(&self.inner.inbound.handshakes);
            runtime.spawn(resolve_member_names(admission, names));
        }
    }

    /// Follows the membership `view` (the cluster daemon's), handing its members' addresses
    /// to [`Transport::set_member_addresses`] whenever it changes, until the view closes or
    /// the transport shuts down.
    pub fn follow_membership(&self, mut view: watch::Receiver<Arc<MembershipView>>) {
        let this = self.clone();
        let mut shutdown = self.inner.shutdown.subscribe();
        let span = tracing::Span::current();
        tokio::spawn(
            async move {
                while !this.is_shut_down() {
                    let v = view.borrow_and_update().clone();
                    this.set_member_addresses(v.members.keys().map(|u| &u.address));
                    tokio::select! {
                        _ = shutdown.changed() => return,
                        r = view.changed() => if r.is_err() { return },
                    }
                }
            }
            .instrument(span),
        );
    }

    /// The lane for `frame` by size: a frame above `maximum-frame-size` moves to the
    /// large lane; `Err` if it exceeds even the large lane's limit.
    pub(super) fn lane_for(&self, lane: Lane, frame: &Frame) -> Result<Lane, SendError> {
        let settings = &self.inner.settings;
        let size = frame.payload.len() + ENVELOPE_OVERHEAD_MAX;
        if size <= settings.maximum_frame_size {
            return Ok(lane);
        }
        let body = frame.body_len();
        if body > settings.maximum_large_frame_size {
            Err(SendError::TooLarge(frame.payload.len()))
        } else if body > settings.maximum_frame_size {
            Ok(Lane::Large)
        } else {
            Ok(lane)
        }
    }

    /// Counts `messages` of `protocol` (`bytes` of payload) handed to the transport.
    pub(super) fn count_out(&self, protocol: ProtocolId, messages: u64, bytes: u64) {
        if let Some(p) = self.inner.stats.protocol(protocol) {
            add(&p.messages_out, messages);
            add(&p.bytes_out, bytes);
        }
    }

    /// Applies injected faults; `None` if the message is dropped or delayed.
    fn with_faults(&self, to: &Address, lane: Lane, frame: Frame) -> Option<Frame> {
        let faults = self.inner.faults.get(to)?;
        if faults.blackhole_outbound
            || (faults.drop_probability > 0.0 && rand::random::<f64>() < faults.drop_probability)
        {
            self.inner.stats.dropped(lane, 1);
            return None;
        }
        if faults.delay_ms > 0 {
            let this = self.clone();
            let to = to.clone();
            let delay = Duration::from_millis(faults.delay_ms);
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                this.enqueue(&to, lane, frame);
            });
            return None;
        }
        Some(frame)
    }

    /// Checks, counts and fault-injects a message; the lane and frame to queue, if any.
    pub(super) fn prepare(
        &self,
        to: &Address,
        lane: Lane,
        frame: Frame,
    ) -> Result<Option<(Lane, Frame)>, SendError> {
        let lane = match self.lane_for(lane, &frame) {
            Ok(l) => l,
            Err(e) => {
                self.too_large(to, &frame, e.clone());
                return Err(e);
            }
        };
        self.count_out(frame.protocol, 1, frame.payload.len() as u64);
        if self.inner.faults.get(to).is_none() {
            return Ok(Some((lane, frame)));
        }
        Ok(self.with_faults(to, lane, frame).map(|f| (lane, f)))
    }

    /// Queues a message for its destination; never blocks. Dropped (and counted) when the
    /// peer's lane queue is full, or the message is larger than the large lane allows.
    pub fn send(&self, o: Outbound) {
        let (to, lane, frame) = o.into_parts();
        if let Ok(Some((lane, frame))) = self.prepare(&to, lane, frame) {
            self.enqueue(&to, lane, frame);
        }
    }

    /// Queues a message, waiting while the peer's lane queue is full (for senders that
    /// want backpressure rather than drops, e.g. user messaging and `concord bench`).
    pub async fn send_wait(&self, o: Outbound) -> Result<(), SendError> {
        let (to, lane, frame) = o.into_parts();
        let Some((lane, mut frame)) = self.prepare(&to, lane, frame)? else {
            return Ok(());
        };
        loop {
            if self.inner.is_shut_down() {
                return Err(SendError::Shutdown);
            }
            match self.queue(&to, lane).push_wait(frame).await {
                Ok(()) => return Ok(()),
                // The lane's writer idled out meanwhile: a new one takes it.
                Err((_, back)) => frame = back,
            }
        }
    }

    /// A handle on the queue of `to` on `lane`, for a sender that sends many messages to
    /// one peer (it skips the lookup of the association per message).
    pub fn outbound_lane(&self, to: &Address, lane: Lane) -> OutboundLane {
        OutboundLane {
            transport: self.clone(),
            to: to.clone(),
            lane,
            queue: self.queue(to, lane),
        }
    }

    pub(super) fn too_large(&self, to: &Address, frame: &Frame, e: SendError) {
        self.inner.stats.dropped(Lane::Large, 1);
        if let Some(suppressed) = self.inner.log.allow("too-large") {
            warn!(%to, protocol = %frame.protocol, size = frame.payload.len(), suppressed, "dropping message: {e}");
        }
    }

    /// The queue of `to` on `lane`, its writer started if needed.
    fn queue(&self, to: &Address, lane: Lane) -> Arc<LaneQueue> {
        let mut map = self
            .inner
            .associations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(q) = map.get(to).and_then(|l| l[lane.index()].as_ref()) {
            if !q.is_closed() {
                return q.clone();
            }
        }
        let settings = &self.inner.settings;
        let q = Arc::new(LaneQueue::new(
            settings.queue_size(lane),
            settings
                .outbound_queue_max_bytes
                .max(settings.frame_limit(lane) + 64),
            settings.lane_buffer_bytes,
        ));
        map.entry(to.clone()).or_default()[lane.index()] = Some(q.clone());
        let span = tracing::Span::current();
        tokio::spawn(
            run_lane_writer(self.inner.clone(), to.clone(), lane, q.clone()).instrument(span),
        );
        q
    }

    pub(super) fn enqueue(&self, to: &Address, lane: Lane, mut frame: Frame) {
        for _ in 0..2 {
            if self.inner.is_shut_down() {
                return;
            }
            match self.queue(to, lane).push(frame) {
                Ok(()) => return,
                Err((PushError::Full, _)) => break,
                // The lane's writer idled out meanwhile: a new one takes it.
                Err((PushError::Closed, back)) => frame = back,
            }
        }
        self.inner.stats.dropped(lane, 1);
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

    /// Waits (at most `timeout`) until every lane's writer has taken what was queued for
    /// it, so the last messages of a stopping node go out before [`Transport::shutdown`].
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
                    .all(|q| q.is_closed() || q.is_empty())
            };
            if empty || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until the listening socket is closed after [`Transport::shutdown`] (at most
    /// `limit`), so that a node restarted in the same process can bind the same port.
    pub async fn listener_closed(&self, limit: Duration) {
        let mut rx = self.inner.listening.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|open| !*open)).await;
    }

    /// Stops accepting and closes every connection (what is queued is dropped).
    pub fn shutdown(&self) {
        self.inner.shut_down.store(true, Ordering::Relaxed);
        let _ = self.inner.shutdown.send(true);
        let mut map = self
            .inner
            .associations
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (_, lanes) in map.drain() {
            for q in lanes.into_iter().flatten() {
                q.close();
            }
        }
    }

    /// True once [`Transport::shutdown`] ran.
    pub fn is_shut_down(&self) -> bool {
        self.inner.is_shut_down()
    }
}
