//! The `concord` command: run a node, talk to a node's management API, run the demo.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli::{init_logging, ManagementArg};
use crate::client::members_table;
use crate::sample::SampleLayer;
use anyhow::Context;
use clap::{Parser, Subcommand};
use concord::config::{env_overrides, Config};
use concord::ddata::DistributedData;
use concord::sharding::Sharding;
use concord::singleton::ClusterSingletons;
use concord::Node;
use tracing::{info, warn};

/// The process's allocator: mimalloc (a node allocates and frees many small buffers per
/// message and per journal record; glibc's allocator took 15–25 % of the persistence
/// benchmark's CPU, docs/BENCHMARKS.md). The library leaves the choice to its users.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod cli;
mod client;
mod demo;
mod huge_pages;
mod sample;

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
        /// Instances of the sample's partitioned `echo` service (with `--sample`).
        #[arg(long, env = "CONCORD_SAMPLE_ECHO_INSTANCES", default_value_t = crate::sample::echo::INSTANCES,
              value_parser = clap::value_parser!(u32).range(1..=16))]
        sample_echo_instances: u32,
        /// Run the key-value store with its HTTP API on this port (`kv.http-port`; 0: any
        /// free port); every node of the cluster should run it (docs/KV_STORE.md).
        #[arg(long)]
        kv_port: Option<u16>,
    },
    /// Read, write and delete keys of the key-value store through a node's HTTP API.
    Kv {
        #[command(subcommand)]
        command: cli::kv::KvCommand,
        #[command(flatten)]
        k: cli::kv::KvArg,
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
    /// Show every member's load as a node knows it: CPU, load average, memory, queues,
    /// entities and the capacity left (GET /cluster/metrics; smoothed values).
    Metrics {
        #[command(flatten)]
        m: ManagementArg,
        /// Print the JSON of GET /cluster/metrics (latest samples and averages).
        #[arg(long)]
        json: bool,
    },
    /// Show the partitioned services: the partition table, pending handoffs, instances per
    /// node and this node's local instances (GET /cluster/services).
    Services {
        #[command(flatten)]
        m: ManagementArg,
        /// Print the JSON of GET /cluster/services.
        #[arg(long)]
        json: bool,
    },
    /// Print the persisted events of entity type TYPE after an offset, one JSON object per
    /// line (GET /persistence/events/TYPE; the node must run persistence).
    Events(cli::events::EventsArgs),
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
    /// A rolling upgrade under the demo's load, measured: nodes of the binary FROM are
    /// replaced one at a time (SIGTERM, then this binary on the same ports and data);
    /// reports failed requests, acknowledged writes lost, shard moves per shard and p99
    /// latency during the roll against steady state (docs/UPGRADES.md).
    RollingUpgrade {
        /// The `concord` binary of the version to upgrade from (scripts/rolling-upgrade
        /// builds it from a commit).
        #[arg(long)]
        from: std::path::PathBuf,
        /// Number of nodes.
        #[arg(long, default_value_t = 5)]
        nodes: usize,
        /// The steady windows before and after the roll, seconds.
        #[arg(long, default_value_t = 15)]
        steady_secs: u64,
        /// The old nodes' app-version.
        #[arg(long, default_value = "1.0.0")]
        from_app_version: String,
        /// The new nodes' app-version.
        #[arg(long, default_value = "1.1.0")]
        to_app_version: String,
        /// Print the figures as one JSON object at the end.
        #[arg(long)]
        json: bool,
    },
    /// Make certificates for a TLS cluster (CockroachDB's `cockroach cert`): a CA, node
    /// certificates, client certificates, under ca.crt/ca.key, node.crt/node.key,
    /// client.NAME.crt/client.NAME.key in one directory (docs/SECURITY.md).
    Certs {
        #[command(subcommand)]
        command: cli::certs::CertsCommand,
    },
    /// Measure Concord against a physical baseline.
    Bench {
        #[command(subcommand)]
        bench: cli::bench::BenchCommand,
    },
}

fn main() -> ExitCode {
    // Before the runtime's threads start allocating (see the module's docs).
    let huge_pages = huge_pages::configure();
    run(huge_pages)
}

