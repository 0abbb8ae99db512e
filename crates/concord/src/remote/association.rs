//! Outbound associations: one writer task and one TCP connection per (peer, lane), each
//! with its own bounded queue ([`LaneQueue`]), so bulk traffic on the ordinary or large
//! lane never delays a heartbeat on the control lane (Akka Artery's control / ordinary /
//! large streams).
//!
//! The writer connects when the first frame is queued (with exponential backoff on
//! failure, dropping what was queued for an unreachable peer), runs the handshake, then
//! takes everything queued at once and writes it with one call, so a busy lane costs few
//! system calls. A lane whose peer cannot be reached and that has nothing more to send
//! after the back-off is retired. Order is kept per (sender, receiver, lane). Delivery is at most once:
//! frames in a write that fails are lost, as in Akka. A lane with nothing to send for
//! `idle-timeout` closes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use concord_core::{Address, Lane, UniqueAddress};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tracing::{debug, info, warn};

use super::handshake::{connect, ConnectError};
use super::outbound_lane::LaneQueue;
use super::stats::{add, inc};
use super::stream::Stream;
use super::transport_state::{Inner, TransportEvent};

struct Connection {
    read: ReadHalf<Stream>,
    write: WriteHalf<Stream>,
    /// The peer; its uid is 0 when the peer did not reveal it (no authentication).
    peer: UniqueAddress,
    tls: bool,
}

