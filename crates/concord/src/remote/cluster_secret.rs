//! [`ClusterSecret`]: the shared secret of a cluster that runs remoting over plain TCP
//! (Erlang distribution's cookie), proven in the handshake by a challenge–response that
//! never sends the secret.
//!
//! The connecting side sends a fresh 32-byte nonce in its `Handshake`. The accepting side
//! answers with its own nonce and `HMAC-SHA256(secret, "concord server" ‖ handshake ‖
//! server nonce)`, proving it knows the secret; the connecting side checks that and only
//! then answers with `HMAC-SHA256(secret, "concord client" ‖ handshake ‖ server nonce)`.
//! `handshake` is the exact bytes of the connecting side's `Handshake` (its claimed
//! address and incarnation, the target, the cluster name, the lane and the nonce), so a
//! proof cannot be replayed on another connection or for another identity, and the two
//! labels keep a proof of one side from being reflected as the other's. A side that does
//! not know the secret learns nothing usable from a failed attempt, and neither side
//! ever computes a proof over input the other chose alone.
//!
//! Like the cookie, the secret authenticates the ends of a connection when it opens; it
//! does not encrypt or protect the traffic afterwards. On a network an attacker can
//! observe or alter, configure TLS (`[remote.tls]`).

use ring::hmac;

use crate::config::{ConfigError, RemoteConfig};
use ring::rand::{SecureRandom, SystemRandom};

/// Length of a handshake nonce, bytes.
pub const NONCE_BYTES: usize = 32;

/// Shortest secret accepted, bytes (128 bits); a shorter one only with `remote.insecure`.
pub const MIN_SECRET_BYTES: usize = 16;

const SERVER_LABEL: &[u8] = b"concord server\0";
const CLIENT_LABEL: &[u8] = b"concord client\0";

/// A cluster secret, ready to compute and check proofs. Its `Debug` form does not show it.
#[derive(Clone)]
pub struct ClusterSecret {
    key: hmac::Key,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(..)")
    }
}

impl ClusterSecret {
    /// A secret from its bytes.
    ///
    /// # Errors
    /// An empty secret.
    pub fn new(secret: &[u8]) -> Result<Self, &'static str> {
        if secret.is_empty() {
            return Err("the cluster secret is empty");
        }
        Ok(ClusterSecret {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        })
    }

    fn proof(&self, label: &[u8], handshake: &[u8], server_nonce: &[u8]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        ctx.update(label);
        ctx.update(&(handshake.len() as u64).to_be_bytes());
        ctx.update(handshake);
        ctx.update(server_nonce);
        ctx.sign()
    }

    /// The accepting side's proof.
    pub fn server_proof(&self, handshake: &[u8], server_nonce: &[u8]) -> Vec<u8> {
        self.proof(SERVER_LABEL, handshake, server_nonce)
            .as_ref()
            .to_vec()
    }

    /// The connecting side's proof.
    pub fn client_proof(&self, handshake: &[u8], server_nonce: &[u8]) -> Vec<u8> {
        self.proof(CLIENT_LABEL, handshake, server_nonce)
            .as_ref()
            .to_vec()
    }

    /// Checks the accepting side's proof (constant time).
    pub fn verify_server(&self, handshake: &[u8], server_nonce: &[u8], proof: &[u8]) -> bool {
        self.verify(SERVER_LABEL, handshake, server_nonce, proof)
    }

    /// Checks the connecting side's proof (constant time).
    pub fn verify_client(&self, handshake: &[u8], server_nonce: &[u8], proof: &[u8]) -> bool {
        self.verify(CLIENT_LABEL, handshake, server_nonce, proof)
    }

    fn verify(&self, label: &[u8], handshake: &[u8], server_nonce: &[u8], proof: &[u8]) -> bool {
        let mut msg = Vec::with_capacity(label.len() + 8 + handshake.len() + server_nonce.len());
        msg.extend_from_slice(label);
        msg.extend_from_slice(&(handshake.len() as u64).to_be_bytes());
        msg.extend_from_slice(handshake);
        msg.extend_from_slice(server_nonce);
        hmac::verify(&self.key, &msg, proof).is_ok()
    }
}

/// A fresh random nonce from the operating system's generator.
pub fn nonce() -> Vec<u8> {
    let mut n = vec![0u8; NONCE_BYTES];
    // The system generator fails only if the OS has no randomness at all.
    if SystemRandom::new().fill(&mut n).is_err() {
        n.iter_mut().for_each(|b| *b = rand::random());
    }
    n
}

