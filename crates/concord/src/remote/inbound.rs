//! Inbound connections: the accept loop, the handshake, and the reader that routes each
//! envelope to its protocol's queue by protocol id.
//!
//! A reader takes every complete frame its last read brought in and hands each protocol
//! one batch of them (one queue operation per read, not per message). Envelopes of an
//! unknown protocol or manifest, or for another incarnation, are counted and dropped
//! (rate-limited log line) and the connection stays open. A frame above the lane's limit,
//! a malformed envelope or payload closes that one connection and is counted; nothing from
//! the network can panic the node. A protocol whose queue is full slows its connection
//! down (backpressure).
//!
//! Limits (see [`super::TransportSettings`]): inbound connections in total (at most half the
//! file-descriptor limit) and per peer address, connections in their handshake (in total,
//! per source address, and a reserve for members' addresses: [`super::admission`]), the
//! time a frame may take to arrive once begun (`read-timeout`) and an idle connection may
//! stay, and the bytes all connections hold in large frames still arriving. A failed accept
//! (out of descriptors) backs off instead of spinning. Every refusal is counted; log lines
//! are rate-limited.

use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use concord_core::{Lane, ProtocolId, UniqueAddress};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::admission::HandshakePlace;
use super::envelope::{decode_envelope_head_at, FRAME_HEADER_BYTES};
use super::handshake::accept;
use super::inbound_limits::{take_place, BufferAccount, Held, PeerPlace};
use super::registry::{DecodeError, Delivery, RawBatch};
use super::settings::READ_BUFFER_BYTES;
use super::stats::{add, inc};
use super::transport_state::Inner;
use concord_core::TraceContext;

/// First delay after a failed accept (e.g. EMFILE: out of file descriptors), doubled up to
/// [`ACCEPT_BACKOFF_MAX`] while accepts keep failing.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

pub(crate) async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    /// Reports the listener closed when dropped (declared before the listener, so dropped
    /// after it).
    struct Closed(watch::Sender<bool>);
    impl Drop for Closed {
        fn drop(&mut self) {
            self.0.send_replace(false);
        }
    }
    let _closed = Closed(inner.listening.clone());
    let listener = listener;
    let mut shutdown = inner.shutdown.subscribe();
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            res = listener.accept() => match res {
                Ok((stream, peer)) => {
                    backoff = ACCEPT_BACKOFF_MIN;
                    admit(&inner, stream, peer);
                }
                Err(e) => {
                    inc(&inner.stats.accept_errors);
                    if let Some(suppressed) = inner.log.allow("accept") {
                        warn!(error = %e, suppressed, retry_in = ?backoff, "accepting a remoting connection failed");
                    }
                    tokio::select! {
                        _ = shutdown.changed() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
            }
        }
    }
}

/// Starts serving an accepted connection, or closes it at once when the node is at its
/// connection or handshake cap.
fn admit(inner: &Arc<Inner>, stream: TcpStream, peer: SocketAddr) {
    let limits = &inner.inbound;
    let refuse = |why: &str| {
        inc(&inner.stats.connections_refused);
        if let Some(suppressed) = inner.log.allow("inbound-cap") {
            warn!(%peer, suppressed, "closing an inbound connection: {why}");
        }
    };
    // Places are taken here, in the accept loop, so the caps hold however fast clients
    // connect; the task releases them.
    if take_place(&limits.open, limits.max_open)
        .map(std::mem::forget)
        .is_none()
    {
        refuse("at remote.max-inbound-connections");
        return;
    }
    if let Err(no) = limits.handshakes.try_take(peer.ip()) {
        limits.open.fetch_sub(1, Ordering::Relaxed);
        refuse(no.reason());
        return;
    }
    let _ = stream.set_nodelay(true);
    let span = tracing::Span::current();
    let accepted_at = Instant::now();
    tokio::spawn(tracing::Instrument::instrument(
        handle_inbound(inner.clone(), stream, peer, accepted_at),
        span,
    ));
}

