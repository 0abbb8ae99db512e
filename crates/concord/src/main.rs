//! The `concord` command: run a node, talk to a node's management API, run the demo.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use concord::client::{members_table, ManagementClient};
use concord::config::{env_overrides, Config};
use concord::ddata::DistributedData;
use concord::sample::SampleLayer;
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
}

impl ManagementArg {
    fn client(&self) -> ManagementClient {
        ManagementClient::new(&self.management).with_token(self.token.clone())
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
        /// Run the sample application: a singleton and a replicated counter on the
        /// management port (`/sample/...`, see docs/SAMPLE.md).
        #[arg(long)]
        sample: bool,
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
    /// Measure Concord against a physical baseline.
    Bench {
        #[command(subcommand)]
        bench: BenchCommand,
    },
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
        } => {
            init_logging("info");
            let overrides = node_overrides(
                system,
                host,
                port,
                management_port,
                seed_nodes,
                roles,
                data_dir,
            );
            run_node(config, overrides, sample).await
        }
        Commands::Members { m, json } => members(&m.management, json).await,
        Commands::Join { address, m } => print_result(m.client().join(&address).await),
        Commands::Leave { address, m } => leave(&m, address).await,
        Commands::Down { address, m } => print_result(m.client().operation(&address, "Down").await),
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
                },
        } => {
            init_logging("warn");
            bench_remote(payload_bytes, duration, json).await
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
) -> anyhow::Result<()> {
    let settings = concord::bench::RemoteBenchSettings {
        payload_bytes,
        duration,
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
    let client = m.client();
    let address = match address {
        Some(a) => a,
        None => client.members().await?.self_node,
    };
    print_result(client.operation(&address, "Leave").await)
}

async fn members(url: &str, json: bool) -> anyhow::Result<()> {
    let m = ManagementClient::new(url).members().await?;
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
    let (ddata, replicator) = DistributedData::new();
    let mut singletons = ClusterSingletons::new();
    let mut builder = Node::builder(config).layer(ddata);
    if sample {
        let proxy = concord::sample::add_singleton(&mut singletons);
        builder = builder.layer(SampleLayer::new(replicator, proxy));
    }
    let node = builder
        .layer(singletons)
        .start()
        .await
        .context("cannot start the node")?;
    info!(address = %node.self_address(), management = ?node.management_addr(), "node running");
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
