//! [`CoordinatedShutdown`]: Akka's ordered shutdown of a node, in phases, each with a
//! timeout and tasks that layers and users register.
//!
//! The phases run in this order (Akka's `akka.coordinated-shutdown.phases`, with its
//! default timeouts; configurable under `[coordinated-shutdown]`):
//!
//! | phase | timeout | what runs there |
//! |---|---|---|
//! | `before-service-unbind` | 5 s | user tasks |
//! | `service-unbind` | 5 s | user tasks: stop accepting new work (unbind HTTP, ...) |
//! | `service-requests-done` | 5 s | user tasks: wait for requests in flight |
//! | `service-stop` | 5 s | user tasks |
//! | `before-cluster-shutdown` | 5 s | user tasks |
//! | `cluster-sharding-shutdown-region` | 10 s | sharding hands its shards off (when sharding runs) |
//! | `cluster-leave` | 5 s | membership: `leave` this node, wait until it is Leaving (or Exiting, Down, removed) |
//! | `cluster-exiting` | 10 s | membership: wait until this node is Exiting; singleton hand-over and other exiting tasks |
//! | `cluster-exiting-done` | 5 s | membership: report the exiting tasks done, so the leader may remove this node; wait for the removal |
//! | `cluster-shutdown` | 5 s | membership host stops, then its daemon drains and closes remoting |
//! | `before-actor-system-terminate` | 5 s | user tasks |
//! | `actor-system-terminate` | 10 s | user tasks; then the node is terminated |
//!
//! Remoting stays up until `cluster-shutdown`, so every layer can hand its work over in the
//! phases before it. Tasks of one phase run concurrently (as in Akka): a layer's
//! `cluster-exiting` task starts while the node is Leaving, next to the membership's own
//! task that waits for Exiting; the phase ends when all are done. The next phase starts
//! when all are done or the phase timed out (the late tasks are stopped and a warning
//! names them; like Akka's `recover = on`, a timeout never blocks the shutdown).
//!
//! What runs it: SIGTERM and `Node::shutdown` (reason
//! [`ShutdownReason::Requested`]); this node becoming Exiting after a `leave` from anywhere
//! ([`ShutdownReason::Removed`]); this node seeing itself Down
//! ([`ShutdownReason::Downed`], with `run-coordinated-shutdown-when-down`); any other
//! reason the membership machine stops for. The first reason is kept; running it again
//! joins the run in progress.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use concord_core::ShutdownReason;
use tokio::sync::watch;
use tracing::{info, warn, Instrument};

