//! # concord
//!
//! The Concord runtime: drives the sans-IO [`concord_core`] membership protocol over real
//! TCP with tokio, and serves the management HTTP API.
//!
//! - [`cluster`]: [`Cluster`], the handle an application embeds (start, join, leave, down,
//!   subscribe to events, read the state).
//! - [`remote`]: framed TCP, handshake, associations, quarantine.
//! - [`management`]: the HTTP API in Akka Management's shapes.
//! - [`config`]: the TOML configuration, environment and flag overrides.
//! - [`client`] and [`demo`]: what the `concord` CLI uses.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod lease;
pub mod management;
pub mod metrics;
pub mod remote;

pub use cluster::{Cluster, ClusterError, ClusterSnapshot, Subscription};
pub use concord_core;
pub use config::{Config, ConfigError};
