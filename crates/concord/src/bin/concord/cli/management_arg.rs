//! The options every command that talks to a node's management API takes.

use std::path::PathBuf;

use crate::client::ManagementClient;

#[derive(clap::Args)]
pub struct ManagementArg {
    /// Base URL of a node's management API.
    #[arg(
        long,
        default_value = "http://127.0.0.1:8558",
        env = "CONCORD_MANAGEMENT"
    )]
    pub management: String,
    /// Bearer token for write routes (`management.bearer-token` of the node).
    #[arg(long, env = "CONCORD_MANAGEMENT_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// For an HTTPS management API: the certificate authorities to trust, PEM (e.g.
    /// `certs/ca.crt`). The server's name is not checked unless `--verify-hostname`.
    #[arg(long, env = "CONCORD_CA_CERTIFICATES")]
    pub ca_certificates: Option<PathBuf>,
    /// A client certificate to present, PEM (e.g. `certs/client.root.crt`); it authorises
    /// write routes like the token. Needs `--client-key`.
    #[arg(long, env = "CONCORD_CLIENT_CERTIFICATE", requires = "client_key")]
    pub client_certificate: Option<PathBuf>,
    /// The client certificate's key, PEM.
    #[arg(long, env = "CONCORD_CLIENT_KEY", requires = "client_certificate")]
    pub client_key: Option<PathBuf>,
    /// Check that the server's certificate names the host of `--management`.
    #[arg(long)]
    pub verify_hostname: bool,
}

impl ManagementArg {
    pub fn client(&self) -> anyhow::Result<ManagementClient> {
        let c = ManagementClient::new(&self.management).with_token(self.token.clone());
        Ok(match &self.ca_certificates {
            None => c,
            Some(ca) => {
                let identity = self
                    .client_certificate
                    .as_deref()
                    .zip(self.client_key.as_deref());
                c.with_tls(ca, identity, self.verify_hostname)?
            }
        })
    }
}