async fn handle_inbound(
    inner: Arc<Inner>,
    stream: TcpStream,
    peer: SocketAddr,
    accepted_at: Instant,
) {
    let limits = &inner.inbound;
    let _open = Held(&limits.open);
    let pending = HandshakePlace::adopt(&limits.handshakes, peer.ip());
    let mut shutdown = inner.shutdown.subscribe();
    let accepted = tokio::select! {
        _ = shutdown.changed() => return,
        a = accept(&inner, stream, peer, accepted_at) => a,
    };
    drop(pending);
    let Some(accepted) = accepted else { return };
    let (from, lane) = (accepted.from, accepted.lane);
    let Some(_place) = PeerPlace::take(
        limits,
        &from.address,
        inner.settings.max_inbound_connections_per_peer,
    ) else {
        inc(&inner.stats.connections_refused);
        if let Some(suppressed) = inner.log.allow(&format!("inbound-{}", peer.ip())) {
            warn!(%from, %peer, suppressed, "closing an inbound connection: too many from this peer");
        }
        return;
    };
    let mut buf = accepted.read_buf;
    let mut stream = accepted.stream;
    let mut account = BufferAccount {
        limits,
        budget: inner.settings.max_inbound_buffered_bytes,
        held: 0,
    };
    let limit = inner.settings.frame_limit(lane);
    let read_timeout = inner.settings.read_timeout;
    let idle_timeout = (inner.settings.idle_timeout * 2).max(read_timeout);
    let mut batches = Batches::default();
    // When the frame now arriving began (None: nothing partial buffered), and when the last
    // complete frame arrived.
    let mut frame_started: Option<Instant> = (!buf.is_empty()).then(Instant::now);
    let mut last_frame = Instant::now();
    loop {
        match complete_frames(&buf, limit) {
            Err(len) => {
                inc(&inner.stats.malformed_frames);
                if let Some(suppressed) = inner.log.allow(&format!("malformed-{}", from.address)) {
                    warn!(%from, lane = lane.as_str(), len, limit, suppressed, "closing inbound connection: frame larger than the lane's limit");
                }
                return;
            }
            Ok((0, need)) => {
                if !buf.is_empty() && frame_started.is_none() {
                    frame_started = Some(Instant::now());
                }
                // Grow by what arrives, not by what the frame announces: a peer holds only
                // as much memory as it has sent.
                let want = need
                    .saturating_sub(buf.len())
                    .clamp(MIN_READ_BUFFER_BYTES, READ_BUFFER_BYTES);
                buf.reserve(want);
                if !account.set(buf.capacity()) {
                    inc(&inner.stats.buffer_limit_hits);
                    if let Some(suppressed) = inner.log.allow("inbound-buffer") {
                        warn!(%from, lane = lane.as_str(), need, suppressed, "closing inbound connection: remote.max-inbound-buffered-bytes reached");
                    }
                    return;
                }
                let deadline = match frame_started {
                    Some(t) => t + read_timeout,
                    None => last_frame + idle_timeout,
                };
                let n = tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = tokio::time::sleep_until(deadline) => {
                        inc(&inner.stats.read_timeouts);
                        let what = if frame_started.is_some() { "an unfinished frame" } else { "an idle connection" };
                        debug!(%from, lane = lane.as_str(), "closing inbound connection: {what} (read timeout)");
                        return;
                    }
                    r = stream.read_buf(&mut buf) => r,
                };
                match n {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
            Ok((end, need)) => {
                let chunk = Bytes::from_owner(Chunk(buf.split_to(end).freeze()));
                // The next reads go to a buffer of their own: the payloads handed out share
                // this chunk's reference count (and keep it alive while any is kept), and
                // the threads that drop them should not contend with this one on it. It is
                // sized by the traffic: a quiet lane does not pin 64 KiB per message.
                let size = (end * 2).clamp(MIN_READ_BUFFER_BYTES, READ_BUFFER_BYTES);
                let mut fresh =
                    BytesMut::with_capacity(need.min(READ_BUFFER_BYTES).max(size).max(buf.len()));
                fresh.extend_from_slice(&buf);
                buf = fresh;
                let _ = account.set(buf.capacity());
                last_frame = Instant::now();
                frame_started = (!buf.is_empty()).then_some(last_frame);
                if !route_chunk(&inner, &from, lane, chunk, &mut batches).await {
                    return;
                }
            }
        }
    }
}

/// Smallest read buffer, bytes.
const MIN_READ_BUFFER_BYTES: usize = 4 * 1024;

/// The frames of one read. Every payload handed out is a slice of it and shares its
/// reference count: the alignment gives that count a cache line of its own, so the reader
/// (taking slices of the next chunk) and the protocol's task (dropping the payloads of the
/// previous one) do not contend on neighbouring counters.
#[repr(align(128))]
struct Chunk(Bytes);

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// The length of the complete frames at the start of `buf`, and the capacity needed to
/// hold the next (incomplete) frame; `Err(len)` if a frame announces more than `limit`.
pub(crate) fn complete_frames(buf: &[u8], limit: usize) -> Result<(usize, usize), usize> {
    let mut pos = 0;
    loop {
        let rest = &buf[pos..];
        if rest.len() < FRAME_HEADER_BYTES {
            return Ok((pos, FRAME_HEADER_BYTES));
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len > limit {
            return Err(len);
        }
        if rest.len() < FRAME_HEADER_BYTES + len {
            return Ok((pos, FRAME_HEADER_BYTES + len));
        }
        pos += FRAME_HEADER_BYTES + len;
    }
}

/// Most entries a protocol's list keeps between reads (the rest is freed).
const MAX_KEPT_BATCH_CAPACITY: usize = 1_024;

/// The envelopes of one read, grouped by protocol (a node speaks a handful): each as its
/// manifest and its payload's byte range in the read chunk. The lists keep their capacity
/// from read to read.
#[derive(Default)]
struct Batches {
    by_protocol: Vec<(ProtocolId, RawBatch)>,
    /// The trace contexts of the traced envelopes: (protocol, index in its batch, context);
    /// empty unless a peer traces.
    traces: Vec<(ProtocolId, usize, TraceContext)>,
}

impl Batches {
    fn push(
        &mut self,
        protocol: ProtocolId,
        manifest: u32,
        payload: Range<usize>,
        trace: Option<TraceContext>,
    ) {
        let at = match self.by_protocol.iter_mut().find(|(p, _)| *p == protocol) {
            Some((_, v)) => {
                v.push((manifest, payload));
                v.len() - 1
            }
            None => {
                self.by_protocol.push((protocol, vec![(manifest, payload)]));
                0
            }
        };
        if let Some(t) = trace {
            self.traces.push((protocol, at, t));
        }
    }
}

/// Routes the complete frames of one read; false if the connection must close.
async fn route_chunk(
    inner: &Inner,
    from: &UniqueAddress,
    lane: Lane,
    chunk: Bytes,
    batches: &mut Batches,
) -> bool {
    let stats = inner.stats.lane(lane);
    add(&stats.bytes_in, chunk.len() as u64);
    if inner.is_quarantined(from) {
        debug!(%from, "closing inbound connection from a quarantined incarnation");
        return false;
    }
    let blackholed = inner
        .faults
        .get(&from.address)
        .is_some_and(|f| f.blackhole_inbound);
    let mut off = 0;
    let mut frames = 0;
    let mut keep = true;
    while off < chunk.len() {
        let len = u32::from_be_bytes([chunk[off], chunk[off + 1], chunk[off + 2], chunk[off + 3]])
            as usize;
        let (start, end) = (off + FRAME_HEADER_BYTES, off + FRAME_HEADER_BYTES + len);
        off = end;
        frames += 1;
        if blackholed {
            continue;
        }
        let env = match decode_envelope_head_at(&chunk, start, end) {
            Ok(env) => env,
            Err(e) => {
                inc(&inner.stats.malformed_frames);
                if let Some(suppressed) = inner.log.allow(&format!("malformed-{}", from.address)) {
                    warn!(%from, lane = lane.as_str(), error = %e, suppressed, "closing inbound connection: malformed envelope");
                }
                keep = false;
                break;
            }
        };
        if env.recipient_uid != 0 && env.recipient_uid != inner.self_address.uid {
            inc(&inner.stats.wrong_incarnation);
            continue;
        }
        let protocol = ProtocolId(env.protocol);
        if !inner.registry.contains(protocol) {
            inc(&inner.stats.unknown_protocol);
            if let Some(suppressed) = inner.log.allow("unknown-protocol") {
                warn!(%from, protocol = env.protocol, manifest = env.manifest, suppressed, "dropping a message of a protocol this node does not run");
            }
            continue;
        }
        batches.push(protocol, env.manifest, env.payload, env.trace);
    }
    add(&stats.frames_in, frames);
    // What decoded before a malformed frame is still delivered.
    let traces = std::mem::take(&mut batches.traces);
    for (protocol, raw) in batches.by_protocol.iter_mut() {
        if raw.is_empty() {
            continue;
        }
        let protocol = *protocol;
        let traced: Vec<(usize, TraceContext)> = if traces.is_empty() {
            Vec::new()
        } else {
            traces
                .iter()
                .filter(|(p, _, _)| *p == protocol)
                .map(|(_, i, t)| (*i, *t))
                .collect()
        };
        let routed = inner.registry.deliver(protocol, from, &chunk, raw, &traced);
        raw.clear();
        // Kept for the next read, but not more than a busy read needs: a peer's flood of
        // tiny frames must not pin memory for the life of the connection.
        raw.shrink_to(MAX_KEPT_BATCH_CAPACITY);
        let Some(routed) = routed else {
            continue;
        };
        let pstats = inner.stats.protocol(protocol);
        if let Some(p) = pstats {
            add(&p.inbound.messages_in, routed.delivered);
            add(&p.inbound.bytes_in, routed.bytes);
            add(&p.inbound.unknown_messages, routed.unknown.len() as u64);
        }
        if let Some(m) = routed.unknown.first() {
            if let Some(suppressed) = inner.log.allow(&format!("unknown-manifest-{protocol}")) {
                warn!(%from, %protocol, manifest = m, count = routed.unknown.len(), suppressed, "dropping a message type this build does not know");
            }
        }
        if let Some((manifest, e)) = routed.malformed {
            if matches!(e, DecodeError::DecompressedTooLarge(_)) {
                inc(&inner.stats.decompression_limit_hits);
            }
            inc(&inner.stats.malformed_frames);
            if let Some(suppressed) = inner.log.allow(&format!("malformed-{}", from.address)) {
                warn!(%from, %protocol, manifest, error = %e, suppressed, "closing inbound connection: malformed message");
            }
            keep = false;
        }
        if let Delivery::Blocked(wait) = routed.delivery {
            // The protocol's queue is full: this connection waits (backpressure).
            wait.await;
        }
    }
    keep
}
