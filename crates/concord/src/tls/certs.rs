//! `concord certs`: a certificate authority, node certificates and client certificates for
//! a TLS cluster, modelled on CockroachDB's `cockroach cert` and written under its file
//! names in one directory:
//!
//! | command | files |
//! |---|---|
//! | `create-ca` | `ca.crt`, `ca.key` (the key may live elsewhere: `--ca-key`; its directory is created) |
//! | `create-node HOST...` | `node.crt`, `node.key` — server and client authentication, the node role (the URI `concord:node`, [`super::role`]) and every HOST (DNS name or IP address) as subject alternative names |
//! | `create-client NAME` | `client.NAME.crt`, `client.NAME.key` — client authentication, common name NAME, no node role: the management and key-value APIs accept it, remoting does not |
//!
//! Keys are ECDSA P-256 (rcgen's default), written with mode 0600. The CA is valid for 10
//! years, node and client certificates for 5 (CockroachDB's defaults), each starting an
//! hour in the past to allow for clock skew. Existing files are not overwritten unless
//! asked.

use std::io::Write;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// File name of the CA certificate.
pub const CA_CERT: &str = "ca.crt";
/// File name of the CA key.
pub const CA_KEY: &str = "ca.key";
/// File name of the node certificate.
pub const NODE_CERT: &str = "node.crt";
/// File name of the node key.
pub const NODE_KEY: &str = "node.key";

/// Validity of the CA certificate, days.
pub const CA_LIFETIME_DAYS: i64 = 3650;
/// Validity of node and client certificates, days.
pub const CERT_LIFETIME_DAYS: i64 = 1825;

/// A certificate could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A file exists and overwriting was not asked for.
    #[error("{0} exists; remove it or pass --overwrite")]
    Exists(PathBuf),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// rcgen refused the request (e.g. a host name that is not a valid DNS name).
    #[error("{0}")]
    Certificate(String),
    /// A bad argument.
    #[error("{0}")]
    Invalid(String),
}

fn rc(e: rcgen::Error) -> CertsError {
    CertsError::Certificate(e.to_string())
}

/// Where the CA key is: `ca_key`, or `ca.key` in `dir`.
fn ca_key_path(dir: &Path, ca_key: Option<&Path>) -> PathBuf {
    ca_key.map_or_else(|| dir.join(CA_KEY), Path::to_path_buf)
}

fn validity(params: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(days);
}

/// Writes `contents` to `path` (mode 0600 if `secret`), refusing to replace a file unless
/// `overwrite`.
fn write(path: &Path, contents: &str, secret: bool, overwrite: bool) -> Result<(), CertsError> {
    use std::os::unix::fs::OpenOptionsExt;
    if !overwrite && path.exists() {
        return Err(CertsError::Exists(path.to_path_buf()));
    }
    let io = |source| CertsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)
}

fn read(path: &Path) -> Result<String, CertsError> {
    std::fs::read_to_string(path).map_err(|source| CertsError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn create_dir(dir: &Path) -> Result<(), CertsError> {
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

/// Creates `dir` and its missing parents with mode 0700 (a directory for keys); an existing
/// directory is left as it is.
fn create_private_dir(dir: &Path) -> Result<(), CertsError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| CertsError::Io {
            path: dir.to_path_buf(),
            source,
        })
}

/// Creates a certificate authority: `DIR/ca.crt` and its key (`ca_key` or `DIR/ca.key`);
/// the directories of both are created if missing (the key's with mode 0700). Returns the
/// files written.
///
/// # Errors
/// [`CertsError`]: a file exists (without `overwrite`), or cannot be written.
pub fn create_ca(
    dir: &Path,
    ca_key: Option<&Path>,
    overwrite: bool,
) -> Result<Vec<PathBuf>, CertsError> {
    create_dir(dir)?;
    let (cert_path, key_path) = (dir.join(CA_CERT), ca_key_path(dir, ca_key));
    if let Some(parent) = key_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_private_dir(parent)?;
    }
    for p in [&cert_path, &key_path] {
        if !overwrite && p.exists() {
            return Err(CertsError::Exists(p.clone()));
        }
    }
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "Concord CA");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Concord");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, CA_LIFETIME_DAYS);
    let key = KeyPair::generate().map_err(rc)?;
    let cert = params.self_signed(&key).map_err(rc)?;
    write(&key_path, &key.serialize_pem(), true, overwrite)?;
    write(&cert_path, &cert.pem(), false, overwrite)?;
    Ok(vec![cert_path, key_path])
}

