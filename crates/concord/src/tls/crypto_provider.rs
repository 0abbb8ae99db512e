//! The rustls crypto provider (`ring`) that every TLS configuration of this crate uses.

use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;

/// The crypto provider every TLS configuration of this crate uses (`ring`).
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// Installs `ring` as the process-wide rustls provider if none is installed yet (the HTTP
/// client, reqwest, builds its default TLS configuration from it). Idempotent; called when a
/// node starts and by the command-line tool.
pub fn install_default_provider() {
    if CryptoProvider::get_default().is_none() {
        // Another thread may have won the race: either way a provider is installed.
        let _ = CryptoProvider::install_default(rustls::crypto::ring::default_provider());
    }
}
