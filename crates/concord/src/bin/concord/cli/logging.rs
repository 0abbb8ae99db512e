//! Logging of the command line: `RUST_LOG`, else the command's default level, to stderr.

/// Installs the subscriber: `RUST_LOG` if set, else `default` (e.g. `info`).
pub fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

/// The subscriber of `concord node`: like [`init_logging`], plus the OpenTelemetry layer
/// when `[tracing]` is enabled (its spans at info level whatever `RUST_LOG` says). Returns
/// the exporter to flush at exit.
///
/// # Errors
/// The OTLP exporter cannot be built.
pub fn init_node_logging(
    default: &str,
    tracing_config: &concord::telemetry::TracingConfig,
) -> anyhow::Result<Option<concord::telemetry::Telemetry>> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_filter(filter);
    let (otel, telemetry) = match concord::telemetry::otlp_layer(tracing_config)? {
        Some((layer, t)) => (
            Some(layer.with_filter(tracing_subscriber::filter::LevelFilter::INFO)),
            Some(t),
        ),
        None => (None, None),
    };
    tracing_subscriber::registry().with(fmt).with(otel).init();
    Ok(telemetry)
}
