//! Serving the management API over HTTPS (`[management.tls]`): rustls in front of hyper's
//! HTTP/1.1 server, one task per connection. A connection whose client presented a
//! certificate of the trusted authorities gets [`VerifiedClientCertificate`] on each of
//! its requests (write routes accept it in place of the bearer token).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, warn};

use super::access::VerifiedClientCertificate;
use crate::tls::TlsContext;

/// Time a client has for the TLS handshake and then for each request's headers.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 1024;

/// Accepts connections on `listener` until `stop` turns true; then stops accepting and
/// lets each open connection finish its request.
pub(crate) async fn serve_https(
    listener: TcpListener,
    tls: Arc<TlsContext>,
    app: Router,
    mut stop: watch::Receiver<bool>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = Duration::from_millis(10);
    loop {
        let permit = tokio::select! {
            _ = stop.changed() => return,
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => return },
        };
        let (tcp, peer) = tokio::select! {
            _ = stop.changed() => return,
            r = listener.accept() => match r {
                Ok(c) => { backoff = Duration::from_millis(10); c }
                Err(e) => {
                    warn!(error = %e, "management API: accept failed; backing off");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                    continue;
                }
            },
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.server_config());
        let app = app.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    debug!(%peer, error = %e, "management API: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let verified = stream.get_ref().1.peer_certificates().is_some();
            let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                if verified {
                    req.extensions_mut().insert(VerifiedClientCertificate);
                }
                tower::ServiceExt::oneshot(app.clone(), req)
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
}
