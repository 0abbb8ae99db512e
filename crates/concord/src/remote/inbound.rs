//! Inbound connections: the accept loop, the handshake, and the reader that routes each
//! envelope to its protocol's queue by protocol id.
//!
//! A reader decodes every frame its last read brought in before it waits again. Envelopes
//! of an unknown protocol or manifest, or for another incarnation, are counted and dropped
//! (rate-limited log line) and the connection stays open. A malformed frame, envelope or
//! payload closes that one connection and is counted; nothing from the network can panic
//! the node. A protocol whose queue is full slows its connection down (backpressure).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use concord_core::{Lane, ProtocolId, UniqueAddress};
use futures_util::{SinkExt, StreamExt};
use prost::Message;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;
use tracing::{debug, warn};

use super::envelope::{decode_envelope, FRAME_HEADER_BYTES};
use super::handshake::{acceptance, check_inbound, frame_codec, refusal, MAX_HANDSHAKE_BYTES};
use super::registry::{DecodeError, Delivery};
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
    framed
        .codec_mut()
        .set_max_frame_length(inner.settings.frame_limit(lane));
    debug!(%from, %peer, lane = lane.as_str(), "inbound association established");
    loop {
        let frame = tokio::select! {
            _ = shutdown.changed() => return,
            f = framed.next() => f,
        };
        let frame = match frame {
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                inc(&inner.stats.malformed_frames);
                warn!(%from, lane = lane.as_str(), error = %e, "closing inbound connection: bad frame");
                return;
            }
            None => return,
        };
        let stats = inner.stats.lane(lane);
        inc(&stats.frames_in);
        add(&stats.bytes_in, (frame.len() + FRAME_HEADER_BYTES) as u64);
        if !route_frame(&inner, &from, lane, frame.freeze()).await {
            return;
        }
    }
}

/// Routes one frame; false if the connection must close.
async fn route_frame(inner: &Inner, from: &UniqueAddress, lane: Lane, frame: Bytes) -> bool {
    if inner.is_quarantined(from) {
        debug!(%from, "closing inbound connection from a quarantined incarnation");
        return false;
    }
    if inner
        .faults
        .get(&from.address)
        .is_some_and(|f| f.blackhole_inbound)
    {
        return true;
    }
    let env = match decode_envelope(frame) {
        Ok(env) => env,
        Err(e) => {
            inc(&inner.stats.malformed_frames);
            warn!(%from, lane = lane.as_str(), error = %e, "closing inbound connection: malformed envelope");
            return false;
        }
    };
    if env.recipient_uid != 0 && env.recipient_uid != inner.self_address.uid {
        inc(&inner.stats.wrong_incarnation);
        return true;
    }
    let protocol = ProtocolId(env.protocol);
    let bytes = env.payload.len() as u64;
    let delivery = match inner
        .registry
        .deliver(protocol, from, env.manifest, env.payload)
    {
        Some(d) => d,
        None => {
            inc(&inner.stats.unknown_protocol);
            if let Some(suppressed) = inner.log.allow("unknown-protocol") {
                warn!(%from, protocol = env.protocol, manifest = env.manifest, suppressed, "dropping a message of a protocol this node does not run");
            }
            return true;
        }
    };
    let pstats = inner.stats.protocol(protocol);
    match delivery {
        Delivery::Delivered => {}
        Delivery::Blocked(wait) => {
            if !wait.await {
                return true;
            }
        }
        Delivery::Closed => return true,
        Delivery::Undecodable(DecodeError::UnknownManifest(m)) => {
            if let Some(p) = pstats {
                inc(&p.unknown_messages);
            }
            if let Some(suppressed) = inner.log.allow(&format!("unknown-manifest-{protocol}")) {
                warn!(%from, %protocol, manifest = m, suppressed, "dropping a message type this build does not know");
            }
            return true;
        }
        Delivery::Undecodable(e) => {
            inc(&inner.stats.malformed_frames);
            warn!(%from, %protocol, manifest = env.manifest, error = %e, "closing inbound connection: malformed message");
            return false;
        }
    }
    if let Some(p) = pstats {
        inc(&p.messages_in);
        add(&p.bytes_in, bytes);
    }
    true
}
