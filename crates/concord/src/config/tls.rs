//! `[remote.tls]` and `[management.tls]`: PEM files of a node's certificate and key and
//! of the certificate authorities it trusts (the file names `concord certs` writes:
//! `node.crt`, `node.key`, `ca.crt`).

use std::path::PathBuf;

use serde::Deserialize;

/// TLS settings of one listener (remoting or management) and of the connections it makes.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct TlsConfig {
    /// This node's certificate chain, PEM (leaf first), e.g. `certs/node.crt`.
    pub certificate: PathBuf,
    /// The certificate's private key, PEM (PKCS#8, PKCS#1 or SEC1), e.g. `certs/node.key`.
    pub private_key: PathBuf,
    /// The certificate authorities a peer's certificate must be signed by, PEM (one or
    /// more certificates), e.g. `certs/ca.crt`.
    pub ca_certificates: PathBuf,
    /// Also require the peer's certificate to name the peer's host (its DNS name or IP
    /// address as a subject alternative name): on connections this node opens, the host it
    /// dials; on connections it accepts, the host the peer claims in the handshake. Unset:
    /// on for `[remote.tls]` (a node certificate then proves which node it is, not only that
    /// it is one; Akka's `hostname-verification` defaults to off), off for
    /// `[management.tls]` (where it applies only to Cluster Bootstrap's probes of other
    /// nodes). Set it to `false` for remoting only when nodes share one certificate that
    /// cannot name their addresses (replicas whose IPs are assigned at start): any node
    /// certificate of the CA is then accepted as any node.
    #[serde(default)]
    pub verify_peer_hostname: Option<bool>,
}
