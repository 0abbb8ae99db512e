//! The `concord` command: run a node, talk to a node's management API, run the demo.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use concord::client::{members_table, ManagementClient};
use concord::config::{env_overrides, Config};
use concord::ddata::DistributedData;
use concord::sample::SampleLayer;
use concord::sharding::Sharding;
use concord::singleton::ClusterSingletons;
use concord::Node;
use tracing::{info, warn};

#[derive(Parser)]
#[command(
    name = "concord",
    version,
    about = "Concord: Akka-style cluster membership for Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(clap::Args)]
struct ManagementArg {
    /// Base URL of a node's management API.
    #[arg(
        long,
        default_value = "http://127.0.0.1:8558",
        env = "CONCORD_MANAGEMENT"
    )]
    management: String,
    /// Bearer token for write routes (`management.bearer-token` of the node).
    #[arg(long, env = "CONCORD_MANAGEMENT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// For an HTTPS management API: the certificate authorities to trust, PEM (e.g.
    /// `certs/ca.crt`). The server's name is not checked unless `--verify-hostname`.
    #[arg(long, env = "CONCORD_CA_CERTIFICATES")]
    ca_certificates: Option<PathBuf>,
    /// A client certificate to present, PEM (e.g. `certs/client.root.crt`); it authorises
    /// write routes like the token. Needs `--client-key`.
    #[arg(long, env = "CONCORD_CLIENT_CERTIFICATE", requires = "client_key")]
    client_certificate: Option<PathBuf>,
    /// The client certificate's key, PEM.
    #[arg(long, env = "CONCORD_CLIENT_KEY", requires = "client_certificate")]
    client_key: Option<PathBuf>,
    /// Check that the server's certificate names the host of `--management`.
    #[arg(long)]
    verify_hostname: bool,
}

