//! [`TokioSpawner`]: the runtime's [`Spawner`] — tasks on the node's tokio runtime (in the
//! node's tracing span), blocking work on its blocking pool.

use tracing::Instrument;

use crate::host::{Spawner, Task};

/// Spawns on the tokio runtime it was created in.
#[derive(Clone, Debug)]
pub struct TokioSpawner {
    handle: tokio::runtime::Handle,
    span: tracing::Span,
}

impl TokioSpawner {
    /// A spawner on the current tokio runtime, its tasks in the current span.
    ///
    /// # Panics
    /// Outside a tokio runtime (a programming error: nodes start inside one).
    pub fn current() -> Self {
        TokioSpawner {
            handle: tokio::runtime::Handle::current(),
            span: tracing::Span::current(),
        }
    }
}

impl Spawner for TokioSpawner {
    fn spawn(&self, task: Task) {
        self.handle.spawn(task.instrument(self.span.clone()));
    }

    fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send + 'static>) {
        let span = self.span.clone();
        self.handle.spawn_blocking(move || span.in_scope(work));
    }
}
