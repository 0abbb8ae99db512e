//! TCP transport: one listener for inbound connections and one outbound association per
//! peer address, each a tokio task.
//!
//! Connections carry length-prefixed frames (`tokio_util::codec::LengthDelimitedCodec`,
//! at most `maximum-frame-size` bytes). The connecting side sends a `Handshake` (its unique
//! address, the target address, the cluster name and the protocol version); the accepting
//! side refuses a wrong cluster name, an unknown protocol version or a quarantined
//! incarnation with a clear log line on both ends, and otherwise replies with its own
//! unique address. After that the connection is one-way: the connecting side writes
//! cluster messages, the accepting side reads them (replies go over the replier's own
//! outbound association, as in Akka Artery).
//!
//! Malformed frames never panic: they close that one connection and are counted.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use concord_core::{Address, ClusterMessage, Transmit, UniqueAddress};
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use tracing::{debug, info, warn, Instrument};

use super::codec::{
    address_from_wire, address_to_wire, decode_message, encode_message, unique_from_wire,
    unique_to_wire,
};
use super::{wire, PROTOCOL_VERSION};

/// Transport settings (`[remote]` in the config file).
#[derive(Clone, Debug)]
pub struct TransportSettings {
    /// Largest frame sent or accepted, bytes (default 256 KiB, Artery's default).
    pub maximum_frame_size: usize,
    /// Time allowed for the handshake (default 20 s in Akka; we use 5 s).
    pub handshake_timeout: Duration,
    /// Messages queued per peer while (re)connecting; more are dropped (default 3072).
    pub outbound_message_queue_size: usize,
    /// First reconnect delay (default 100 ms), doubled up to `connect_backoff_max`.
    pub connect_backoff_min: Duration,
    /// Largest reconnect delay (default 2 s).
    pub connect_backoff_max: Duration,
    /// An association with nothing to send for this long is closed (default 5 min).
    pub idle_timeout: Duration,
}

impl Default for TransportSettings {
    fn default() -> Self {
        TransportSettings {
            maximum_frame_size: 256 * 1024,
            handshake_timeout: Duration::from_secs(5),
            outbound_message_queue_size: 3072,
            connect_backoff_min: Duration::from_millis(100),
            connect_backoff_max: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// A message received from an authenticated peer.
#[derive(Debug)]
pub struct Inbound {
    /// The sender, as established by the handshake.
    pub from: UniqueAddress,
    /// The message.
    pub message: ClusterMessage,
    /// Frame size, bytes.
    pub bytes: usize,
}

/// Transport counters (exported as metrics).
#[derive(Debug, Default)]
pub struct TransportStats {
    /// Frames written.
    pub frames_out: AtomicU64,
    /// Bytes written (frame payloads).
    pub bytes_out: AtomicU64,
    /// Frames read.
    pub frames_in: AtomicU64,
    /// Bytes read (frame payloads).
    pub bytes_in: AtomicU64,
    /// Connections closed because of a malformed or oversized frame.
    pub malformed_frames: AtomicU64,
    /// Handshakes refused (either direction).
    pub handshakes_refused: AtomicU64,
    /// Outbound messages dropped (queue full, peer unreachable, wrong incarnation).
    pub dropped_outbound: AtomicU64,
    /// Bytes of gossip (envelopes and status) written.
    pub gossip_bytes_out: AtomicU64,
}

/// Injected faults on the link to one peer (transport level, like Akka's multi-node
/// testkit `blackhole`/`throttle`). Only reachable over the management API when
/// `testkit.fault-injection = on`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkFaults {
    /// Drop everything this node sends to the peer.
    pub blackhole_outbound: bool,
    /// Drop everything this node receives from the peer.
    pub blackhole_inbound: bool,
    /// Probability (0..=1) to drop each outbound message.
    pub drop_probability: f64,
    /// Delay added to each outbound message, ms.
    pub delay_ms: u64,
}

impl LinkFaults {
    /// True if nothing is injected.
    pub fn is_clear(&self) -> bool {
        *self == LinkFaults::default()
    }
}

/// Something the transport tells the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportEvent {
    /// A peer refused our handshake because this incarnation is quarantined.
    QuarantinedBy(Address),
}

struct Inner {
    self_address: UniqueAddress,
    faults: RwLock<HashMap<Address, LinkFaults>>,
    events: mpsc::UnboundedSender<TransportEvent>,
    settings: TransportSettings,
    associations: Mutex<HashMap<Address, mpsc::Sender<Transmit>>>,
    quarantined: RwLock<HashSet<UniqueAddress>>,
    stats: TransportStats,
    shutdown: watch::Sender<bool>,
}

/// Handle to the running transport. Cheap to clone.
#[derive(Clone)]
pub struct Transport {
    inner: Arc<Inner>,
    local_addr: SocketAddr,
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

fn codec(max: usize) -> LengthDelimitedCodec {
    LengthDelimitedCodec::builder()
        .max_frame_length(max)
        .new_codec()
}

impl Transport {
    /// Binds `bind_addr` and starts accepting connections; inbound messages go to `inbound`.
    pub async fn bind(
        self_address: UniqueAddress,
        bind_addr: &str,
        settings: TransportSettings,
        inbound: mpsc::Sender<Inbound>,
        events: mpsc::UnboundedSender<TransportEvent>,
    ) -> Result<Transport, TransportError> {
        let listener =
            TcpListener::bind(bind_addr)
                .await
                .map_err(|source| TransportError::Bind {
                    addr: bind_addr.to_string(),
                    source,
                })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| TransportError::Bind {
                addr: bind_addr.to_string(),
                source,
            })?;
        let (shutdown, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            self_address,
            faults: RwLock::new(HashMap::new()),
            events,
            settings,
            associations: Mutex::new(HashMap::new()),
            quarantined: RwLock::new(HashSet::new()),
            stats: TransportStats::default(),
            shutdown,
        });
        let span = tracing::Span::current();
        tokio::spawn(accept_loop(inner.clone(), listener, inbound).instrument(span));
        Ok(Transport { inner, local_addr })
    }

