//! Serving the management API (and the key-value API, which shares its machinery): bind,
//! HTTP or HTTPS, graceful stop when the node terminates.

use std::net::SocketAddr;

use axum::Router;
use tracing::{info, Instrument};

use super::access::ManagementAccess;
use super::connection;
use super::limits::{ConnectionGate, HttpLimits};
use super::router::router;
use super::state::ManagementState;
use crate::cluster::Cluster;

/// The management API could not be served.
#[derive(Debug, thiserror::Error)]
#[error("cannot bind management HTTP to {addr}: {source}")]
pub struct ManagementError {
    /// What we tried to bind.
    pub addr: String,
    /// Why.
    pub source: std::io::Error,
}

/// Serves `app` on `listener` until the node terminates — over HTTPS when `tls` is set
/// (its files re-read when they change) — within `limits` (lowered to this process's
/// share of file descriptors, see [`super::limits`]); then lets each open connection
/// finish its request. `name` names the API in logs and metrics (`server` label).
pub(crate) fn serve_app(
    listener: tokio::net::TcpListener,
    tls: Option<std::sync::Arc<crate::tls::TlsContext>>,
    app: Router,
    cluster: Cluster,
    name: &'static str,
    limits: HttpLimits,
) {
    let span = tracing::Span::current();
    if let Some(tls) = &tls {
        tls.spawn_reloader(crate::tls::RELOAD_INTERVAL, name);
    }
    let l = &limits;
    info!(
        server = name,
        max_connections = l.max_connections,
        max_connections_per_source = l.max_connections_per_source,
        header_read_timeout = ?l.header_read_timeout,
        idle_timeout = ?l.idle_timeout,
        "HTTP connection limits"
    );
    let gate = ConnectionGate::new(limits, name, cluster.self_address().to_string());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(
        async move {
            cluster.terminated().await;
            let _ = stop_tx.send(true);
        }
        .instrument(span.clone()),
    );
    tokio::spawn(connection::serve_connections(listener, tls, app, gate, stop_rx).instrument(span));
}

/// Binds `management.hostname:port` and serves the API (with the layers' `extra` routes)
/// until the node terminates — over HTTPS when `[management.tls]` is set (the certificate
/// files are re-read when they change). `advertised_host` is the node's
/// `remote.hostname` (a name writes may be addressed to). Returns the bound address.
///
/// # Errors
/// The port cannot be bound, or the TLS files cannot be used.
pub async fn serve(
    state: ManagementState,
    config: &crate::config::ManagementConfig,
    advertised_host: &str,
    extra: Vec<Router>,
) -> Result<SocketAddr, ManagementError> {
    let (host, port) = (config.hostname.as_str(), config.port);
    let bind = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let tls = config
        .tls
        .as_ref()
        .map(crate::tls::TlsContext::for_management)
        .transpose()
        .map_err(|e| ManagementError {
            addr: bind.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
        })?;
    let listener = tokio::net::TcpListener::bind(&bind)
        .await
        .map_err(|source| ManagementError {
            addr: bind.clone(),
            source,
        })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ManagementError { addr: bind, source })?;
    let access = ManagementAccess::from_config(config, Some(addr), advertised_host);
    if access.read_only {
        info!("management API is read-only: write routes answer 403 (management.read-only)");
    }
    let cluster = state.cluster.clone();
    let limits = HttpLimits::for_management(config).fitted(state.transport.inbound_connections().1);
    let app = router(state, access, extra);
    serve_app(listener, tls, app, cluster, "management", limits);
    info!(%addr, https = config.tls.is_some(), "management HTTP API listening");
    Ok(addr)
}
