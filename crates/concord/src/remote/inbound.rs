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

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use concord_core::{Lane, ProtocolId, UniqueAddress};
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use tracing::{debug, warn};

use super::envelope::{decode_envelope_at, FRAME_HEADER_BYTES};
use super::handshake::{acceptance, check_inbound, frame_codec, refusal, MAX_HANDSHAKE_BYTES};
use super::registry::Delivery;
use super::stats::{add, inc};
use super::transport::Inner;
use super::wire;

pub(crate) async fn accept_loop(inner: Arc<Inner>, listener: TcpListener) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = shutdown.changed() => return,
            res = listener.accept() => match res {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let span = tracing::Span::current();
                    tokio::spawn(tracing::Instrument::instrument(handle_inbound(inner.clone(), stream, peer), span));
                }
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

async fn handle_inbound(inner: Arc<Inner>, stream: TcpStream, peer: SocketAddr) {
    let mut framed = Framed::new(stream, frame_codec(MAX_HANDSHAKE_BYTES));
    let mut shutdown = inner.shutdown.subscribe();
    let first = match tokio::time::timeout(inner.settings.handshake_timeout, framed.next()).await {
        Ok(Some(Ok(f))) => f,
        Ok(Some(Err(e))) => {
            inc(&inner.stats.malformed_frames);
            warn!(%peer, error = %e, "closing inbound connection: malformed first frame");
            return;
        }
        Ok(None) => return,
        Err(_) => {
            debug!(%peer, "closing inbound connection: no handshake within handshake-timeout");
            return;
        }
    };
    let hs = match wire::Handshake::decode(first.freeze()) {
        Ok(h) => h,
        Err(e) => {
            inc(&inner.stats.malformed_frames);
            warn!(%peer, error = %e, "closing inbound connection: malformed handshake");
            return;
        }
    };
    let (from, lane) = match check_inbound(&inner, &hs) {
        Ok(ok) => ok,
        Err((reason, quarantined)) => {
            inc(&inner.stats.handshakes_refused);
            warn!(%peer, %reason, "refused inbound connection");
            let _ = framed.send(refusal(reason, quarantined)).await;
            return;
        }
    };
    if framed.send(acceptance(&inner.self_address)).await.is_err() {
        return;
    }
    debug!(%from, %peer, lane = lane.as_str(), "inbound association established");
    // The handshake's codec may hold bytes that arrived with it: they are frames.
    let parts = framed.into_parts();
    let mut buf = parts.read_buf;
    let mut stream = parts.io;
    let limit = inner.settings.frame_limit(lane);
    let mut batches = Batches::default();
    loop {
        match complete_frames(&buf, limit) {
            Err(len) => {
                inc(&inner.stats.malformed_frames);
                warn!(%from, lane = lane.as_str(), len, limit, "closing inbound connection: frame larger than the lane's limit");
                return;
            }
            Ok((0, need)) => {
                buf.reserve(need.saturating_sub(buf.len()).max(MIN_READ_BUFFER_BYTES));
                let n = tokio::select! {
                    _ = shutdown.changed() => return,
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
                let mut fresh = BytesMut::with_capacity(need.max(size));
                fresh.extend_from_slice(&buf);
                buf = fresh;
                if !route_chunk(&inner, &from, lane, chunk, &mut batches).await {
                    return;
                }
            }
        }
    }
}

/// Largest read buffer, bytes (a read takes whatever the socket has, up to this).
const READ_BUFFER_BYTES: usize = 64 * 1024;

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
fn complete_frames(buf: &[u8], limit: usize) -> Result<(usize, usize), usize> {
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

/// The envelopes of one read, grouped by protocol (a node speaks a handful).
#[derive(Default)]
struct Batches {
    by_protocol: Vec<(ProtocolId, Vec<(u32, Bytes)>)>,
}

impl Batches {
    fn push(&mut self, protocol: ProtocolId, manifest: u32, payload: Bytes) {
        match self.by_protocol.iter_mut().find(|(p, _)| *p == protocol) {
            Some((_, v)) => v.push((manifest, payload)),
            None => self.by_protocol.push((protocol, vec![(manifest, payload)])),
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
        let env = match decode_envelope_at(&chunk, start, end) {
            Ok(env) => env,
            Err(e) => {
                inc(&inner.stats.malformed_frames);
                warn!(%from, lane = lane.as_str(), error = %e, "closing inbound connection: malformed envelope");
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
        batches.push(protocol, env.manifest, env.payload);
    }
    add(&stats.frames_in, frames);
    // What decoded before a malformed frame is still delivered.
    for (protocol, raw) in batches.by_protocol.drain(..) {
        let Some(routed) = inner.registry.deliver(protocol, from, raw) else {
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
            inc(&inner.stats.malformed_frames);
            warn!(%from, %protocol, manifest, error = %e, "closing inbound connection: malformed message");
            keep = false;
        }
        if let Delivery::Blocked(wait) = routed.delivery {
            // The protocol's queue is full: this connection waits (backpressure).
            wait.await;
        }
    }
    keep
}