/// Signs `params` with the CA of `dir` and writes the certificate and a new key.
fn issue(
    dir: &Path,
    ca_key: Option<&Path>,
    mut params: CertificateParams,
    cert_path: PathBuf,
    key_path: PathBuf,
    overwrite: bool,
) -> Result<Vec<PathBuf>, CertsError> {
    for p in [&cert_path, &key_path] {
        if !overwrite && p.exists() {
            return Err(CertsError::Exists(p.clone()));
        }
    }
    let ca_pem = read(&dir.join(CA_CERT))?;
    let ca_key_file = ca_key_path(dir, ca_key);
    let ca_key = KeyPair::from_pem(&read(&ca_key_file)?)
        .map_err(|e| CertsError::Certificate(format!("{}: {e}", ca_key_file.display())))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key)
        .map_err(|e| CertsError::Certificate(format!("{}: {e}", dir.join(CA_CERT).display())))?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, CERT_LIFETIME_DAYS);
    let key = KeyPair::generate().map_err(rc)?;
    let cert = params.signed_by(&key, &issuer).map_err(rc)?;
    write(&key_path, &key.serialize_pem(), true, overwrite)?;
    write(&cert_path, &cert.pem(), false, overwrite)?;
    Ok(vec![cert_path, key_path])
}

/// Creates `DIR/node.crt` and `DIR/node.key`, signed by the CA of `dir`, naming every host
/// of `hosts` (DNS names or IP addresses), for both server and client authentication (a
/// node both accepts and opens connections), with the node role: the URI
/// [`super::role::NODE_ROLE_URI`] as a subject alternative name (remoting accepts no other
/// certificate). With `verify-peer-hostname` (on by default for remoting) `hosts` must
/// include the node's `remote.hostname`.
///
/// # Errors
/// No host, a host that is not a DNS name or IP address, a missing CA, or a file that
/// exists (without `overwrite`).
pub fn create_node(
    dir: &Path,
    hosts: &[String],
    ca_key: Option<&Path>,
    overwrite: bool,
) -> Result<Vec<PathBuf>, CertsError> {
    if hosts.is_empty() {
        return Err(CertsError::Invalid(
            "name at least one host (a DNS name or IP address) the node is reached by".into(),
        ));
    }
    let mut params = CertificateParams::new(hosts.to_vec()).map_err(rc)?;
    params.subject_alt_names.push(SanType::URI(
        super::role::NODE_ROLE_URI.try_into().map_err(rc)?,
    ));
    params.distinguished_name.push(DnType::CommonName, "node");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Concord");
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    issue(
        dir,
        ca_key,
        params,
        dir.join(NODE_CERT),
        dir.join(NODE_KEY),
        overwrite,
    )
}

