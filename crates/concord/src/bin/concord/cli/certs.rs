//! `concord certs create-ca|create-node|create-client`: certificates for a TLS cluster
//! (CockroachDB's file names; docs/SECURITY.md).

use std::path::PathBuf;

use clap::Subcommand;

#[derive(clap::Args)]
pub struct CertsArgs {
    /// The certificate directory (created if missing).
    #[arg(long, env = "CONCORD_CERTS_DIR")]
    dir: PathBuf,
    /// The CA key file (default: DIR/ca.key; its directory is created); keep it off the
    /// nodes.
    #[arg(long)]
    ca_key: Option<PathBuf>,
    /// Replace existing files.
    #[arg(long)]
    overwrite: bool,
}

// The subcommands are named after CockroachDB's (`create-ca`, `create-node`, ...).
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand)]
pub enum CertsCommand {
    /// A new certificate authority: DIR/ca.crt and its key.
    CreateCa {
        #[command(flatten)]
        args: CertsArgs,
    },
    /// A node certificate signed by the CA of DIR, for every HOST (DNS names or IP
    /// addresses the node is reached at; include its remote.hostname), with the node role
    /// (the URI concord:node) remoting requires: DIR/node.crt, DIR/node.key.
    CreateNode {
        #[command(flatten)]
        args: CertsArgs,
        /// Host names and IP addresses.
        #[arg(required = true)]
        hosts: Vec<String>,
    },
    /// A client certificate named NAME signed by the CA of DIR (for the CLI and other
    /// clients of the management and key-value APIs; remoting refuses it):
    /// DIR/client.NAME.crt, DIR/client.NAME.key.
    CreateClient {
        #[command(flatten)]
        args: CertsArgs,
        /// The client's name (its certificate's common name).
        name: String,
    },
}

pub fn run(command: CertsCommand) -> anyhow::Result<()> {
    use concord::tls::certs;
    let written = match command {
        CertsCommand::CreateCa { args } => {
            certs::create_ca(&args.dir, args.ca_key.as_deref(), args.overwrite)?
        }
        CertsCommand::CreateNode { args, hosts } => {
            certs::create_node(&args.dir, &hosts, args.ca_key.as_deref(), args.overwrite)?
        }
        CertsCommand::CreateClient { args, name } => {
            certs::create_client(&args.dir, &name, args.ca_key.as_deref(), args.overwrite)?
        }
    };
    for f in written {
        println!("wrote {}", f.display());
    }
    Ok(())
}
