//! The services benchmarks' subcommands (`concord bench routing`, `concord bench
//! pubsub-fanout`), flattened into `concord bench`'s subcommands by `cli/bench.rs`.

use clap::Subcommand;

/// `concord bench routing | pubsub-fanout`.
#[derive(Subcommand)]
pub enum ServicesBenchCommand {
    /// Messages/s routed through the receptionist's ServiceRouter (round robin, random,
    /// consistent hashing, adaptive) to handles on 3 in-process nodes, next to sharded tell
    /// on the same nodes in the same run, round after round; the ratio of each.
    Routing {
        /// Message size, bytes.
        #[arg(long, default_value_t = 100)]
        payload_bytes: usize,
        /// Measured time of each case per round (after a 1 s warm-up), e.g. `2s`.
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        window: std::time::Duration,
        /// Rounds: every case once per round; a ratio is the median of its rounds'.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=100))]
        rounds: u16,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Distributed pub-sub: 1,000 subscribers over 5 in-process nodes, one publisher;
    /// deliveries/s, publish-to-last-subscriber latency p50/p99 (burst and paced), peak
    /// node-wide mailbox bytes.
    PubsubFanout {
        /// Subscribers over all nodes.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        subscribers: u32,
        /// Nodes.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=20))]
        nodes: u16,
        /// Messages of the burst.
        #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        messages: u32,
        /// Burst messages in flight at most (not yet received by every subscriber).
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        window: u32,
        /// Messages of the paced run.
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
        paced_messages: u32,
        /// Publishes per second of the paced run.
        #[arg(long, default_value_t = 50.0)]
        paced_rate: f64,
        /// Message size, bytes.
        #[arg(long, default_value_t = 100)]
        payload_bytes: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Prints a result: one JSON object, or its report.
fn print<R: serde::Serialize>(r: &R, json: bool, report: fn(&R) -> String) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(r)?);
    } else {
        print!("{}", report(r));
    }
    Ok(())
}

/// Runs `command` (logging is set up by the caller).
pub async fn run(command: ServicesBenchCommand) -> anyhow::Result<()> {
    match command {
        ServicesBenchCommand::Routing {
            payload_bytes,
            window,
            rounds,
            json,
        } => {
            anyhow::ensure!(
                (8..=1 << 20).contains(&payload_bytes),
                "--payload-bytes must be from 8 to 1048576"
            );
            let settings = super::routing::RoutingBenchSettings {
                payload_bytes,
                window,
                rounds: usize::from(rounds),
            };
            let r = super::routing::run_routing(&settings).await?;
            print(&r, json, super::routing::report)
        }
        ServicesBenchCommand::PubsubFanout {
            subscribers,
            nodes,
            messages,
            window,
            paced_messages,
            paced_rate,
            payload_bytes,
            json,
        } => {
            anyhow::ensure!(
                paced_rate.is_finite() && (0.1..=100_000.0).contains(&paced_rate),
                "--paced-rate must be from 0.1 to 100000"
            );
            anyhow::ensure!(
                (8..=1 << 20).contains(&payload_bytes),
                "--payload-bytes must be from 8 to 1048576"
            );
            anyhow::ensure!(
                subscribers >= u32::from(nodes),
                "--subscribers must be at least --nodes"
            );
            let settings = super::pubsub_fanout::FanoutBenchSettings {
                subscribers: subscribers as usize,
                nodes: usize::from(nodes),
                messages: messages as usize,
                window: window as usize,
                paced_messages: paced_messages as usize,
                paced_rate,
                payload_bytes,
            };
            let r = super::pubsub_fanout::run_fanout(&settings).await?;
            print(&r, json, super::pubsub_fanout::report)
        }
    }
}