impl ManagementArg {
    fn client(&self) -> anyhow::Result<ManagementClient> {
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

#[derive(Subcommand)]
enum Commands {
    /// Run a cluster node in the foreground (SIGTERM/SIGINT: leave gracefully, then exit).
    Node {
        /// TOML configuration file (see docs/CONFIGURATION.md).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Cluster name (`system`).
        #[arg(long)]
        system: Option<String>,
        /// Host name or IP other nodes reach this node at (`remote.hostname`).
        #[arg(long)]
        host: Option<String>,
        /// Remoting port (`remote.port`, default 25520).
        #[arg(long)]
        port: Option<u16>,
        /// Management HTTP port (`management.port`, default 8558).
        #[arg(long)]
        management_port: Option<u16>,
        /// Seed nodes, comma-separated `host:port` or `concord://system@host:port`.
        #[arg(long, value_delimiter = ',')]
        seed_nodes: Option<Vec<String>>,
        /// Roles, comma-separated.
        #[arg(long, value_delimiter = ',')]
        roles: Option<Vec<String>>,
        /// Directory for the node's files (durable Distributed Data; `data-dir`).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Run the sample application on the management port (`/sample/...`, see
        /// docs/SAMPLE.md): a singleton, a replicated counter, and the sharded entity
        /// types `counter` and `log`.
        #[arg(long)]
        sample: bool,
        /// Run the key-value store with its HTTP API on this port (`kv.http-port`; 0: any
        /// free port); every node of the cluster should run it (docs/KV_STORE.md).
        #[arg(long)]
        kv_port: Option<u16>,
    },
    /// Read, write and delete keys of the key-value store through a node's HTTP API.
    Kv {
        #[command(subcommand)]
        command: KvCommand,
        #[command(flatten)]
        k: KvArg,
    },
    /// Show the members as one node sees them.
    Members {
        #[command(flatten)]
        m: ManagementArg,
        /// Print the JSON of GET /cluster/members.
        #[arg(long)]
        json: bool,
    },
    /// Tell the node behind --management to join the cluster of ADDRESS.
    Join {
        /// `concord://system@host:port` or `host:port`.
        address: String,
        #[command(flatten)]
        m: ManagementArg,
    },
    /// Ask the member at ADDRESS (default: the node behind --management) to leave gracefully.
    Leave {
        /// Member address; omitted: the node behind --management itself (a preStop hook).
        address: Option<String>,
        #[command(flatten)]
        m: ManagementArg,
    },
    /// Show the shards of entity type NAME: every region with its shards and entities
    /// (GET /cluster/shards/NAME).
    Shards {
        /// The entity type.
        name: String,
        #[command(flatten)]
        m: ManagementArg,
        /// Print the JSON of GET /cluster/shards/NAME (with every shard).
        #[arg(long)]
        json: bool,
    },
    /// Mark the member at ADDRESS as Down.
    Down {
        /// Member address.
        address: String,
        #[command(flatten)]
        m: ManagementArg,
    },
    /// Start a local cluster of real node processes and show join, leave, crash and restart.
    Demo {
        /// Number of nodes.
        #[arg(long, default_value_t = 5)]
        nodes: usize,
    },
    /// Make certificates for a TLS cluster (CockroachDB's `cockroach cert`): a CA, node
    /// certificates, client certificates, under ca.crt/ca.key, node.crt/node.key,
    /// client.NAME.crt/client.NAME.key in one directory (docs/SECURITY.md).
    Certs {
        #[command(subcommand)]
        command: CertsCommand,
    },
    /// Measure Concord against a physical baseline.
    Bench {
        #[command(subcommand)]
        bench: BenchCommand,
    },
}

#[derive(clap::Args)]
struct KvArg {
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
    fn client(&self) -> anyhow::Result<concord::kv::KvClient> {
        let m = ManagementArg {
            management: self.kv.clone(),
            token: self.token.clone(),
            ca_certificates: self.ca_certificates.clone(),
            client_certificate: self.client_certificate.clone(),
            client_key: self.client_key.clone(),
            verify_hostname: false,
        };
        Ok(concord::kv::KvClient::new(&m.client()?))
    }
}

#[derive(Subcommand)]
enum KvCommand {
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

async fn kv(command: KvCommand, k: &KvArg) -> anyhow::Result<()> {
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

#[derive(clap::Args)]
struct CertsArgs {
    /// The certificate directory (created if missing).
    #[arg(long, env = "CONCORD_CERTS_DIR")]
    dir: PathBuf,
    /// The CA key file (default: DIR/ca.key); keep it off the nodes.
    #[arg(long)]
    ca_key: Option<PathBuf>,
    /// Replace existing files.
    #[arg(long)]
    overwrite: bool,
}

// The subcommands are named after CockroachDB's (`create-ca`, `create-node`, ...).
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand)]
enum CertsCommand {
    /// A new certificate authority: DIR/ca.crt and its key.
    CreateCa {
        #[command(flatten)]
        args: CertsArgs,
    },
    /// A node certificate signed by the CA of DIR, for every HOST (DNS names or IP
    /// addresses the node is reached at): DIR/node.crt, DIR/node.key.
    CreateNode {
        #[command(flatten)]
        args: CertsArgs,
        /// Host names and IP addresses.
        #[arg(required = true)]
        hosts: Vec<String>,
    },
    /// A client certificate named NAME signed by the CA of DIR (for the CLI and other
    /// clients of the management API): DIR/client.NAME.crt, DIR/client.NAME.key.
    CreateClient {
        #[command(flatten)]
        args: CertsArgs,
        /// The client's name (its certificate's common name).
        name: String,
    },
}

fn certs(command: CertsCommand) -> anyhow::Result<()> {
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

#[derive(Subcommand)]
enum BenchCommand {
    /// Messages/s one way on the ordinary lane between two nodes on loopback, against raw
    /// tokio TCP in the same run, with the largest heartbeat round trip seen meanwhile.
    Remote {
        /// Payload size, bytes.
        #[arg(long, default_value_t = 100)]
        payload_bytes: usize,
        /// Measured time per run (after a 1 s warm-up), e.g. `10s`.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: std::time::Duration,
        /// Print one JSON object: concord_msgs_per_s, baseline_msgs_per_s, ratio,
        /// max_heartbeat_rtt_ms, unreachable_seen.
        #[arg(long)]
        json: bool,
        /// Remoting security of the Concord runs: plain, secret (cluster secret) or tls
        /// (TLS 1.3, mutual authentication).
        #[arg(long, value_enum, default_value = "plain")]
        security: concord::bench::remote::BenchSecurity,
    },
    /// Time from a graceful leave of the singleton's node to the new instance running
    /// (default timings; Akka measured 5.3-7.1 s).
    Singleton {
        /// Hand-overs to measure (the cluster starts with runs + 2 nodes).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Cluster Sharding: entity tell throughput local and remote on 3 nodes next to raw
    /// TCP, ask latency at half the peak, rebalance time to a 4th node (1000 shards,
    /// default settings), memory per idle entity.
    Sharding {
        /// Message size, bytes.
        #[arg(long, default_value_t = 100)]
        payload_bytes: usize,
        /// Measured time of each throughput run, e.g. `5s`.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: std::time::Duration,
        /// Idle entities of the memory measurement.
        #[arg(long, default_value_t = 1_000_000)]
        entities: usize,
        /// Skip the rebalance measurement.
        #[arg(long)]
        skip_rebalance: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The key-value store on 5 nodes (N=3, R=W=2): puts/s and gets/s with p50/p99
    /// latency at each value size, keys transferred per second to a joining 6th node,
    /// bytes on disk per key.
    Kv {
        /// Value sizes, bytes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "100,10240")]
        value_sizes: Vec<usize>,
        /// Measured time of each put and get run, e.g. `5s`.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: std::time::Duration,
        /// Concurrent clients.
        #[arg(long, default_value_t = 32)]
        clients: usize,
        /// Keys stored before the 6th node joins (0: skip).
        #[arg(long, default_value_t = 50_000)]
        transfer_keys: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Distributed Data on 5 nodes: WriteMajority/ReadMajority latency, ORSet updates/s
    /// and convergence at 10k and 100k elements, steady-state traffic.
    Ddata {
        /// Quorum requests of each kind.
        #[arg(long, default_value_t = 2000)]
        requests: usize,
        /// ORSet sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
        set_sizes: Vec<usize>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

#[tokio::main]
async fn main() -> ExitCode {
    concord::tls::install_default_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Commands::Node {
            config,
            system,
            host,
            port,
            management_port,
            seed_nodes,
            roles,
            data_dir,
            sample,
            kv_port,
        } => {
            init_logging("info");
            let mut overrides = node_overrides(
                system,
                host,
                port,
                management_port,
                seed_nodes,
                roles,
                data_dir,
            );
            if let Some(p) = kv_port {
                overrides.push(("kv.http-port".into(), p.to_string()));
            }
            run_node(config, overrides, sample).await
        }
        Commands::Kv { command, k } => kv(command, &k).await,
        Commands::Members { m, json } => members(&m, json).await,
        Commands::Join { address, m } => match m.client() {
            Ok(c) => print_result(c.join(&address).await),
            Err(e) => Err(e),
        },
        Commands::Leave { address, m } => leave(&m, address).await,
        Commands::Down { address, m } => match m.client() {
            Ok(c) => print_result(c.operation(&address, "Down").await),
            Err(e) => Err(e),
        },
        Commands::Shards { name, m, json } => shards(&m, &name, json).await,
        Commands::Certs { command } => certs(command),
        Commands::Demo { nodes } => {
            init_logging("warn");
            concord::demo::run(nodes).await
        }
        Commands::Bench {
            bench:
                BenchCommand::Remote {
                    payload_bytes,
                    duration,
                    json,
                    security,
                },
        } => {
            init_logging("warn");
            bench_remote(payload_bytes, duration, json, security).await
        }
        Commands::Bench {
            bench: BenchCommand::Singleton { runs, json },
        } => {
            init_logging("warn");
            match concord::bench::singleton::run_singleton(runs).await {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", concord::bench::singleton::report(&r));
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Commands::Bench {
            bench:
                BenchCommand::Sharding {
                    payload_bytes,
                    duration,
                    entities,
                    skip_rebalance,
                    json,
                },
        } => {
            init_logging("warn");
            let settings = concord::bench::sharding::ShardingBenchSettings {
                payload_bytes,
                duration,
                entities,
                skip_rebalance,
            };
            match concord::bench::sharding::run_sharding(&settings).await {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", concord::bench::sharding::report(&r));
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Commands::Bench {
            bench:
                BenchCommand::Kv {
                    value_sizes,
                    duration,
                    clients,
                    transfer_keys,
                    json,
                },
        } => {
            init_logging("warn");
            let settings = concord::bench::kv::KvBenchSettings {
                value_sizes,
                duration,
                clients,
                transfer_keys,
            };
            match concord::bench::kv::run_kv(&settings).await {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", concord::bench::kv::report(&r));
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
        Commands::Bench {
            bench:
                BenchCommand::Ddata {
                    requests,
                    set_sizes,
                    json,
                },
        } => {
            init_logging("warn");
            let settings = concord::bench::ddata::DdataBenchSettings {
                requests,
                set_sizes,
                ..Default::default()
            };
            match concord::bench::ddata::run_ddata(&settings).await {
                Ok(r) if json => print_json(&r),
                Ok(r) => {
                    print!("{}", concord::bench::ddata::report(&r));
                    Ok(())
                }
                Err(e) => Err(e),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bench_remote(
    payload_bytes: usize,
    duration: std::time::Duration,
    json: bool,
    security: concord::bench::remote::BenchSecurity,
) -> anyhow::Result<()> {
    let settings = concord::bench::RemoteBenchSettings {
        payload_bytes,
        duration,
        security,
    };
    if !json {
        eprintln!(
            "measuring: Concord ordinary lane, then raw tokio TCP, {} s each (+1 s warm-up)...",
            duration.as_secs_f64()
        );
    }
    let r = concord::bench::run_remote(&settings).await?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", concord::bench::remote::report(&r));
    }
    Ok(())
}

fn print_result(r: Result<String, concord::client::ClientError>) -> anyhow::Result<()> {
    let msg = r?;
    println!("{msg}");
    Ok(())
}

async fn leave(m: &ManagementArg, address: Option<String>) -> anyhow::Result<()> {
    let client = m.client()?;
    let address = match address {
        Some(a) => a,
        None => client.members().await?.self_node,
    };
    print_result(client.operation(&address, "Leave").await)
}

async fn shards(m: &ManagementArg, name: &str, json: bool) -> anyhow::Result<()> {
    let r = m.client()?.shards(name).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", concord::client::shards_table(&r));
    }
    Ok(())
}

async fn members(arg: &ManagementArg, json: bool) -> anyhow::Result<()> {
    let m = arg.client()?.members().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&m)?);
    } else {
        print!("{}", members_table(&m));
        if let Some(l) = &m.leader {
            println!("leader: {l}");
        }
    }
    Ok(())
}

/// The configuration overrides of `concord node`'s flags (on top of the environment's).
fn node_overrides(
    system: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    management_port: Option<u16>,
    seed_nodes: Option<Vec<String>>,
    roles: Option<Vec<String>>,
    data_dir: Option<PathBuf>,
) -> Vec<(String, String)> {
    let mut overrides = env_overrides(std::env::vars());
    let quote = |s: &str| toml::Value::String(s.to_string()).to_string();
    let list = |v: &[String]| {
        format!(
            "[{}]",
            v.iter()
                .map(|s| quote(s.trim()))
                .collect::<Vec<_>>()
                .join(",")
        )
    };
    if let Some(s) = system {
        overrides.push(("system".into(), quote(&s)));
    }
    if let Some(h) = host {
        overrides.push(("remote.hostname".into(), quote(&h)));
    }
    if let Some(p) = port {
        overrides.push(("remote.port".into(), p.to_string()));
    }
    if let Some(p) = management_port {
        overrides.push(("management.port".into(), p.to_string()));
    }
    if let Some(s) = seed_nodes {
        overrides.push(("cluster.seed-nodes".into(), list(&s)));
    }
    if let Some(r) = roles {
        overrides.push(("cluster.roles".into(), list(&r)));
    }
    if let Some(d) = data_dir {
        overrides.push(("data-dir".into(), quote(&d.display().to_string())));
    }
    overrides
}

async fn run_node(
    config: Option<PathBuf>,
    overrides: Vec<(String, String)>,
    sample: bool,
) -> anyhow::Result<()> {
    let mut config = Config::load(config.as_deref(), &overrides)?;
    if sample {
        config
            .distributed_data
            .durable
            .keys
            .push(concord::sample::COUNTER_KEYS.into());
    }
    let config_kv = config.kv.http_port.is_some();
    let (ddata, replicator) = DistributedData::new();
    let mut singletons = ClusterSingletons::new();
    let mut sharding = Sharding::new();
    let entities =
        sample.then(|| concord::sample::entities::init(&mut sharding, &config, replicator.clone()));
    let mut builder = Node::builder(config).layer(ddata);
    if let Some(entities) = entities {
        let proxy = concord::sample::add_singleton(&mut singletons);
        builder = builder.layer(SampleLayer::new(replicator, proxy, entities));
    }
    builder = builder.layer(singletons).layer(sharding);
    let mut kv_store = None;
    if config_kv {
        let (layer, store) = concord::kv::KeyValueStore::new();
        builder = builder.layer(layer);
        kv_store = Some(store);
    }
    let node = builder.start().await.context("cannot start the node")?;
    let kv_addr = kv_store.as_ref().and_then(|s| s.http_addr());
    info!(address = %node.self_address(), management = ?node.management_addr(), kv = ?kv_addr, "node running");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot install SIGTERM handler")?;
    let mut signalled = false;
    loop {
        tokio::select! {
            reason = node.terminated() => {
                info!(?reason, "node stopped; exiting");
                return Ok(());
            }
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        if signalled {
            warn!("second signal: exiting without finishing the coordinated shutdown");
            node.stop().await;
            return Ok(());
        }
        signalled = true;
        info!("signal received: coordinated shutdown (leave the cluster gracefully, then exit)");
        node.coordinated_shutdown()
            .run(concord_core::ShutdownReason::Requested);
    }
}

fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(v)?);
    Ok(())
}
