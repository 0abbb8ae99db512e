//! Cluster Singleton: one instance of a service in the cluster, on the oldest member
//! (Akka's `ClusterSingletonManager` and `ClusterSingletonProxy`).
//!
//! The protocol lives in `concord-core` ([`concord_core::singleton`]); this module runs
//! it: [`ClusterSingletons`] is the layer (one driver task for all named singletons of a
//! node), [`SingletonRef`] the proxy (`tell`, `ask`), [`SingletonContext`] what the
//! running instance sees. A behaviour is an async function over its mailbox; when the
//! instance must move, `recv` returns `None`, and the next instance starts only after the
//! behaviour has returned. The hand-over of a leaving node runs in coordinated
//! shutdown's `cluster-exiting` phase, before remoting closes.

pub mod codec;
pub mod command;
#[cfg(feature = "runtime")]
mod config;
pub mod effects;
mod instance;
#[cfg(feature = "runtime")]
mod layer;
mod metrics;

pub use command::{SingletonCommand, SingletonCompletion};
#[cfg(feature = "runtime")]
pub use config::{SingletonConfig, SingletonProxyConfig};
pub use effects::SingletonEffects;
pub use instance::{Behaviour, Replier, SingletonContext, SingletonEnvelope, Wire};
#[cfg(feature = "runtime")]
pub use layer::{ClusterSingletons, SingletonError, SingletonRef};
