//! Certificate verifiers around rustls's WebPKI ones:
//!
//! - [`AnyNameServerVerifier`] checks the chain against the trusted authorities but not the
//!   name (`verify-peer-hostname = off`, Akka's `hostname-verification = off`);
//! - [`NodeServerVerifier`] and [`NodeClientVerifier`] also require the peer's certificate to
//!   be a node certificate ([`super::role`]): remoting's two sides, so that a client
//!   certificate of the same CA neither accepts nor opens a remoting connection.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::SignatureScheme;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, OtherError};

use super::role::check_node_certificate;

/// The signature checks every verifier here leaves to the WebPKI verifier it wraps
/// (`self.inner`): only the certificate checks differ.
macro_rules! delegate_signatures {
    () => {
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.inner.verify_tls12_signature(message, cert, dss)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, Error> {
            self.inner.verify_tls13_signature(message, cert, dss)
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.inner.supported_verify_schemes()
        }
    };
}

/// WebPKI verification with the name check left out. rustls checks the chain, validity
/// period and key usage before the name, so a name error means everything else passed.
#[derive(Debug)]
pub(crate) struct AnyNameServerVerifier {
    inner: Arc<WebPkiServerVerifier>,
}

impl AnyNameServerVerifier {
    pub(crate) fn new(inner: Arc<WebPkiServerVerifier>) -> Self {
        AnyNameServerVerifier { inner }
    }
}

impl ServerCertVerifier for AnyNameServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    delegate_signatures!();
}

/// The refusal of a certificate that is not a node's (its message survives to the log:
/// see [`super::describe_tls_error`]).
fn node_role(end_entity: &CertificateDer<'_>) -> Result<(), Error> {
    check_node_certificate(end_entity)
        .map_err(|e| Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(e)))))
}

/// The dialling side of remoting: `inner`'s checks (chain, validity, serverAuth, and the
/// name unless `verify-peer-hostname` is off), then the node role.
#[derive(Debug)]
pub(crate) struct NodeServerVerifier {
    inner: Arc<dyn ServerCertVerifier>,
}

impl NodeServerVerifier {
    pub(crate) fn new(inner: Arc<dyn ServerCertVerifier>) -> Self {
        NodeServerVerifier { inner }
    }
}

impl ServerCertVerifier for NodeServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let verified = self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        node_role(end_entity)?;
        Ok(verified)
    }

    delegate_signatures!();
}

/// The accepting side of remoting: `inner`'s checks (a certificate is required; chain,
/// validity, clientAuth), then the node role. The claimed host is checked after the
/// remoting handshake names it (`handshake.rs`).
#[derive(Debug)]
pub(crate) struct NodeClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
}

impl NodeClientVerifier {
    pub(crate) fn new(inner: Arc<dyn ClientCertVerifier>) -> Self {
        NodeClientVerifier { inner }
    }
}

impl ClientCertVerifier for NodeClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        node_role(end_entity)?;
        Ok(verified)
    }

    delegate_signatures!();
}
