//! TLS for remoting and the management API: rustls with the `ring` provider.
//!
//! - [`TlsContext`]: a node's certificate, key and trusted authorities loaded from PEM files
//!   (`[remote.tls]`, `[management.tls]`) into rustls server and client configurations,
//!   re-read when the files change (certificate rotation without a restart).
//! - [`certs`]: `concord certs`, a certificate authority and node and client certificates
//!   made with rcgen, written under CockroachDB's file names.
//! - [`role`]: what makes a certificate a node's (`concord:node`), checked by remoting's
//!   verifiers on both sides.
//!
//! Remoting is TLS 1.3 only, with mutual authentication: both ends present a node
//! certificate signed by a trusted authority (Akka's `akka.remote.artery.ssl` with
//! `require-mutual-authentication = on`), naming the peer's host unless
//! `verify-peer-hostname = false`. The management API accepts TLS 1.2 and 1.3; a client
//! certificate there (any of the CA, `concord certs create-client`) is optional and, when
//! present and valid, authorises the write routes like the bearer token does.

pub mod certs;
pub(crate) mod context;
mod crypto_provider;
pub mod role;
mod verifier;

pub use context::{management_client_config, ClientAuth, TlsContext, TlsError, TlsReloadStats};
pub use crypto_provider::{install_default_provider, provider};

/// How often the TLS files are checked for changes (certificate rotation).
pub const RELOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// A `reqwest` client builder for the management API's plain-HTTP clients (the CLI, Cluster
/// Bootstrap's probes, the demo): it trusts no certificate authority unless the caller
/// configures TLS itself (`tls_backend_preconfigured`), so it builds on hosts without a
/// system CA store — the FROM-scratch image has none, and reqwest's default client panics
/// there ("No CA certificates were loaded from the system").
pub fn http_client_builder() -> reqwest::ClientBuilder {
    install_default_provider();
    reqwest::Client::builder().tls_certs_only(std::iter::empty())
}

/// A TLS failure as one line for the log: the message of a refusal of ours (a certificate
/// that is not a node's) instead of rustls's debug form of it.
pub(crate) fn describe_tls_error(e: &std::io::Error) -> String {
    use rustls::{CertificateError, Error};
    match e.get_ref().and_then(|i| i.downcast_ref::<Error>()) {
        Some(Error::InvalidCertificate(CertificateError::Other(other))) => {
            format!("invalid peer certificate: {}", other.0)
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_refused_role_reads_as_its_message() {
        use rustls::{CertificateError, Error, OtherError};
        let refused = Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
            role::NotANode::NoRole,
        ))));
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, refused);
        let line = describe_tls_error(&io);
        assert!(
            line.starts_with("invalid peer certificate: not a Concord node certificate")
                && line.contains("concord certs create-node"),
            "{line}"
        );
        let other = std::io::Error::other("connection reset");
        assert_eq!(describe_tls_error(&other), "connection reset");
    }
}
