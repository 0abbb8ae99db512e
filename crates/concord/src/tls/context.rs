//! [`TlsContext`]: PEM files → rustls configurations, reloaded when the files change.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, SystemTime};

use rustls::client::danger::ServerCertVerifier;
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedProtocolVersion};
use tracing::{info, warn};

use super::crypto_provider::provider;
use super::role::check_node_certificate;
use super::verifier::{AnyNameServerVerifier, NodeClientVerifier, NodeServerVerifier};
use crate::config::{ConfigError, RemoteConfig, TlsConfig};

/// A TLS file could not be read or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", path.as_ref().map(|p| format!("{}: ", p.display())).unwrap_or_default())]
pub struct TlsError {
    /// The file, when the problem is one file.
    pub path: Option<PathBuf>,
    /// What is wrong.
    pub message: String,
}

impl TlsError {
    fn file(path: &Path, message: impl Into<String>) -> Self {
        TlsError {
            path: Some(path.to_path_buf()),
            message: message.into(),
        }
    }

    fn other(message: impl std::fmt::Display) -> Self {
        TlsError {
            path: None,
            message: message.to_string(),
        }
    }
}

/// Whether the accepting side requires a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Every client presents a certificate of a trusted authority (remoting).
    Required,
    /// A client may present one (management: it then authorises the write routes).
    Optional,
}

/// What a TLS context is for: it decides the defaults and the checks of the peer's
/// certificate beyond the trusted authorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Remoting: TLS 1.3, a client certificate required, both ends node certificates
    /// ([`super::role`]), `verify-peer-hostname` on unless set off.
    Remoting,
    /// The management API: TLS 1.2 and 1.3, a client certificate optional (any of the CA:
    /// client certificates are what it is for), `verify-peer-hostname` off unless set on (it
    /// applies to Cluster Bootstrap's probes only).
    Management,
}

impl Purpose {
    fn client_auth(self) -> ClientAuth {
        match self {
            Purpose::Remoting => ClientAuth::Required,
            Purpose::Management => ClientAuth::Optional,
        }
    }

    fn versions(self) -> &'static [&'static SupportedProtocolVersion] {
        match self {
            Purpose::Remoting => TLS13_ONLY,
            Purpose::Management => TLS12_AND_13,
        }
    }

    fn verify_peer_hostname(self, config: &TlsConfig) -> bool {
        config
            .verify_peer_hostname
            .unwrap_or(self == Purpose::Remoting)
    }
}

/// Counters of certificate reloads.
#[derive(Debug, Default)]
pub struct TlsReloadStats {
    /// Times changed files were loaded and took effect.
    pub reloads: AtomicU64,
    /// Times changed files could not be loaded (the previous certificates stay in use).
    pub failures: AtomicU64,
}

/// The modification time and length of each file: a change of either means "reload".
type Stamp = Vec<Option<(SystemTime, u64)>>;

struct Loaded {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    /// The leaf of this node's chain.
    own: Option<CertificateDer<'static>>,
    stamp: Stamp,
}

/// A node's TLS identity and trust, as rustls configurations for both directions.
pub struct TlsContext {
    config: TlsConfig,
    purpose: Purpose,
    loaded: RwLock<Loaded>,
    /// Reload counters.
    pub stats: TlsReloadStats,
}

impl std::fmt::Debug for TlsContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsContext")
            .field("certificate", &self.config.certificate)
            .field("ca_certificates", &self.config.ca_certificates)
            .field("verify_peer_hostname", &self.verify_peer_hostname())
            .finish()
    }
}