    /// The bound socket address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Counters.
    pub fn stats(&self) -> &TransportStats {
        &self.inner.stats
    }

    /// Queues a message for its destination; never blocks. Dropped (and counted) when
    /// the peer's queue is full or the destination incarnation is quarantined.
    pub fn send(&self, t: Transmit) {
        let faults = self.faults_for(&t.to);
        if !faults.is_clear() {
            if faults.blackhole_outbound
                || (faults.drop_probability > 0.0
                    && rand::random::<f64>() < faults.drop_probability)
            {
                self.inner
                    .stats
                    .dropped_outbound
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
            if faults.delay_ms > 0 {
                let this = self.clone();
                let delay = Duration::from_millis(faults.delay_ms);
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    this.enqueue(t);
                });
                return;
            }
        }
        self.enqueue(t);
    }

    /// Faults injected on the link to `peer`.
    pub fn faults_for(&self, peer: &Address) -> LinkFaults {
        self.inner.faults_for(peer)
    }

    /// Injects `faults` on the link to `peer` (clear faults remove the entry).
    pub fn set_faults(&self, peer: Address, faults: LinkFaults) {
        let mut f = match self.inner.faults.write() {
            Ok(f) => f,
            Err(p) => p.into_inner(),
        };
        if faults.is_clear() {
            f.remove(&peer);
        } else {
            warn!(%peer, ?faults, "fault injection on link");
            f.insert(peer, faults);
        }
    }

    /// All injected faults.
    pub fn all_faults(&self) -> Vec<(Address, LinkFaults)> {
        match self.inner.faults.read() {
            Ok(f) => f.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            Err(p) => p
                .into_inner()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// Removes every injected fault.
    pub fn clear_faults(&self) {
        if let Ok(mut f) = self.inner.faults.write() {
            f.clear();
        }
    }

    fn enqueue(&self, t: Transmit) {
        if let Some(uid) = t.to_uid {
            if self.is_quarantined(&UniqueAddress::new(t.to.clone(), uid)) {
                self.inner
                    .stats
                    .dropped_outbound
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        let mut map = match self.inner.associations.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let to = t.to.clone();
        let t = match map.get(&to) {
            Some(tx) => match tx.try_send(t) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.inner
                        .stats
                        .dropped_outbound
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(mpsc::error::TrySendError::Closed(t)) => t,
            },
            None => t,
        };
        let (tx, rx) = mpsc::channel(self.inner.settings.outbound_message_queue_size.max(1));
        let _ = tx.try_send(t);
        map.insert(to.clone(), tx);
        let span = tracing::Span::current();
        tokio::spawn(run_association(self.inner.clone(), to, rx).instrument(span));
    }

    /// Refuses this incarnation from now on (a removed or replaced node).
    pub fn quarantine(&self, node: &UniqueAddress) {
        let mut q = match self.inner.quarantined.write() {
            Ok(q) => q,
            Err(p) => p.into_inner(),
        };
        if q.insert(node.clone()) {
            info!(%node, "quarantined: connections from and messages to this incarnation are refused");
        }
    }

    /// True if `node` is quarantined.
    pub fn is_quarantined(&self, node: &UniqueAddress) -> bool {
        self.inner.is_quarantined(node)
    }

    /// Stops accepting and closes every connection.
    pub fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
        if let Ok(mut m) = self.inner.associations.lock() {
            m.clear();
        }
    }
}

impl Inner {
    fn faults_for(&self, peer: &Address) -> LinkFaults {
        match self.faults.read() {
            Ok(f) => f.get(peer).cloned().unwrap_or_default(),
            Err(p) => p.into_inner().get(peer).cloned().unwrap_or_default(),
        }
    }

    fn is_quarantined(&self, node: &UniqueAddress) -> bool {
        match self.quarantined.read() {
            Ok(q) => q.contains(node),
            Err(p) => p.into_inner().contains(node),
        }
    }
}

async fn accept_loop(inner: Arc<Inner>, listener: TcpListener, inbound: mpsc::Sender<Inbound>) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            res = listener.accept() => match res {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let span = tracing::Span::current();
                    tokio::spawn(handle_inbound(inner.clone(), stream, peer, inbound.clone()).instrument(span));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

fn refuse_reason(inner: &Inner, hs: &wire::Handshake) -> Result<UniqueAddress, (String, bool)> {
    check_handshake(inner, hs).map_err(|r| (r, false)).and_then(|from| {
        if inner.is_quarantined(&from) {
            Err((format!("incarnation {from} is quarantined (it was removed from the cluster); restart it to join again"), true))
        } else {
            Ok(from)
        }
    })
}

fn check_handshake(inner: &Inner, hs: &wire::Handshake) -> Result<UniqueAddress, String> {
    if hs.protocol_version != PROTOCOL_VERSION {
        return Err(format!(
            "unsupported protocol version {} (this node speaks {PROTOCOL_VERSION})",
            hs.protocol_version
        ));
    }
    let me = &inner.self_address.address;
    if hs.cluster_name != me.system {
        return Err(format!(
            "cluster name `{}` does not match this node's cluster name `{}`",
            hs.cluster_name, me.system
        ));
    }
    let from = hs
        .from
        .as_ref()
        .ok_or_else(|| "handshake without a sender address".to_string())
        .and_then(|u| unique_from_wire(u).map_err(|e| format!("bad sender address: {e}")))?;
    if let Some(to) = &hs.to {
        match address_from_wire(to) {
            Ok(to) if to.port != me.port => {
                return Err(format!("handshake for {to} arrived at {me}"));
            }
            Ok(_) => {}
            Err(e) => return Err(format!("bad target address: {e}")),
        }
    }
    Ok(from)
}

async fn handle_inbound(
    inner: Arc<Inner>,
    stream: TcpStream,
    peer: SocketAddr,
    inbound: mpsc::Sender<Inbound>,
) {
    let mut framed = Framed::new(stream, codec(inner.settings.maximum_frame_size));
    let mut shutdown = inner.shutdown.subscribe();
    let first = match tokio::time::timeout(inner.settings.handshake_timeout, framed.next()).await {
        Ok(Some(Ok(f))) => f,
        Ok(Some(Err(e))) => {
            inner.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
            warn!(%peer, error = %e, "closing inbound connection: malformed first frame");
            return;
        }
        Ok(None) => return,
        Err(_) => {
            debug!(%peer, "closing inbound connection: no handshake within handshake-timeout");
            return;
        }
    };
    let hs = match wire::Handshake::decode(first.as_ref()) {
        Ok(h) => h,
        Err(e) => {
            inner.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
            warn!(%peer, error = %e, "closing inbound connection: malformed handshake");
            return;
        }
    };
    let from = match refuse_reason(&inner, &hs) {
        Ok(from) => from,
        Err((reason, quarantined)) => {
            inner
                .stats
                .handshakes_refused
                .fetch_add(1, Ordering::Relaxed);
            warn!(%peer, %reason, "refused inbound connection");
            let reply = wire::HandshakeReply {
                result: Some(wire::handshake_reply::Result::Rejected(reason)),
                quarantined,
            };
            let _ = framed.send(Bytes::from(reply.encode_to_vec())).await;
            return;
        }
    };
    let reply = wire::HandshakeReply {
        result: Some(wire::handshake_reply::Result::Accepted(unique_to_wire(
            &inner.self_address,
        ))),
        quarantined: false,
    };
    if framed
        .send(Bytes::from(reply.encode_to_vec()))
        .await
        .is_err()
    {
        return;
    }
    debug!(%from, %peer, "inbound association established");
    loop {
        let frame = tokio::select! {
            _ = shutdown.changed() => return,
            f = framed.next() => f,
        };
        let frame = match frame {
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                inner.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                warn!(%from, error = %e, "closing inbound connection: bad frame");
                return;
            }
            None => return,
        };
        inner.stats.frames_in.fetch_add(1, Ordering::Relaxed);
        inner
            .stats
            .bytes_in
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
        if inner.is_quarantined(&from) {
            debug!(%from, "closing inbound connection from a quarantined incarnation");
            return;
        }
        if inner.faults_for(&from.address).blackhole_inbound {
            continue;
        }
        match decode_message(&frame) {
            Ok(message) => {
                if inbound
                    .send(Inbound {
                        from: from.clone(),
                        message,
                        bytes: frame.len(),
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            Err(e) => {
                inner.stats.malformed_frames.fetch_add(1, Ordering::Relaxed);
                warn!(%from, error = %e, "closing inbound connection: malformed message");
                return;
            }
        }
    }
}

enum ConnectError {
    Io(std::io::Error),
    Refused(String),
    Quarantined(String),
    Protocol(String),
}

async fn connect(
    inner: &Inner,
    to: &Address,
) -> Result<(Framed<TcpStream, LengthDelimitedCodec>, UniqueAddress), ConnectError> {
    let stream = tokio::time::timeout(
        inner.settings.handshake_timeout,
        TcpStream::connect(to.host_port()),
    )
    .await
    .map_err(|_| {
        ConnectError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "connect timed out",
        ))
    })?
    .map_err(ConnectError::Io)?;
    let _ = stream.set_nodelay(true);
    let mut framed = Framed::new(stream, codec(inner.settings.maximum_frame_size));
    let hs = wire::Handshake {
        from: Some(unique_to_wire(&inner.self_address)),
        to: Some(address_to_wire(to)),
        protocol_version: PROTOCOL_VERSION,
        cluster_name: inner.self_address.address.system.clone(),
    };
    framed
        .send(Bytes::from(hs.encode_to_vec()))
        .await
        .map_err(ConnectError::Io)?;
    let reply = match tokio::time::timeout(inner.settings.handshake_timeout, framed.next()).await {
        Ok(Some(Ok(f))) => f,
        Ok(Some(Err(e))) => return Err(ConnectError::Io(e)),
        Ok(None) => {
            return Err(ConnectError::Protocol(
                "connection closed during handshake".into(),
            ))
        }
        Err(_) => {
            return Err(ConnectError::Protocol(
                "no handshake reply within handshake-timeout".into(),
            ))
        }
    };
    let reply = wire::HandshakeReply::decode(reply.as_ref())
        .map_err(|e| ConnectError::Protocol(format!("malformed handshake reply: {e}")))?;
    match reply.result {
        Some(wire::handshake_reply::Result::Accepted(u)) => {
            let peer = unique_from_wire(&u).map_err(|e| ConnectError::Protocol(e.to_string()))?;
            if peer.address.system != inner.self_address.address.system {
                return Err(ConnectError::Refused(format!(
                    "peer belongs to cluster `{}`",
                    peer.address.system
                )));
            }
            if inner.is_quarantined(&peer) {
                return Err(ConnectError::Refused(format!(
                    "peer incarnation {peer} is quarantined"
                )));
            }
            Ok((framed, peer))
        }
        Some(wire::handshake_reply::Result::Rejected(reason)) if reply.quarantined => {
            Err(ConnectError::Quarantined(reason))
        }
        Some(wire::handshake_reply::Result::Rejected(reason)) => Err(ConnectError::Refused(reason)),
        None => Err(ConnectError::Protocol("empty handshake reply".into())),
    }
}

async fn run_association(inner: Arc<Inner>, to: Address, mut rx: mpsc::Receiver<Transmit>) {
    let mut backoff = inner.settings.connect_backoff_min;
    let mut shutdown = inner.shutdown.subscribe();
    let mut pending: Option<Transmit> = None;
    let mut logged_failure = false;
    loop {
        let first = match pending.take() {
            Some(t) => t,
            None => tokio::select! {
                _ = shutdown.changed() => return,
                r = tokio::time::timeout(inner.settings.idle_timeout, rx.recv()) => match r {
                    Ok(Some(t)) => t,
                    _ => {
                        if let Ok(mut m) = inner.associations.lock() {
                            m.remove(&to);
                        }
                        return;
                    }
                }
            },
        };
        match connect(&inner, &to).await {
            Ok((framed, peer)) => {
                backoff = inner.settings.connect_backoff_min;
                if logged_failure {
                    info!(%to, "association re-established");
                    logged_failure = false;
                }
                debug!(%peer, "outbound association established");
                pending = write_loop(&inner, framed, &peer, first, &mut rx, &mut shutdown).await;
                if *shutdown.borrow() {
                    return;
                }
            }
            Err(e) => {
                match e {
                    ConnectError::Refused(reason) => {
                        inner
                            .stats
                            .handshakes_refused
                            .fetch_add(1, Ordering::Relaxed);
                        warn!(%to, %reason, "handshake refused by peer");
                    }
                    ConnectError::Quarantined(reason) => {
                        inner
                            .stats
                            .handshakes_refused
                            .fetch_add(1, Ordering::Relaxed);
                        warn!(%to, %reason, "handshake refused by peer: this incarnation is quarantined");
                        let _ = inner.events.send(TransportEvent::QuarantinedBy(to.clone()));
                    }
                    ConnectError::Protocol(reason) => warn!(%to, %reason, "handshake failed"),
                    ConnectError::Io(err) => {
                        if !logged_failure {
                            debug!(%to, error = %err, "cannot connect; will retry with backoff");
                        }
                    }
                }
                logged_failure = true;
                // The peer is not reachable: what was queued for it is stale.
                let mut dropped = 1;
                while rx.try_recv().is_ok() {
                    dropped += 1;
                }
                inner
                    .stats
                    .dropped_outbound
                    .fetch_add(dropped, Ordering::Relaxed);
                tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(inner.settings.connect_backoff_max);
            }
        }
    }
}

/// Writes messages until the connection fails; returns the message that could not be
/// written (to retry on a new connection).
async fn write_loop(
    inner: &Inner,
    framed: Framed<TcpStream, LengthDelimitedCodec>,
    peer: &UniqueAddress,
    first: Transmit,
    rx: &mut mpsc::Receiver<Transmit>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Transmit> {
    let (mut sink, mut stream) = framed.split();
    let mut next = Some(first);
    loop {
        let t = match next.take() {
            Some(t) => t,
            None => tokio::select! {
                _ = shutdown.changed() => return None,
                // The accepting side never writes after the handshake: anything here
                // means the connection closed.
                _ = stream.next() => return None,
                r = rx.recv() => r?,
            },
        };
        if t.to_uid.is_some_and(|u| u != peer.uid) {
            // Meant for another incarnation at this address.
            inner.stats.dropped_outbound.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if inner.is_quarantined(peer) {
            inner.stats.dropped_outbound.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let bytes = encode_message(&t.message);
        if bytes.len() > inner.settings.maximum_frame_size {
            inner.stats.dropped_outbound.fetch_add(1, Ordering::Relaxed);
            warn!(to = %peer, kind = t.message.kind(), size = bytes.len(), "dropping message larger than maximum-frame-size");
            continue;
        }
        let len = bytes.len() as u64;
        if let Err(e) = sink.send(Bytes::from(bytes)).await {
            debug!(to = %peer, error = %e, "write failed; reconnecting");
            return Some(t);
        }
        inner.stats.frames_out.fetch_add(1, Ordering::Relaxed);
        inner.stats.bytes_out.fetch_add(len, Ordering::Relaxed);
        if t.message.is_gossip() {
            inner
                .stats
                .gossip_bytes_out
                .fetch_add(len, Ordering::Relaxed);
        }
    }
}
