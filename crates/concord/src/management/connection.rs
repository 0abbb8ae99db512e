//! The accept loop and the connections of the node's HTTP servers (management and
//! key-value APIs, plain HTTP or HTTPS): hyper's HTTP/1.1 server with its header-read
//! timeout, plus what hyper lacks, from tokio:
//!
//! - admission through a [`ConnectionGate`] (server and source caps, the local reserve); a
//!   refused connection is closed at once — over plain HTTP after a `503` written without
//!   waiting;
//! - an idle timeout: a connection on which no byte moves in either direction for
//!   `idle-timeout` is closed, whatever it is doing (an idle kept-alive connection, a
//!   request body that stopped, a client that stopped reading);
//! - the TLS handshake within `header-read-timeout`;
//! - requests carrying `Transfer-Encoding` answered `400` and the connection closed. hyper
//!   frames a request with both `Transfer-Encoding: chunked` and `Content-Length` by the
//!   former and drops the latter before the service sees it (RFC 9112 §6.3), so such a
//!   request cannot be told from a plain chunked one; both are refused (RFC 9112 §6.1
//!   allows refusing the first; request-smuggling risk, §11.2). Every client of these APIs
//!   sends `Content-Length` (the body limits are checked against it before the body is
//!   read).
//!
//! hyper's header-read timeout starts again when a response is finished, so an idle
//! kept-alive connection is closed after the shorter of the two timeouts.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, Instrument};

use super::access::VerifiedClientCertificate;
use super::limits::{ConnectionGate, Place};
use super::message::message;
use crate::tls::TlsContext;

/// Largest request head (request line and headers), bytes; larger answers 431.
const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Largest read or write buffer of one connection, bytes (hyper's default is ~400 KiB):
/// bounds what a connection can make the node hold.
const MAX_BUFFER_BYTES: usize = 64 * 1024;

/// First delay after a failed accept (e.g. out of descriptors), doubled up to
/// [`ACCEPT_BACKOFF_MAX`] while accepts keep failing.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(10);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The answer to a connection over a cap (plain HTTP), written without waiting.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\n\
content-length: 37\r\nconnection: close\r\nretry-after: 1\r\n\r\ntoo many connections; try again later";

/// Accepts connections on `listener` until `stop` turns true, admitting each through
/// `gate` and serving `app` on it (over TLS when `tls` is set); then stops accepting and
/// lets each open connection finish its request.
pub(crate) async fn serve_connections(
    listener: TcpListener,
    tls: Option<Arc<TlsContext>>,
    app: Router,
    gate: Arc<ConnectionGate>,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = ACCEPT_BACKOFF_MIN;
    loop {
        let (tcp, peer) = tokio::select! {
            _ = stop.changed() => return,
            r = listener.accept() => match r {
                Ok(c) => { backoff = ACCEPT_BACKOFF_MIN; c }
                Err(e) => {
                    gate.accept_failed(&e, backoff);
                    tokio::select! {
                        _ = stop.changed() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    continue;
                }
            },
        };
        let Ok(place) = gate.admit(peer) else {
            if tls.is_none() {
                let _ = tcp.try_write(REFUSED);
            }
            continue;
        };
        let conn = Connection {
            peer,
            gate: gate.clone(),
            _place: place,
        };
        tokio::spawn(
            conn.serve(tcp, tls.clone(), app.clone(), stop.clone())
                .instrument(tracing::Span::current()),
        );
    }
}

/// One admitted connection; its place is released when it ends.
struct Connection {
    peer: std::net::SocketAddr,
    gate: Arc<ConnectionGate>,
    _place: Place,
}

impl Connection {
    async fn serve(
        self,
        tcp: TcpStream,
        tls: Option<Arc<TlsContext>>,
        app: Router,
        stop: watch::Receiver<bool>,
    ) {
        let limits = self.gate.limits().clone();
        let activity = Arc::new(Activity::default());
        let tcp = Tracked {
            inner: tcp,
            activity: activity.clone(),
        };
        match tls {
            None => self.serve_http(tcp, false, app, activity, stop).await,
            Some(tls) => {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
                let handshake = acceptor.accept(tcp);
                let stream = match tokio::time::timeout(limits.header_read_timeout, handshake).await
                {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        debug!(peer = %self.peer, error = %e, "HTTPS: TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        self.gate.timed_out("tls-handshake", self.peer);
                        return;
                    }
                };
                let verified = stream.get_ref().1.peer_certificates().is_some();
                self.serve_http(stream, verified, app, activity, stop).await;
            }
        }
    }

    /// Serves HTTP/1.1 on `io` until the client closes, a timeout closes it, or `stop`
    /// turns true (then the request in progress finishes). `verified`: the client presented
    /// a certificate of the trusted authorities.
    async fn serve_http<I>(
        &self,
        io: I,
        verified: bool,
        app: Router,
        activity: Arc<Activity>,
        mut stop: watch::Receiver<bool>,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limits = self.gate.limits();
        let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
            if verified {
                req.extensions_mut().insert(VerifiedClientCertificate);
            }
            let app = app.clone();
            async move {
                if req.headers().contains_key(header::TRANSFER_ENCODING) {
                    return Ok(transfer_encoding_refused());
                }
                tower::ServiceExt::oneshot(app, req).await
            }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .max_header_size(MAX_HEADER_BYTES)
            .max_buf_size(MAX_BUFFER_BYTES)
            .serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        let mut stopping = false;
        loop {
            let idle_until = activity.last() + limits.idle_timeout;
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        if e.is_timeout() {
                            self.gate.timed_out("header", self.peer);
                        } else {
                            debug!(peer = %self.peer, error = %e, "HTTP connection ended with an error");
                        }
                    }
                    return;
                }
                _ = tokio::time::sleep_until(idle_until) => {
                    if activity.last() + limits.idle_timeout <= Instant::now() {
                        // Dropping the connection closes the socket.
                        self.gate.timed_out("idle", self.peer);
                        return;
                    }
                }
                _ = stop.changed(), if !stopping => {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// `400` for a request with `Transfer-Encoding`; the connection is closed after it.
fn transfer_encoding_refused() -> Response {
    let mut r = message(
        StatusCode::BAD_REQUEST,
        "Transfer-Encoding is not accepted: send the body with Content-Length (a request with \
         both Transfer-Encoding and Content-Length could smuggle a second request, RFC 9112 \
         section 6.1)",
    );
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// When a byte last moved on a connection.
#[derive(Debug)]
struct Activity {
    since: Instant,
    /// Milliseconds from `since` to the last read or write of at least one byte.
    last_ms: std::sync::atomic::AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            since: Instant::now(),
            last_ms: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl Activity {
    fn touch(&self) {
        let ms = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.since + Duration::from_millis(self.last_ms.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// A stream that records in [`Activity`] when bytes move.
struct Tracked<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_refusal_is_a_whole_response() {
        let text = std::str::from_utf8(super::REFUSED).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "));
        assert!(head.contains(&format!("content-length: {}\r\n", body.len())));
    }
}
