//! `concord kv get|put|delete|status`: the key-value store's HTTP API from the command line.

use std::path::PathBuf;

use clap::Subcommand;

use anyhow::Context;

use super::print_json;
use super::ManagementArg;

#[derive(clap::Args)]
pub struct KvArg {
    /// Base URL of a node's key-value API.
    #[arg(
        long,
        global = true,
        default_value = "http://127.0.0.1:8098",
        env = "CONCORD_KV"
    )]
    kv: String,
    /// Bearer token (`management.bearer-token` of the node).
    #[arg(
        long,
        global = true,
        env = "CONCORD_MANAGEMENT_TOKEN",
        hide_env_values = true
    )]
    token: Option<String>,
    /// For HTTPS: the certificate authorities to trust, PEM.
    #[arg(long, global = true, env = "CONCORD_CA_CERTIFICATES")]
    ca_certificates: Option<PathBuf>,
    /// A client certificate to present, PEM (needs `--client-key`).
    #[arg(long, global = true, env = "CONCORD_CLIENT_CERTIFICATE")]
    client_certificate: Option<PathBuf>,
    /// The client certificate's key, PEM.
    #[arg(long, global = true, env = "CONCORD_CLIENT_KEY")]
    client_key: Option<PathBuf>,
}

impl KvArg {
    fn client(&self) -> anyhow::Result<crate::client::kv::KvClient> {
        let m = ManagementArg {
            management: self.kv.clone(),
            token: self.token.clone(),
            ca_certificates: self.ca_certificates.clone(),
            client_certificate: self.client_certificate.clone(),
            client_key: self.client_key.clone(),
            verify_hostname: false,
        };
        Ok(crate::client::kv::KvClient::new(&m.client()?))
    }
}

#[derive(Subcommand)]
pub enum KvCommand {
    /// Print KEY's value (read from R replicas); siblings one per line; the context to
    /// write with goes to stderr.
    Get {
        key: String,
        /// Read quorum: one, quorum, all or a number.
        #[arg(long)]
        r: Option<String>,
        /// Replication factor the key was written with.
        #[arg(long)]
        n: Option<u8>,
        /// Print {"key", "found", "siblings" (base64), "context"}.
        #[arg(long)]
        json: bool,
    },
    /// Write VALUE (or the file --file, or standard input) to KEY.
    Put {
        key: String,
        value: Option<String>,
        /// Read the value from this file.
        #[arg(long, conflicts_with = "value")]
        file: Option<PathBuf>,
        /// The context of the last read (`X-Concord-Context`); without it the value is
        /// kept next to existing versions as a sibling.
        #[arg(long)]
        context: Option<String>,
        /// Write quorum: one, quorum, all or a number.
        #[arg(long)]
        w: Option<String>,
        /// Replication factor.
        #[arg(long)]
        n: Option<u8>,
    },
    /// Delete KEY (with --context, or reading it first).
    Delete {
        key: String,
        #[arg(long)]
        context: Option<String>,
        #[arg(long)]
        w: Option<String>,
        #[arg(long)]
        n: Option<u8>,
    },
    /// Print the node's GET /kv-status.
    Status,
}

pub async fn run(command: KvCommand, k: &KvArg) -> anyhow::Result<()> {
    use base64::Engine as _;
    use std::io::{Read, Write};
    let c = k.client()?;
    // The query of a request: the quorum (`r` or `w`) and `n`, those given.
    let query = |quorum: (&'static str, Option<String>), n: Option<u8>| {
        let mut q = Vec::new();
        if let (name, Some(v)) = quorum {
            q.push((name, v));
        }
        if let Some(n) = n {
            q.push(("n", n.to_string()));
        }
        q
    };
    match command {
        KvCommand::Get { key, r, n, json } => {
            let a = c.get(&key, &query(("r", r), n)).await?;
            if json {
                let b64 = base64::engine::general_purpose::STANDARD;
                print_json(&serde_json::json!({
                    "key": key,
                    "found": !a.values.is_empty(),
                    "siblings": a.values.iter().map(|v| b64.encode(v)).collect::<Vec<_>>(),
                    "context": a.context,
                }))?;
            } else {
                if a.values.is_empty() {
                    anyhow::bail!("{key}: not found");
                }
                let mut out = std::io::stdout().lock();
                for v in &a.values {
                    out.write_all(v)?;
                    if a.values.len() > 1 {
                        out.write_all(b"\n")?;
                    }
                }
                out.flush()?;
                if a.values.len() > 1 {
                    eprintln!("{} siblings", a.values.len());
                }
                if let Some(ctx) = a.context {
                    eprintln!("context: {ctx}");
                }
            }
            Ok(())
        }
        KvCommand::Put {
            key,
            value,
            file,
            context,
            w,
            n,
        } => {
            let bytes = match (value, file) {
                (Some(v), _) => v.into_bytes(),
                (None, Some(f)) => {
                    std::fs::read(&f).with_context(|| format!("cannot read {}", f.display()))?
                }
                (None, None) => {
                    let mut b = Vec::new();
                    std::io::stdin().read_to_end(&mut b)?;
                    b
                }
            };
            c.put(&key, bytes, context.as_deref(), &query(("w", w), n))
                .await?;
            Ok(())
        }
        KvCommand::Delete { key, context, w, n } => {
            c.delete(&key, context.as_deref(), &query(("w", w), n))
                .await?;
            Ok(())
        }
        KvCommand::Status => {
            let s = c.status().await?;
            println!("{}", serde_json::to_string_pretty(&s)?);
            Ok(())
        }
    }
}