/// TLS 1.3 only (remoting).
pub(crate) static TLS13_ONLY: &[&SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// TLS 1.2 and 1.3 (management, for HTTP clients that lack 1.3).
pub(crate) static TLS12_AND_13: &[&SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

impl TlsContext {
    /// Loads the files of `config` for remoting: TLS 1.3, client certificates required, and
    /// on both sides only node certificates ([`super::role`]): a peer presenting another
    /// certificate of the CA (a client certificate) is refused whether it dials or is dialled.
    /// `verify-peer-hostname` is on unless set off.
    ///
    /// # Errors
    /// A file that cannot be read, holds no certificate or key, a key that does not match
    /// the certificate, or a certificate that is not a node certificate (peers would refuse
    /// it).
    pub fn for_remoting(config: &TlsConfig) -> Result<Arc<TlsContext>, TlsError> {
        Self::load(config, Purpose::Remoting)
    }

    /// Loads the files of `config` for the management API: TLS 1.2 or 1.3, client
    /// certificates optional (any certificate of the CA). `verify-peer-hostname` is off
    /// unless set on.
    ///
    /// # Errors
    /// A file that cannot be read, holds no certificate or key, or a key that does not
    /// match the certificate.
    pub fn for_management(config: &TlsConfig) -> Result<Arc<TlsContext>, TlsError> {
        Self::load(config, Purpose::Management)
    }

    fn load(config: &TlsConfig, purpose: Purpose) -> Result<Arc<TlsContext>, TlsError> {
        let loaded = build(config, purpose)?;
        Ok(Arc::new(TlsContext {
            config: config.clone(),
            purpose,
            loaded: RwLock::new(loaded),
            stats: TlsReloadStats::default(),
        }))
    }

    /// The configuration for connections this node accepts.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.read().server.clone()
    }

    /// The configuration for connections this node opens (it presents its certificate).
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.read().client.clone()
    }

    /// `verify-peer-hostname` as in effect: the configured value, or the default of this
    /// context's purpose (remoting: on; management: off).
    pub fn verify_peer_hostname(&self) -> bool {
        self.purpose.verify_peer_hostname(&self.config)
    }

    /// This node's own certificate (the leaf of the chain in use).
    pub fn own_certificate(&self) -> Option<CertificateDer<'static>> {
        self.read().own.clone()
    }

    /// The settings the context was loaded from.
    pub fn config(&self) -> &TlsConfig {
        &self.config
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.loaded.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Loads the files again if any changed since they were loaded: `Ok(true)` if new
    /// certificates took effect, `Ok(false)` if nothing changed.
    ///
    /// # Errors
    /// The changed files cannot be used (e.g. a key written before its certificate during a
    /// rotation): the previous configuration stays in effect and a later call tries again.
    pub fn reload_if_changed(&self) -> Result<bool, TlsError> {
        let now = stamp(&self.config);
        if now == self.read().stamp {
            return Ok(false);
        }
        match build(&self.config, self.purpose) {
            Ok(loaded) => {
                *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = loaded;
                self.stats.reloads.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Err(e) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Checks the files every `interval` and reloads them when they change, for as long as
    /// the context is in use (the task ends when the last handle is dropped).
    pub fn spawn_reloader(self: &Arc<Self>, interval: Duration, what: &'static str) {
        let weak: Weak<TlsContext> = Arc::downgrade(self);
        let span = tracing::Span::current();
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let mut failing = false;
                loop {
                    tokio::time::sleep(interval).await;
                    let Some(ctx) = weak.upgrade() else { return };
                    match ctx.reload_if_changed() {
                        Ok(true) => {
                            failing = false;
                            info!(tls = what, certificate = %ctx.config.certificate.display(), "TLS certificates reloaded");
                        }
                        Ok(false) => {}
                        Err(e) => {
                            if !failing {
                                warn!(tls = what, error = %e, "TLS files changed but cannot be loaded; the previous certificates stay in use");
                            }
                            failing = true;
                        }
                    }
                }
            },
            span,
        ));
    }
}

/// Checks that `certificate` (a peer's leaf certificate, already verified against the
/// trusted authorities) names `host` — a DNS name or an IP address — as a subject
/// alternative name.
///
/// # Errors
/// A description of the mismatch.
pub(crate) fn certificate_names_host(
    certificate: &CertificateDer<'_>,
    host: &str,
) -> Result<(), String> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| format!("`{host}` is not a valid host name: {e}"))?;
    let parsed = ParsedCertificate::try_from(certificate)
        .map_err(|e| format!("unreadable peer certificate: {e}"))?;
    rustls::client::verify_server_name(&parsed, &name)
        .map_err(|e| format!("the peer's certificate does not name `{host}`: {e}"))
}

fn stamp(config: &TlsConfig) -> Stamp {
    [
        &config.certificate,
        &config.private_key,
        &config.ca_certificates,
    ]
    .iter()
    .map(|p| {
        std::fs::metadata(p)
            .ok()
            .and_then(|m| Some((m.modified().ok()?, m.len())))
    })
    .collect()
}