#[tokio::main]
async fn run(huge_pages: huge_pages::HugePages) -> ExitCode {
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
            sample_echo_instances,
            kv_port,
        } => {
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
            let sample = sample.then_some(crate::sample::SampleOptions {
                echo_instances: sample_echo_instances,
            });
            run_node(config, overrides, sample, huge_pages).await
        }
        Commands::Kv { command, k } => cli::kv::run(command, &k).await,
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
        Commands::Metrics { m, json } => cluster_metrics(&m, json).await,
        Commands::Services { m, json } => services(&m, json).await,
        Commands::Events(args) => cli::events::run(args).await,
        Commands::Certs { command } => cli::certs::run(command),
        Commands::Demo { nodes } => {
            init_logging("warn");
            crate::demo::run(nodes).await
        }
        Commands::RollingUpgrade {
            from,
            nodes,
            steady_secs,
            from_app_version,
            to_app_version,
            json,
        } => {
            init_logging("warn");
            crate::demo::upgrade::run(crate::demo::upgrade::UpgradeOptions {
                from,
                nodes,
                steady: std::time::Duration::from_secs(steady_secs),
                from_app_version,
                to_app_version,
                json,
            })
            .await
        }
        Commands::Bench { bench } => cli::bench::run(bench).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn print_result(r: Result<String, crate::client::ClientError>) -> anyhow::Result<()> {
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
        print!("{}", crate::client::shards_table(&r));
    }
    Ok(())
}

async fn cluster_metrics(m: &ManagementArg, json: bool) -> anyhow::Result<()> {
    let r = m.client()?.cluster_metrics().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", cli::metrics::metrics_table(&r));
    }
    Ok(())
}

async fn services(m: &ManagementArg, json: bool) -> anyhow::Result<()> {
    let r = m.client()?.services().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", cli::services::services_table(&r));
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
    sample: Option<crate::sample::SampleOptions>,
    huge_pages: huge_pages::HugePages,
) -> anyhow::Result<()> {
    let config = Config::load(config.as_deref(), &overrides)?;
    let telemetry = cli::init_node_logging(
        "info",
        &config.section::<concord::telemetry::TracingConfig>()?,
    )?;
    tracing::debug!(?huge_pages, "transparent huge pages");
    let result = serve_node(config, sample).await;
    if let Some(t) = telemetry {
        t.shutdown();
    }
    result
}

/// Starts the node of `concord node` and runs it until it terminates.
async fn serve_node(
    mut config: Config,
    sample_options: Option<crate::sample::SampleOptions>,
) -> anyhow::Result<()> {
    let sample = sample_options.is_some();
    match concord::management::raise_descriptor_limit() {
        Ok((before, after)) if after > before => {
            info!(
                before,
                after, "raised the file-descriptor limit to its hard limit"
            )
        }
        Ok(_) => {}
        Err(e) => warn!(error = %e, "cannot raise the file-descriptor limit"),
    }
    if sample {
        config.update_section(|d: &mut concord::ddata::DistributedDataConfig| {
            d.durable.keys.push(crate::sample::COUNTER_KEYS.into())
        })?;
    }
    let config_kv = config
        .section::<concord::kv::KvConfig>()?
        .http_port
        .is_some();
    // The persistence layer (and its events route) when `[persistence].store` is set, and
    // for the sample (on the built-in replicated journal unless a store is set).
    let persistence = (sample
        || !config
            .section::<concord::persistence::PersistenceConfig>()?
            .store
            .is_empty())
    .then(concord::persistence::Persistence::layer);
    let (ddata, replicator) = DistributedData::new();
    let mut singletons = ClusterSingletons::new();
    let mut sharding = Sharding::new();
    let entities = sample.then(|| {
        crate::sample::entities::init(
            &mut sharding,
            &config,
            replicator.clone(),
            persistence.as_ref().map(|(_, handle)| handle),
        )
    });
    let entities = entities.transpose()?;
    // The receptionist (and pub-sub on it) on the node's Distributed Data.
    let (receptionist_layer, receptionist) =
        concord::receptionist::ReceptionistLayer::new(replicator.clone());
    // Partitioned services (the sample registers `echo`).
    let (services_layer, services) = concord::services::ServicesLayer::new();
    let readiness = concord::management::ReadinessChecks::new();
    let mut builder = Node::builder(config)
        .readiness_checks(readiness.clone())
        .layer(ddata)
        .layer(receptionist_layer)
        .layer(services_layer);
    if let (Some(entities), Some(options)) = (entities, sample_options) {
        let proxy = crate::sample::add_singleton(&mut singletons);
        builder = builder.layer(
            SampleLayer::new(replicator, proxy, entities, receptionist, services, options)
                .readiness(readiness),
        );
    }
    builder = builder.layer(singletons).layer(sharding);
    if let Some((layer, _)) = persistence {
        builder = builder.layer(layer);
    }
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
