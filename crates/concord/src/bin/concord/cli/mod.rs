//! The command line's subcommands that have their own arguments and output.

pub mod bench;
pub mod certs;
pub mod events;
pub mod kv;
mod logging;
mod management_arg;
pub mod metrics;
pub mod services;

pub use logging::{init_logging, init_node_logging};
pub use management_arg::ManagementArg;

/// Prints `v` as one line of JSON.
pub fn print_json(v: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(v)?);
    Ok(())
}