/// Reads a PEM certificate chain.
pub(crate) fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::file(path, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(path, e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsError::file(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

/// Reads a PEM private key.
pub(crate) fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::file(path, e.to_string()))
}

/// A root store of the certificates in `path`.
pub(crate) fn read_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for c in read_certificates(path)? {
        roots
            .add(c)
            .map_err(|e| TlsError::file(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(Arc::new(roots))
}

/// A client configuration for a node's HTTPS management API (what `concord`'s management
/// and key-value clients use): trusts the authorities in `ca_certificates` (a PEM file, e.g.
/// `certs/ca.crt`), presents `identity` if given (certificate and key PEM files, e.g.
/// `certs/client.root.crt` and `certs/client.root.key`), checks that the server's
/// certificate names the host only if `verify_hostname`; TLS 1.2 and 1.3.
///
/// # Errors
/// A file that cannot be read, or holds no usable certificate or key.
pub fn management_client_config(
    ca_certificates: &Path,
    identity: Option<(&Path, &Path)>,
    verify_hostname: bool,
) -> Result<ClientConfig, TlsError> {
    let roots = read_roots(ca_certificates)?;
    let identity = match identity {
        Some((cert, key)) => Some((read_certificates(cert)?, read_private_key(key)?)),
        None => None,
    };
    client_config(roots, identity, verify_hostname, TLS12_AND_13)
}

/// A client configuration trusting `roots`, presenting `identity` if given, checking the
/// server's name or not (for the management API's clients: any certificate of the CA).
pub(crate) fn client_config(
    roots: Arc<RootCertStore>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    verify_hostname: bool,
    versions: &'static [&'static SupportedProtocolVersion],
) -> Result<ClientConfig, TlsError> {
    client_config_with_role(roots, identity, verify_hostname, false, versions)
}

/// [`client_config`], also requiring the server's certificate to be a node certificate if
/// `node_role` (remoting).
fn client_config_with_role(
    roots: Arc<RootCertStore>,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    verify_hostname: bool,
    node_role: bool,
    versions: &'static [&'static SupportedProtocolVersion],
) -> Result<ClientConfig, TlsError> {
    let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider())
        .build()
        .map_err(TlsError::other)?;
    let mut verifier: Arc<dyn ServerCertVerifier> = if verify_hostname {
        webpki
    } else {
        Arc::new(AnyNameServerVerifier::new(webpki))
    };
    if node_role {
        verifier = Arc::new(NodeServerVerifier::new(verifier));
    }
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(TlsError::other)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match identity {
        Some((certs, key)) => builder
            .with_client_auth_cert(certs, key)
            .map_err(TlsError::other),
        None => Ok(builder.with_no_client_auth()),
    }
}

fn build(config: &TlsConfig, purpose: Purpose) -> Result<Loaded, TlsError> {
    let versions = purpose.versions();
    let node_role = purpose == Purpose::Remoting;
    // The stamp is taken first: a change while reading is seen by the next check.
    let stamp = stamp(config);
    let certs = read_certificates(&config.certificate)?;
    if node_role {
        // Peers would refuse it: say so now, naming the file, rather than fail every
        // handshake (a reload with such a certificate keeps the previous one).
        check_node_certificate(&certs[0])
            .map_err(|e| TlsError::file(&config.certificate, e.to_string()))?;
    }
    let key = read_private_key(&config.private_key)?;
    let roots = read_roots(&config.ca_certificates)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider());
    let mut verifier: Arc<dyn ClientCertVerifier> = match purpose.client_auth() {
        ClientAuth::Required => verifier.build(),
        ClientAuth::Optional => verifier.allow_unauthenticated().build(),
    }
    .map_err(|e| TlsError::file(&config.ca_certificates, e.to_string()))?;
    if node_role {
        verifier = Arc::new(NodeClientVerifier::new(verifier));
    }
    let own = certs.first().cloned();
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(TlsError::other)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs.clone(), key.clone_key())
        .map_err(|e| TlsError::file(&config.private_key, e.to_string()))?;
    // No session resumption: connections are long-lived, and a reader never writes.
    server.send_tls13_tickets = 0;
    let mut client = client_config_with_role(
        roots,
        Some((certs, key)),
        purpose.verify_peer_hostname(config),
        node_role,
        versions,
    )?;
    client.resumption = rustls::client::Resumption::disabled();
    Ok(Loaded {
        server: Arc::new(server),
        client: Arc::new(client),
        own,
        stamp,
    })
}

impl TlsContext {
    /// The TLS context of `[remote.tls]` of `remote`, if configured (files loaded now).
    ///
    /// # Errors
    /// A file that cannot be read or used, naming the key: among them a certificate that is
    /// not a node certificate, and — with `verify-peer-hostname` in effect — one that does
    /// not name `hostname` (peers would refuse either).
    pub fn for_remote_config(
        remote: &RemoteConfig,
    ) -> Result<Option<Arc<TlsContext>>, ConfigError> {
        let Some(t) = &remote.tls else {
            return Ok(None);
        };
        let ctx = TlsContext::for_remoting(t)
            .map_err(|e| ConfigError::new("remote.tls", e.to_string()))?;
        if ctx.verify_peer_hostname() {
            let own = ctx.own_certificate();
            let named = own
                .as_ref()
                .map(|c| certificate_names_host(c, &remote.hostname));
            if let Some(Err(_)) = named {
                return Err(ConfigError::new(
                    "remote.tls.certificate",
                    format!(
                        "{} does not name `{}`, this node's remote.hostname: peers checking \
                         host names (remote.tls.verify-peer-hostname, on by default) would \
                         refuse it. Name the host in `concord certs create-node`, or set \
                         verify-peer-hostname = false if the nodes share one certificate that \
                         cannot name their hosts",
                        t.certificate.display(),
                        remote.hostname
                    ),
                ));
            }
        }
        Ok(Some(ctx))
    }
}
