//! Outbound associations: one task and one TCP connection per (peer, lane), each with its
//! own bounded queue, so bulk traffic on the ordinary or large lane never delays a
//! heartbeat on the control lane (Akka Artery's control / ordinary / large streams).
//!
//! The task connects on the first message (with exponential backoff on failure, dropping
//! what was queued for an unreachable peer), runs the handshake, then writes: it takes
//! every message already queued, up to `write-batch-bytes`, into one buffer and writes it
//! with one call, so a busy lane costs few system calls. Order is kept per (sender,
//! receiver, lane). Delivery is at most once: frames in a write that fails are lost, as in
//! Akka. An association with nothing to send for `idle-timeout` closes.

use std::sync::Arc;

use bytes::BytesMut;
use concord_core::{Address, Lane, UniqueAddress};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn};

use super::envelope::Outbound;
use super::handshake::{connect, ConnectError};
use super::stats::{add, inc};
use super::transport::{Inner, TransportEvent};

pub(crate) async fn run_association(
    inner: Arc<Inner>,
    to: Address,
    lane: Lane,
    tx: mpsc::Sender<Outbound>,
    mut rx: mpsc::Receiver<Outbound>,
) {
    let mut backoff = inner.settings.connect_backoff_min;
    let mut shutdown = inner.shutdown.subscribe();
    let mut logged_failure = false;
    loop {
        let first = tokio::select! {
            _ = shutdown.changed() => return,
            r = tokio::time::timeout(inner.settings.idle_timeout, rx.recv()) => match r {
                Ok(Some(o)) => o,
                _ => {
                    inner.remove_association(&to, lane, &tx);
                    return;
                }
            }
        };
        match connect(&inner, &to, lane).await {
            Ok((stream, peer)) => {
                backoff = inner.settings.connect_backoff_min;
                if logged_failure {
                    info!(%to, lane = lane.as_str(), "association re-established");
                    logged_failure = false;
                }
                debug!(%peer, lane = lane.as_str(), "outbound association established");
                write_loop(&inner, stream, &peer, lane, first, &mut rx, &mut shutdown).await;
                if *shutdown.borrow() {
                    return;
                }
            }
            Err(e) => {
                match e {
                    ConnectError::Refused(reason) => {
                        inc(&inner.stats.handshakes_refused);
                        warn!(%to, %reason, "handshake refused by peer");
                    }
                    ConnectError::Quarantined(reason) => {
                        inc(&inner.stats.handshakes_refused);
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
                inner.stats.dropped(lane, dropped);
                tokio::select! {
                    _ = shutdown.changed() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(inner.settings.connect_backoff_max);
            }
        }
    }
}

/// Writes batches of frames until the connection fails or closes.
async fn write_loop(
    inner: &Inner,
    stream: TcpStream,
    peer: &UniqueAddress,
    lane: Lane,
    first: Outbound,
    rx: &mut mpsc::Receiver<Outbound>,
    shutdown: &mut watch::Receiver<bool>,
) {
    let (mut read_half, mut write_half) = stream.into_split();
    let limit = inner.settings.frame_limit(lane);
    let batch_bytes = inner.settings.write_batch_bytes.max(1);
    let stats = inner.stats.lane(lane);
    let mut buf = BytesMut::with_capacity(batch_bytes + 1024);
    let mut probe = [0u8; 1];
    let mut next = Some(first);
    loop {
        let o = match next.take() {
            Some(o) => o,
            None => tokio::select! {
                biased;
                _ = shutdown.changed() => return,
                // The accepting side never writes after the handshake: anything here means
                // the connection closed (or the peer misbehaves).
                _ = read_half.read(&mut probe) => return,
                r = rx.recv() => match r {
                    Some(o) => o,
                    None => return,
                },
            },
        };
        buf.clear();
        let mut frames = 0u64;
        let mut dropped = 0u64;
        let mut add_frame = |o: Outbound, buf: &mut BytesMut| {
            if o.to_uid.is_some_and(|u| u != peer.uid) {
                // Meant for another incarnation at this address.
                dropped += 1;
                return;
            }
            if o.frame_body_len() > limit {
                dropped += 1;
                if let Some(suppressed) = inner.log.allow("frame-limit") {
                    warn!(to = %peer, lane = lane.as_str(), protocol = %o.protocol, size = o.payload.len(), suppressed, "dropping message larger than the lane's frame limit");
                }
                return;
            }
            o.write_frame(buf);
            frames += 1;
        };
        add_frame(o, &mut buf);
        while buf.len() < batch_bytes {
            match rx.try_recv() {
                Ok(o) => add_frame(o, &mut buf),
                Err(_) => break,
            }
        }
        if dropped > 0 {
            inner.stats.dropped(lane, dropped);
        }
        if buf.is_empty() {
            continue;
        }
        if inner.is_quarantined(peer) {
            inner.stats.dropped(lane, frames);
            return;
        }
        if let Err(e) = write_half.write_all(&buf).await {
            debug!(to = %peer, lane = lane.as_str(), error = %e, "write failed; reconnecting");
            inner.stats.dropped(lane, frames);
            return;
        }
        add(&stats.frames_out, frames);
        add(&stats.bytes_out, buf.len() as u64);
        inc(&stats.writes);
    }
}
