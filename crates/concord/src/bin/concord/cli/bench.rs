//! `concord bench ...`: runs one of the library's benchmarks and prints its report (a table,
//! or one JSON object with `--json`).

use clap::Subcommand;

use super::print_json;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Messages/s one way on the ordinary lane between two nodes on loopback, against raw
    /// tokio TCP in the same run, with the largest heartbeat round trip seen meanwhile.
    Remote {
        /// Payload size, bytes.
        #[arg(long, default_value_t = 100)]
        payload_bytes: usize,
        /// Measured time per flow over all rounds (after a 1 s warm-up), e.g. `10s`.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        duration: std::time::Duration,
        /// Rounds: the flows take turns, each measured for duration / rounds per round;
        /// the ratio is the median of the rounds' ratios (1 to 1000).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
        rounds: u16,
        /// Print one JSON object: concord_msgs_per_s, baseline_msgs_per_s, ratio,
        /// ratio_per_round, max_heartbeat_rtt_ms, unreachable_seen, ...
        #[arg(long)]
        json: bool,
        /// Remoting security of the Concord runs: plain, secret (cluster secret) or tls
        /// (TLS 1.3, mutual authentication).
        #[arg(long, value_enum, default_value = "plain")]
        security: crate::bench::remote::BenchSecurity,
    },
    /// Cluster metrics: the bytes per second the metrics gossip costs each node at each
    /// cluster size (the real collectors and codec in lock step, default timings), and the
    /// gossip rounds until every node knows every node's metrics.
    ClusterMetrics {
        /// Cluster sizes, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "3,10,50,100,200")]
        nodes: Vec<usize>,
        /// Print one JSON object.
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
    /// Reliable delivery: confirmed messages/s into sharded entities on 3 nodes, with and
    /// without the durable queue (replicated journal), next to plain tell; send-to-confirm
    /// latency.
    Delivery {
        /// Message size, bytes.
        #[arg(long, default_value_t = 100)]
        payload_bytes: usize,
        /// Measured time of each run, e.g. `5s`.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: std::time::Duration,
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
        /// Tracing on (the OpenTelemetry layer, spans discarded instead of exported) with
        /// this sampling ratio; each sender runs inside a root span (docs/TRACING.md).
        #[arg(long)]
        tracing_sampling_ratio: Option<f64>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Event-sourced entities on 3 nodes with each store (PostgreSQL, started for the run
    /// unless --postgres-url; in-memory): persisted events/s per node, p50/p99 command
    /// latency, and a recovery storm (entities with 20 events each recovered by a fresh node).
    Persistence {
        /// Measured time of each throughput run, e.g. `5s`.
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        duration: std::time::Duration,
        /// Concurrent askers per node.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Entities the askers write to.
        #[arg(long, default_value_t = 10_000)]
        entities: usize,
        /// Event size, bytes.
        #[arg(long, default_value_t = 100)]
        event_bytes: usize,
        /// Entities of the recovery storm (0: skip).
        #[arg(long, default_value_t = 100_000)]
        recovery_entities: usize,
        /// Use this PostgreSQL (connection URL) instead of starting one.
        #[arg(long)]
        postgres_url: Option<String>,
        /// Open loop: asks started per second per node on a fixed schedule, whatever the
        /// answers (latency from each ask's scheduled start); `--clients` is then unused.
        #[arg(long)]
        rate: Option<f64>,
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
    /// `routing` and `pubsub-fanout` (crate::bench::services_cli).
    #[command(flatten)]
    Services(crate::bench::services_cli::ServicesBenchCommand),
}

/// Runs `bench` with logging at `warn`.
pub async fn run(bench: BenchCommand) -> anyhow::Result<()> {
    if let BenchCommand::Sharding {
        tracing_sampling_ratio,
        ..
    } = &bench
    {
        // The same subscriber with tracing on or off, so that the two differ by tracing.
        crate::bench::sharding::init_tracing(*tracing_sampling_ratio)?;
    } else {
        super::init_logging("warn");
    }
    match bench {
        BenchCommand::Remote {
            payload_bytes,
            duration,
            rounds,
            json,
            security,
        } => {
            let settings = crate::bench::RemoteBenchSettings {
                payload_bytes,
                duration,
                rounds: usize::from(rounds),
                security,
            };
            bench_remote(&settings, json).await
        }
        BenchCommand::ClusterMetrics { nodes, json } => {
            if nodes.iter().any(|n| !(2..=2000).contains(n)) {
                anyhow::bail!("--nodes: each size must be from 2 to 2000");
            }
            let r = crate::bench::metrics_gossip::run(&nodes);
            if json {
                print_json(&r)
            } else {
                print!("{}", crate::bench::metrics_gossip::report(&r));
                Ok(())
            }
        }
        BenchCommand::Singleton { runs, json } => print_report(
            crate::bench::singleton::run_singleton(runs).await,
            json,
            crate::bench::singleton::report,
        ),
        BenchCommand::Delivery {
            payload_bytes,
            duration,
            json,
        } => {
            if !(8..=1 << 20).contains(&payload_bytes) {
                anyhow::bail!("--payload-bytes must be from 8 to 1048576");
            }
            let settings = crate::bench::delivery::DeliveryBenchSettings {
                payload_bytes,
                duration,
            };
            print_report(
                crate::bench::delivery::run_delivery(&settings).await,
                json,
                crate::bench::delivery::report,
            )
        }
        BenchCommand::Sharding {
            payload_bytes,
            duration,
            entities,
            skip_rebalance,
            json,
            tracing_sampling_ratio: _,
        } => {
            let settings = crate::bench::sharding::ShardingBenchSettings {
                payload_bytes,
                duration,
                entities,
                skip_rebalance,
            };
            print_report(
                crate::bench::sharding::run_sharding(&settings).await,
                json,
                crate::bench::sharding::report,
            )
        }
        BenchCommand::Persistence {
            duration,
            clients,
            entities,
            event_bytes,
            recovery_entities,
            postgres_url,
            rate,
            json,
        } => {
            if rate.is_some_and(|r| !(r.is_finite() && (1.0..=1e6).contains(&r))) {
                anyhow::bail!("--rate must be from 1 to 1000000 asks/s per node");
            }
            for (name, v, max) in [
                ("--clients", clients, 10_000),
                ("--entities", entities, 100_000_000),
                ("--event-bytes", event_bytes, 1 << 20),
            ] {
                if !(1..=max).contains(&v) {
                    anyhow::bail!("{name} must be from 1 to {max}");
                }
            }
            if recovery_entities > 100_000_000 {
                anyhow::bail!("--recovery-entities must be at most 100000000");
            }
            let settings = crate::bench::persistence::PersistenceBenchSettings {
                duration,
                clients,
                entities,
                event_bytes,
                recovery_entities,
                postgres_url,
                rate,
            };
            print_report(
                crate::bench::persistence::run_persistence(&settings).await,
                json,
                crate::bench::persistence::report,
            )
        }
        BenchCommand::Kv {
            value_sizes,
            duration,
            clients,
            transfer_keys,
            json,
        } => {
            let settings = crate::bench::kv::KvBenchSettings {
                value_sizes,
                duration,
                clients,
                transfer_keys,
            };
            print_report(
                crate::bench::kv::run_kv(&settings).await,
                json,
                crate::bench::kv::report,
            )
        }
        BenchCommand::Ddata {
            requests,
            set_sizes,
            json,
        } => {
            let settings = crate::bench::ddata::DdataBenchSettings {
                requests,
                set_sizes,
                ..Default::default()
            };
            print_report(
                crate::bench::ddata::run_ddata(&settings).await,
                json,
                crate::bench::ddata::report,
            )
        }
        BenchCommand::Services(command) => crate::bench::services_cli::run(command).await,
    }
}

/// Prints a benchmark's result: one JSON object, or its report.
fn print_report<R: serde::Serialize>(
    result: anyhow::Result<R>,
    json: bool,
    report: fn(&R) -> String,
) -> anyhow::Result<()> {
    let r = result?;
    if json {
        print_json(&r)
    } else {
        print!("{}", report(&r));
        Ok(())
    }
}

async fn bench_remote(
    settings: &crate::bench::RemoteBenchSettings,
    json: bool,
) -> anyhow::Result<()> {
    if !json {
        eprintln!(
            "measuring: raw tokio TCP and three Concord flows in turn, {} s each over {} rounds (+1 s warm-up)...",
            settings.duration.as_secs_f64(),
            settings.rounds
        );
    }
    let r = crate::bench::run_remote(settings).await?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", crate::bench::remote::report(&r));
    }
    Ok(())
}
