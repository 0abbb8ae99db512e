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
//! - [`bootstrap`] and [`discovery`]: Cluster Bootstrap from service discovery (no seed-node
//!   list needed).
//! - [`client`] and [`demo`]: what the `concord` CLI uses.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bootstrap;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod discovery;
pub mod lease;
pub mod management;
pub mod metrics;
pub mod remote;

pub use cluster::{Cluster, ClusterError, ClusterExtensions, ClusterSnapshot, Subscription};
pub use concord_core;
pub use config::{Config, ConfigError};