use crate::config::CoordinatedShutdownConfig;
pub use crate::config::Phase;

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Timeouts of the phases (`[coordinated-shutdown]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordinatedShutdownSettings {
    /// Timeout of a phase without one of its own (`default-phase-timeout`, 5 s).
    pub default_phase_timeout: Duration,
    /// Timeouts set per phase (`phases.<name>.timeout`).
    pub phase_timeouts: BTreeMap<Phase, Duration>,
}

impl Default for CoordinatedShutdownSettings {
    fn default() -> Self {
        CoordinatedShutdownSettings {
            default_phase_timeout: Duration::from_secs(5),
            phase_timeouts: BTreeMap::new(),
        }
    }
}

impl CoordinatedShutdownSettings {
    /// The settings of `[coordinated-shutdown]` (phase names were checked by
    /// [`crate::config::Config::validate`]; an unknown one is ignored here).
    pub fn from_config(c: &CoordinatedShutdownConfig) -> Self {
        CoordinatedShutdownSettings {
            default_phase_timeout: c.default_phase_timeout,
            phase_timeouts: c
                .phases
                .iter()
                .filter_map(|(name, p)| Phase::from_name(name).map(|ph| (ph, p.timeout)))
                .collect(),
        }
    }

    /// The timeout of `phase`: its configured one, else its own default, else the default
    /// phase timeout.
    pub fn timeout(&self, phase: Phase) -> Duration {
        self.phase_timeouts
            .get(&phase)
            .copied()
            .or_else(|| phase.own_default_timeout())
            .unwrap_or(self.default_phase_timeout)
    }
}

/// A task's future.
pub type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type Task = Box<dyn FnOnce() -> TaskFuture + Send>;

/// A task was added to a phase that has already run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("coordinated shutdown phase {phase} has already run; task `{task}` was not added")]
pub struct PhaseAlreadyRun {
    /// The phase.
    pub phase: Phase,
    /// The task's name.
    pub task: String,
}

struct Inner {
    settings: CoordinatedShutdownSettings,
    tasks: Mutex<BTreeMap<Phase, Vec<(String, Task)>>>,
    /// The phase running now (or the last one run).
    phase: Mutex<Option<Phase>>,
    started: watch::Sender<Option<ShutdownReason>>,
    completed: watch::Sender<Option<ShutdownReason>>,
    /// The span its run and tasks log in (the node's).
    span: tracing::Span,
}

/// The coordinated shutdown of one node. Cheap to clone.
#[derive(Clone)]
pub struct CoordinatedShutdown {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CoordinatedShutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatedShutdown")
            .field("reason", &self.reason())
            .field("phase", &self.current_phase())
            .finish()
    }
}

impl CoordinatedShutdown {
    /// A coordinated shutdown with no tasks yet; its run and tasks log in the span current
    /// now (the node's).
    pub fn new(settings: CoordinatedShutdownSettings) -> Self {
        CoordinatedShutdown {
            inner: Arc::new(Inner {
                settings,
                tasks: Mutex::new(BTreeMap::new()),
                phase: Mutex::new(None),
                started: watch::channel(None).0,
                completed: watch::channel(None).0,
                span: tracing::Span::current(),
            }),
        }
    }

    /// The timeout of `phase`.
    pub fn timeout(&self, phase: Phase) -> Duration {
        self.inner.settings.timeout(phase)
    }

    /// Adds a task to `phase`: `task` is called when the phase starts and the phase waits
    /// for its future (up to the phase timeout). Fails if the phase has already run.
    pub fn add_task<F, Fut>(
        &self,
        phase: Phase,
        name: impl Into<String>,
        task: F,
    ) -> Result<(), PhaseAlreadyRun>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let current = *self.inner.phase.lock().unwrap_or_else(|p| p.into_inner());
        if current.is_some_and(|c| c >= phase) {
            return Err(PhaseAlreadyRun { phase, task: name });
        }
        let mut tasks = self.inner.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks
            .entry(phase)
            .or_default()
            .push((name, Box::new(move || Box::pin(task()) as TaskFuture)));
        Ok(())
    }

    /// Starts the shutdown with `reason` (in a task of its own); false if it had already
    /// started (the first reason is kept).
    pub fn run(&self, reason: ShutdownReason) -> bool {
        let mut started = false;
        self.inner.started.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                started = true;
                true
            } else {
                false
            }
        });
        if started {
            let span = self.inner.span.clone();
            span.in_scope(|| info!(?reason, "coordinated shutdown started"));
            let this = self.clone();
            tokio::spawn(async move { this.run_phases(reason).await }.instrument(span));
        }
        started
    }

    async fn run_phases(&self, reason: ShutdownReason) {
        for phase in Phase::ALL {
            *self.inner.phase.lock().unwrap_or_else(|p| p.into_inner()) = Some(phase);
            let tasks = self
                .inner
                .tasks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&phase)
                .unwrap_or_default();
            info!(
                phase = phase.name(),
                tasks = tasks.len(),
                "coordinated shutdown phase"
            );
            if tasks.is_empty() {
                continue;
            }
            let timeout = self.timeout(phase);
            let mut running: Vec<(String, tokio::task::JoinHandle<()>)> = tasks
                .into_iter()
                .map(|(name, task)| {
                    let span = self.inner.span.clone();
                    (name, tokio::spawn(task().instrument(span)))
                })
                .collect();
            let all = async {
                for (_, h) in running.iter_mut() {
                    let _ = h.await;
                }
            };
            if tokio::time::timeout(timeout, all).await.is_err() {
                let late: Vec<&str> = running
                    .iter()
                    .filter(|(_, h)| !h.is_finished())
                    .map(|(n, _)| n.as_str())
                    .collect();
                warn!(phase = phase.name(), ?timeout, tasks = ?late, "coordinated shutdown phase timed out; continuing with the next phase");
                for (_, h) in &running {
                    h.abort();
                }
            }
        }
        info!(?reason, "coordinated shutdown completed");
        self.complete(reason);
    }

    fn complete(&self, reason: ShutdownReason) {
        self.inner.completed.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
    }

    /// Marks the node terminated at once without running the phases (an abrupt stop, like
    /// a crash; for tests). Does nothing if it has already completed.
    pub fn abort(&self, reason: ShutdownReason) {
        self.inner.started.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason);
                true
            } else {
                false
            }
        });
        self.complete(reason);
    }

    /// The reason it runs (or ran) for; `None` before it started.
    pub fn reason(&self) -> Option<ShutdownReason> {
        *self.inner.started.borrow()
    }

    /// The phase running now (the last one, once completed); `None` before it started.
    pub fn current_phase(&self) -> Option<Phase> {
        *self.inner.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reason, once every phase has run (or it was aborted).
    pub fn completed_reason(&self) -> Option<ShutdownReason> {
        *self.inner.completed.borrow()
    }

    /// Waits until it has started; returns the reason.
    pub async fn started(&self) -> ShutdownReason {
        wait_for(self.inner.started.subscribe()).await
    }

    /// Waits until every phase has run; returns the reason.
    pub async fn completed(&self) -> ShutdownReason {
        wait_for(self.inner.completed.subscribe()).await
    }
}

async fn wait_for(mut rx: watch::Receiver<Option<ShutdownReason>>) -> ShutdownReason {
    loop {
        if let Some(r) = *rx.borrow_and_update() {
            return r;
        }
        if rx.changed().await.is_err() {
            // The sender lives as long as the CoordinatedShutdown we were called on.
            return rx.borrow().unwrap_or(ShutdownReason::Stopped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn phases_have_akkas_names_order_and_timeouts() {
        assert_eq!(Phase::ALL.len(), 12);
        assert!(Phase::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            Phase::from_name("cluster-exiting"),
            Some(Phase::ClusterExiting)
        );
        assert_eq!(Phase::from_name("nope"), None);
        let d = CoordinatedShutdownSettings::default();
        assert_eq!(d.timeout(Phase::ClusterExiting), Duration::from_secs(10));
        assert_eq!(d.timeout(Phase::ClusterLeave), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn phases_run_in_order_and_a_late_task_does_not_block() {
        let cs = CoordinatedShutdown::new(CoordinatedShutdownSettings::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        for phase in Phase::ALL.into_iter().rev() {
            let order = order.clone();
            cs.add_task(phase, phase.name(), move || async move {
                order.lock().unwrap().push(phase);
            })
            .unwrap();
        }
        let stuck_ran = Arc::new(AtomicUsize::new(0));
        let s = stuck_ran.clone();
        cs.add_task(Phase::ServiceStop, "stuck", move || async move {
            s.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        })
        .unwrap();
        assert!(cs.run(ShutdownReason::Requested));
        assert!(!cs.run(ShutdownReason::Downed), "the first reason is kept");
        assert_eq!(cs.completed().await, ShutdownReason::Requested);
        assert_eq!(*order.lock().unwrap(), Phase::ALL.to_vec());
        assert_eq!(stuck_ran.load(Ordering::SeqCst), 1);
        assert_eq!(
            cs.add_task(Phase::ClusterLeave, "late", || async {}),
            Err(PhaseAlreadyRun {
                phase: Phase::ClusterLeave,
                task: "late".into()
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn abort_completes_without_running_tasks() {
        let cs = CoordinatedShutdown::new(CoordinatedShutdownSettings::default());
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        cs.add_task(Phase::ClusterLeave, "t", move || async move {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        cs.abort(ShutdownReason::Stopped);
        assert_eq!(cs.completed().await, ShutdownReason::Stopped);
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }
}