/// Creates `DIR/client.NAME.crt` and `DIR/client.NAME.key`, signed by the CA of `dir`, for
/// client authentication with common name NAME (the management API's write routes accept
/// it in place of the bearer token).
///
/// # Errors
/// A NAME other than letters, digits, `.`, `_` and `-`, a missing CA, or a file that
/// exists (without `overwrite`).
pub fn create_client(
    dir: &Path,
    name: &str,
    ca_key: Option<&Path>,
    overwrite: bool,
) -> Result<Vec<PathBuf>, CertsError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !valid {
        return Err(CertsError::Invalid(format!(
            "client name `{name}`: use 1-64 letters, digits, `.`, `_` or `-`"
        )));
    }
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params
        .distinguished_name
        .push(DnType::OrganizationName, "Concord");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    issue(
        dir,
        ca_key,
        params,
        dir.join(format!("client.{name}.crt")),
        dir.join(format!("client.{name}.key")),
        overwrite,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TlsConfig;
    use crate::tls::TlsContext;

    #[test]
    fn three_commands_make_files_that_load_as_a_tls_identity() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        create_ca(d, None, false).unwrap();
        create_node(
            d,
            &["127.0.0.1".into(), "node1.example".into()],
            None,
            false,
        )
        .unwrap();
        let client = create_client(d, "root", None, false).unwrap();
        assert_eq!(client[0], d.join("client.root.crt"));
        let mode = |f: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join(f)).unwrap().permissions().mode() & 0o777
        };
        assert_eq!(mode("ca.key"), 0o600);
        assert_eq!(mode("node.key"), 0o600);
        assert_eq!(mode("client.root.key"), 0o600);
        let cfg = TlsConfig {
            certificate: d.join(NODE_CERT),
            private_key: d.join(NODE_KEY),
            ca_certificates: d.join(CA_CERT),
            verify_peer_hostname: Some(true),
        };
        TlsContext::for_remoting(&cfg).unwrap();
        let node = crate::tls::context::read_certificates(&d.join(NODE_CERT)).unwrap();
        crate::tls::context::certificate_names_host(&node[0], "127.0.0.1").unwrap();
        crate::tls::context::certificate_names_host(&node[0], "node1.example").unwrap();
        assert!(crate::tls::context::certificate_names_host(&node[0], "10.0.0.9").is_err());
    }

    #[test]
    fn existing_files_are_kept_unless_overwrite_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        create_ca(dir.path(), None, false).unwrap();
        let before = std::fs::read(dir.path().join(CA_CERT)).unwrap();
        assert!(matches!(
            create_ca(dir.path(), None, false),
            Err(CertsError::Exists(_))
        ));
        assert_eq!(std::fs::read(dir.path().join(CA_CERT)).unwrap(), before);
        create_ca(dir.path(), None, true).unwrap();
        assert_ne!(std::fs::read(dir.path().join(CA_CERT)).unwrap(), before);
    }

    #[test]
    fn the_directory_of_the_ca_key_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        let key = dir.path().join("ca-keys").join("offline").join("ca.key");
        create_ca(&certs, Some(&key), false).unwrap();
        assert!(key.is_file());
        create_node(&certs, &["127.0.0.1".into()], Some(&key), false).unwrap();
        assert!(certs.join(NODE_CERT).is_file());
    }

    #[test]
    fn remoting_checks_peer_host_names_by_default_and_management_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        create_ca(d, None, false).unwrap();
        create_node(d, &["127.0.0.1".into()], None, false).unwrap();
        let cfg: TlsConfig = toml::from_str(&format!(
            "certificate = '{}'\nprivate-key = '{}'\nca-certificates = '{}'",
            d.join(NODE_CERT).display(),
            d.join(NODE_KEY).display(),
            d.join(CA_CERT).display()
        ))
        .unwrap();
        assert!(TlsContext::for_remoting(&cfg)
            .unwrap()
            .verify_peer_hostname());
        assert!(!TlsContext::for_management(&cfg)
            .unwrap()
            .verify_peer_hostname());
    }

    #[test]
    fn bad_arguments_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        create_ca(dir.path(), None, false).unwrap();
        assert!(matches!(
            create_node(dir.path(), &[], None, false),
            Err(CertsError::Invalid(_))
        ));
        for bad in ["", "../x", "a/b", ".hidden"] {
            assert!(matches!(
                create_client(dir.path(), bad, None, false),
                Err(CertsError::Invalid(_))
            ));
        }
        let other = tempfile::tempdir().unwrap();
        assert!(matches!(
            create_node(other.path(), &["h".into()], None, false),
            Err(CertsError::Io { .. })
        ));
    }
}