impl ClusterSecret {
    /// The cluster secret of `[remote]`'s `secret` or `secret-file`, if any.
    ///
    /// # Errors
    /// Both keys set, an unreadable file, an empty secret, or one shorter than 16 bytes
    /// (128 bits) without `remote.insecure` (with it: a warning).
    pub fn from_config(remote: &RemoteConfig) -> Result<Option<ClusterSecret>, ConfigError> {
        let (key, value) = match (remote.secret(), &remote.secret_file) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::new(
                    "remote.secret-file",
                    "set either remote.secret or remote.secret-file, not both",
                ))
            }
            (Some(s), None) => ("remote.secret", s.to_string()),
            (None, Some(path)) => (
                "remote.secret-file",
                std::fs::read_to_string(path)
                    .map_err(|e| {
                        ConfigError::new(
                            "remote.secret-file",
                            format!("cannot read {}: {e}", path.display()),
                        )
                    })?
                    .trim()
                    .to_string(),
            ),
            (None, None) => return Ok(None),
        };
        if value.len() < MIN_SECRET_BYTES && !value.is_empty() {
            if !remote.insecure {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "the cluster secret is {} bytes; it must be at least {MIN_SECRET_BYTES} \
                         bytes (128 bits): use a long random one (e.g. `head -c 32 /dev/urandom \
                         | base64`), or set remote.insecure = true to accept a short one",
                        value.len()
                    ),
                ));
            }
            tracing::warn!(
                key,
                "the cluster secret is shorter than {MIN_SECRET_BYTES} bytes (accepted because remote.insecure = true); use a long random one (e.g. `head -c 32 /dev/urandom | base64`)"
            );
        }
        ClusterSecret::new(value.as_bytes())
            .map(Some)
            .map_err(|e| ConfigError::new(key, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn both_sides_with_the_secret_verify_each_other() {
        let s = ClusterSecret::new(b"correct horse battery staple").unwrap();
        let (hs, n) = (b"handshake bytes".as_slice(), nonce());
        assert!(s.verify_server(hs, &n, &s.server_proof(hs, &n)));
        assert!(s.verify_client(hs, &n, &s.client_proof(hs, &n)));
        // A proof of one side is not the other's (no reflection).
        assert!(!s.verify_client(hs, &n, &s.server_proof(hs, &n)));
        assert!(!s.verify_server(hs, &n, &s.client_proof(hs, &n)));
        assert_eq!(format!("{s:?}"), "ClusterSecret(..)");
        assert!(ClusterSecret::new(b"").is_err());
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce(), nonce());
        assert_eq!(nonce().len(), NONCE_BYTES);
    }

    proptest! {
        #[test]
        fn another_secret_handshake_or_nonce_fails(
            a in proptest::collection::vec(any::<u8>(), 1..64),
            b in proptest::collection::vec(any::<u8>(), 1..64),
            hs in proptest::collection::vec(any::<u8>(), 0..200),
            hs2 in proptest::collection::vec(any::<u8>(), 0..200),
            proof in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let (sa, sb) = (ClusterSecret::new(&a).unwrap(), ClusterSecret::new(&b).unwrap());
            let n = nonce();
            let p = sa.client_proof(&hs, &n);
            prop_assert_eq!(sb.verify_client(&hs, &n, &p), a == b);
            prop_assert_eq!(sa.verify_client(&hs2, &n, &p), hs == hs2);
            prop_assert!(!sa.verify_client(&hs, &nonce(), &p));
            // Arbitrary bytes as a proof never verify (and never panic).
            prop_assert!(!sa.verify_client(&hs, &n, &proof) || proof == p);
        }
    }
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use crate::config::SecretString;

    fn with_secret(secret: &str, insecure: bool) -> RemoteConfig {
        RemoteConfig {
            secret: Some(SecretString(secret.into())),
            insecure,
            ..RemoteConfig::default()
        }
    }

    #[test]
    fn a_secret_under_128_bits_is_refused_unless_insecure() {
        let e = ClusterSecret::from_config(&with_secret("fifteen-bytes!!", false)).unwrap_err();
        assert_eq!(e.key, "remote.secret");
        assert!(e.message.contains("16 bytes"), "{e}");
        assert!(
            ClusterSecret::from_config(&with_secret("fifteen-bytes!!", true))
                .unwrap()
                .is_some()
        );
        assert!(
            ClusterSecret::from_config(&with_secret("sixteen-bytes!!!", false))
                .unwrap()
                .is_some()
        );
        // From a file: the same rule, naming the file's key.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "short\n").unwrap();
        let r = RemoteConfig {
            secret_file: Some(file),
            ..RemoteConfig::default()
        };
        assert_eq!(
            ClusterSecret::from_config(&r).unwrap_err().key,
            "remote.secret-file"
        );
    }
}