pub(crate) async fn run_lane_writer(
    inner: Arc<Inner>,
    to: Address,
    lane: Lane,
    queue: Arc<LaneQueue>,
) {
    let mut backoff = inner.settings.connect_backoff_min;
    let mut shutdown = inner.shutdown.subscribe();
    let mut logged_failure = false;
    let mut conn: Option<Connection> = None;
    let mut out = BytesMut::with_capacity(inner.settings.lane_buffer_bytes);
    let mut probe = [0u8; 1];
    // Frames of the previous write (coalescing starts once a stream is under way).
    let mut last_write_frames: u64 = 0;
    let stats = inner.stats.lane(lane);
    loop {
        if *shutdown.borrow() {
            queue.close();
            return;
        }
        if queue.is_empty() {
            let peer_closed = async {
                match conn.as_mut() {
                    // The accepting side never writes after the handshake: anything here
                    // means the connection closed (or the peer misbehaves).
                    Some(c) => {
                        let _ = c.read.read(&mut probe).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = shutdown.changed() => {
                    queue.close();
                    return;
                }
                _ = queue.wait_for_data() => {}
                _ = peer_closed => {
                    debug!(%to, lane = lane.as_str(), "connection closed by the peer");
                    conn = None;
                    continue;
                }
                _ = tokio::time::sleep(inner.settings.idle_timeout) => {
                    conn = None;
                    if inner.retire_lane(&to, lane, &queue) {
                        return;
                    }
                    continue;
                }
            }
            if queue.is_closed() {
                return;
            }
        }
        if conn.is_none() {
            match connect(&inner, &to, lane).await {
                Ok((stream, peer)) => {
                    backoff = inner.settings.connect_backoff_min;
                    if logged_failure {
                        info!(%to, lane = lane.as_str(), "association re-established");
                        logged_failure = false;
                    }
                    debug!(%peer, lane = lane.as_str(), "outbound association established");
                    let tls = stream.is_tls();
                    let (read, write) = tokio::io::split(stream);
                    conn = Some(Connection {
                        read,
                        write,
                        peer,
                        tls,
                    });
                }
                Err(e) => {
                    log_connect_error(&inner, &to, e, logged_failure);
                    logged_failure = true;
                    // The peer is not reachable: what was queued for it is stale.
                    inner.stats.dropped(lane, queue.clear());
                    tokio::select! {
                        _ = shutdown.changed() => {
                            queue.close();
                            return;
                        }
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(inner.settings.connect_backoff_max);
                    // Nothing new to send after the back-off: the lane is retired (its task
                    // and queue freed; the next message starts a new one), so messages to
                    // addresses nobody listens on hold no state for `idle-timeout`.
                    if queue.is_empty() && inner.retire_lane(&to, lane, &queue) {
                        return;
                    }
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        if lane != Lane::Control && last_write_frames >= COALESCE_AFTER_FRAMES {
            coalesce(&queue, inner.settings.lane_buffer_bytes).await;
        }
        let Some(taken) = queue.take(&mut out) else {
            continue;
        };
        if c.peer.uid != 0 && inner.is_quarantined(&c.peer) {
            inner.stats.dropped(lane, taken.frames);
            conn = None;
            continue;
        }
        let written = match c.write.write_all(&out).await {
            // TLS buffers records: flush them out with the batch.
            Ok(()) if c.tls => c.write.flush().await,
            other => other,
        };
        if let Err(e) = written {
            debug!(to = %c.peer, lane = lane.as_str(), error = %e, "write failed; reconnecting");
            inner.stats.dropped(lane, taken.frames);
            conn = None;
            continue;
        }
        last_write_frames = taken.frames;
        add(&stats.frames_out, taken.frames);
        add(&stats.bytes_out, out.len() as u64);
        inc(&stats.writes);
    }
}

/// Most times a lane writer lets the senders run before it writes.
const MAX_COALESCE_YIELDS: usize = 16;

/// Longest a lane writer coalesces before it writes.
const MAX_COALESCE_WAIT: Duration = Duration::from_micros(50);

/// Frames the previous write must have carried for the writer to coalesce the next one: a
/// stream is under way. A message after a quiet spell (a request, a reply, a heartbeat of
/// another lane) is written at once.
const COALESCE_AFTER_FRAMES: u64 = 16;

/// Coalescing writes: while a stream is under way (the previous write carried at least
/// [`COALESCE_AFTER_FRAMES`]), the writer of an ordinary or large lane, woken for a small
/// batch, lets the senders run (yields) while the queue keeps growing, holds less than
/// `below_bytes` and less than half its frame limit, at most [`MAX_COALESCE_YIELDS`] times
/// and [`MAX_COALESCE_WAIT`] in all, so the stream goes out in fewer, larger writes (the
/// kernel's cost is per write more than per byte; Akka Artery batches its outbound stream
/// too). A queue that stops growing is written after that one yield (tokio runs the
/// worker's other ready tasks and polls its I/O driver first). The control lane does not
/// coalesce.
async fn coalesce(queue: &LaneQueue, below_bytes: usize) {
    let started = Instant::now();
    let half_frames = queue.queue_size() / 2;
    let (mut frames, mut bytes) = queue.queued();
    for _ in 0..MAX_COALESCE_YIELDS {
        if bytes >= below_bytes || frames >= half_frames || started.elapsed() >= MAX_COALESCE_WAIT {
            return;
        }
        tokio::task::yield_now().await;
        let (f, b) = queue.queued();
        if b == bytes {
            return;
        }
        (frames, bytes) = (f, b);
    }
}

fn log_connect_error(inner: &Inner, to: &Address, e: ConnectError, already_failing: bool) {
    match e {
        ConnectError::Refused(reason) => {
            inc(&inner.stats.handshakes_refused);
            if let Some(suppressed) = inner.log.allow(&format!("connect-{to}")) {
                warn!(%to, %reason, suppressed, "handshake refused by peer");
            }
        }
        ConnectError::Quarantined(reason) => {
            inc(&inner.stats.handshakes_refused);
            warn!(%to, %reason, "handshake refused by peer: this incarnation is quarantined");
            let _ = inner.events.send(TransportEvent::QuarantinedBy(to.clone()));
        }
        ConnectError::Protocol(reason) => {
            if let Some(suppressed) = inner.log.allow(&format!("connect-{to}")) {
                warn!(%to, %reason, suppressed, "handshake failed");
            }
        }
        ConnectError::Authentication(reason) => {
            inc(&inner.stats.outbound_authentication_failures);
            if let Some(suppressed) = inner.log.allow(&format!("connect-{to}")) {
                warn!(%to, %reason, suppressed, "peer failed authentication; not connecting");
            }
        }
        ConnectError::Io(err) => {
            if !already_failing {
                debug!(%to, error = %err, "cannot connect; will retry with backoff");
            }
        }
    }
}
