//! The node role: what makes a certificate a Concord node's, so that remoting accepts node
//! certificates only — not the client certificates the same CA issues for the management
//! and key-value APIs.
//!
//! A node certificate (`concord certs create-node`) carries the URI `concord:node` among its
//! subject alternative names and the extended key usages serverAuth and clientAuth (a node
//! both accepts and opens connections); a client certificate (`create-client`) has
//! clientAuth only and no `concord:node`. The role is a subject alternative name because
//! that is the standard place for an identity a CA vouches for (SPIFFE puts its IDs there
//! too, RFC 5280 §4.2.1.6), every CA tool can write one (cert-manager: `uris:`, OpenSSL:
//! `subjectAltName = URI:concord:node`), and host-name checks ignore URIs.
//!
//! Certificates made before roles existed have no `concord:node`: they are refused as
//! nodes; re-issue them with `concord certs create-node`.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The subject alternative name (a URI) that marks a node certificate.
pub const NODE_ROLE_URI: &str = "concord:node";

/// Why a certificate is not a node certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotANode {
    /// The certificate could not be parsed as X.509.
    #[error("not a Concord node certificate: unreadable ({0})")]
    Unreadable(String),
    /// No `concord:node` URI among the subject alternative names.
    #[error(
        "not a Concord node certificate: it has no `{NODE_ROLE_URI}` URI among its subject \
         alternative names (a client certificate, or a node certificate made before node \
         roles; issue node certificates with `concord certs create-node`)"
    )]
    NoRole,
    /// The extended key usages leave out server or client authentication.
    #[error(
        "not a Concord node certificate: its extended key usage lacks {0} (a node both \
         accepts and opens connections; issue node certificates with `concord certs create-node`)"
    )]
    MissingUsage(&'static str),
}

/// Checks that `der` (an X.509 certificate, DER) is a node certificate: the
/// `concord:node` URI as a subject alternative name, and — when it restricts its extended key
/// usage — both serverAuth and clientAuth.
///
/// # Errors
/// [`NotANode`] naming what is missing.
pub fn check_node_certificate(der: &[u8]) -> Result<(), NotANode> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| NotANode::Unreadable(e.to_string()))?;
    let sans = cert
        .subject_alternative_name()
        .map_err(|e| NotANode::Unreadable(e.to_string()))?;
    let has_role = sans.is_some_and(|s| {
        s.value
            .general_names
            .iter()
            .any(|n| matches!(n, GeneralName::URI(u) if *u == NODE_ROLE_URI))
    });
    if !has_role {
        return Err(NotANode::NoRole);
    }
    let eku = cert
        .extended_key_usage()
        .map_err(|e| NotANode::Unreadable(e.to_string()))?;
    if let Some(eku) = eku.map(|e| e.value) {
        if !eku.any {
            if !eku.server_auth {
                return Err(NotANode::MissingUsage("serverAuth"));
            }
            if !eku.client_auth {
                return Err(NotANode::MissingUsage("clientAuth"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::certs::{create_ca, create_client, create_node, NODE_CERT};
    use crate::tls::context::read_certificates;
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair, SanType};

    fn self_signed(uris: &[&str], ekus: Vec<ExtendedKeyUsagePurpose>) -> Vec<u8> {
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        for u in uris {
            p.subject_alt_names
                .push(SanType::URI((*u).try_into().unwrap()));
        }
        p.extended_key_usages = ekus;
        p.self_signed(&KeyPair::generate().unwrap())
            .unwrap()
            .der()
            .to_vec()
    }

    #[test]
    fn create_node_makes_node_certificates_and_create_client_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        create_ca(d, None, false).unwrap();
        create_node(d, &["127.0.0.1".into()], None, false).unwrap();
        create_client(d, "root", None, false).unwrap();
        let node = read_certificates(&d.join(NODE_CERT)).unwrap();
        assert_eq!(check_node_certificate(&node[0]), Ok(()));
        let client = read_certificates(&d.join("client.root.crt")).unwrap();
        assert_eq!(check_node_certificate(&client[0]), Err(NotANode::NoRole));
        let ca = read_certificates(&d.join("ca.crt")).unwrap();
        assert_eq!(check_node_certificate(&ca[0]), Err(NotANode::NoRole));
    }

    #[test]
    fn the_role_and_both_usages_are_required() {
        use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        let both = || vec![ServerAuth, ClientAuth];
        assert_eq!(
            check_node_certificate(&self_signed(&[NODE_ROLE_URI], both())),
            Ok(())
        );
        // A node certificate of before the role: both usages, no URI.
        assert_eq!(
            check_node_certificate(&self_signed(&[], both())),
            Err(NotANode::NoRole)
        );
        // Another URI is not the role.
        assert_eq!(
            check_node_certificate(&self_signed(&["concord:client", "spiffe://x/node"], both())),
            Err(NotANode::NoRole)
        );
        assert_eq!(
            check_node_certificate(&self_signed(&[NODE_ROLE_URI], vec![ClientAuth])),
            Err(NotANode::MissingUsage("serverAuth"))
        );
        assert_eq!(
            check_node_certificate(&self_signed(&[NODE_ROLE_URI], vec![ServerAuth])),
            Err(NotANode::MissingUsage("clientAuth"))
        );
        // No extended key usage restricts nothing (RFC 5280 §4.2.1.12).
        assert_eq!(
            check_node_certificate(&self_signed(&[NODE_ROLE_URI], vec![])),
            Ok(())
        );
    }

    #[test]
    fn garbage_is_unreadable_not_a_panic() {
        for bytes in [&b""[..], b"\x30\x03\x02\x01", &[0xff; 64]] {
            assert!(matches!(
                check_node_certificate(bytes),
                Err(NotANode::Unreadable(_))
            ));
        }
    }
}
