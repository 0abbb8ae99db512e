//! [`Spawner`]: where a layer's effects run work that outlives one input — an entity's
//! batch that waits, a singleton instance, a lease request, a blocking store read. The
//! tokio runtime spawns tasks and blocking threads; the simulator polls the same futures in
//! virtual time on its own executor and runs blocking work inline. Work reports back
//! through the host's completion queue ([`crate::host::Completions`]), never by reaching
//! into the host.

use std::future::Future;
use std::pin::Pin;

/// A unit of asynchronous work: it returns nothing, it reports through a completion.
pub type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Runs a host's asynchronous and blocking work.
pub trait Spawner: Send + Sync {
    /// Runs `task` concurrently with the host.
    fn spawn(&self, task: Task);

    /// Runs `work`, which may block the thread (file I/O), away from the host's thread
    /// (the simulator runs it at once).
    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send + 'static>);
}
