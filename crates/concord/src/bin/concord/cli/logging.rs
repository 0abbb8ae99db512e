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
