//! [`Persistence`]: the handle persistent entities reach their stores through — ready once
//! the persistence layer started its store (or at once, for stores given directly) — and
//! the node's recovery permits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::config::PersistenceSettings;
use super::store::Stores;
use super::PersistenceError;

/// The stores and settings of a started persistence layer.
#[derive(Clone)]
pub(crate) struct Running {
    pub(crate) stores: Stores,
    pub(crate) settings: PersistenceSettings,
    permits: Arc<Semaphore>,
    running_recoveries: Arc<AtomicUsize>,
}

/// A held recovery permit; counts the recoveries running while it lives.
pub(crate) struct RecoveryPermit {
    _permit: OwnedSemaphorePermit,
    running: Arc<AtomicUsize>,
    node: String,
}

impl Drop for RecoveryPermit {
    fn drop(&mut self) {
        let n = self.running.fetch_sub(1, Ordering::Relaxed) - 1;
        super::metrics::recoveries_running(&self.node, n);
    }
}

impl Running {
    /// Waits for one of the node's `recovery-permits` (Akka's
    /// `max-concurrent-recoveries`): recoveries beyond them wait, so a crash that moves
    /// many entities at once does not flood the store.
    pub(crate) async fn recovery_permit(&self, node: &str) -> RecoveryPermit {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the permits are never closed");
        let n = self.running_recoveries.fetch_add(1, Ordering::Relaxed) + 1;
        super::metrics::recoveries_running(node, n);
        RecoveryPermit {
            _permit: permit,
            running: self.running_recoveries.clone(),
            node: node.to_string(),
        }
    }
}

/// The handle persistent entities use: cheap to clone; calls wait until the persistence
/// layer has started its store (bounded by the caller's deadline).
#[derive(Clone)]
pub struct Persistence {
    /// `None` until the layer started its store; every clone shares it (the sender is kept
    /// here too, so a waiting receiver never sees a closed channel).
    running: Arc<watch::Sender<Option<Running>>>,
}

impl Persistence {
    /// A handle not ready yet: [`Persistence::start`] makes it ready.
    pub(crate) fn pending() -> Persistence {
        Persistence {
            running: Arc::new(watch::channel(None).0),
        }
    }

    /// Makes this handle, and every clone, ready with `stores` and `settings`.
    pub(crate) fn start(&self, stores: Stores, settings: PersistenceSettings) {
        self.running
            .send_replace(Some(Running::new(stores, settings)));
    }

    /// A handle ready at once with `stores` and `settings` — no node needed (tests, or an
    /// application that builds its own store).
    pub fn ready(stores: Stores, settings: PersistenceSettings) -> Persistence {
        let p = Persistence::pending();
        p.start(stores, settings);
        p
    }

    /// The node's stores, once the layer started them (`None` before): what an
    /// application or a tool reads or writes directly.
    pub fn stores(&self) -> Option<Stores> {
        self.running.borrow().as_ref().map(|r| r.stores.clone())
    }

    /// [`Persistence::stores`], waiting up to `timeout` for the layer to start them.
    ///
    /// # Errors
    /// [`PersistenceError::Unavailable`] if they did not start in time.
    pub async fn stores_within(&self, timeout: Duration) -> Result<Stores, PersistenceError> {
        Ok(self.running(timeout).await?.stores)
    }

    /// The running stores, waiting up to `timeout` for the layer to start them.
    pub(crate) async fn running(&self, timeout: Duration) -> Result<Running, PersistenceError> {
        if let Some(r) = self.running.borrow().as_ref() {
            return Ok(r.clone());
        }
        let mut rx = self.running.subscribe();
        let wait = async move {
            rx.wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|r| r.clone())
        };
        match tokio::time::timeout(timeout, wait).await {
            Ok(Some(r)) => Ok(r),
            _ => Err(PersistenceError::unavailable(format!(
                "the persistence store did not start within {} ms",
                timeout.as_millis()
            ))),
        }
    }
}

impl Running {
    fn new(stores: Stores, settings: PersistenceSettings) -> Running {
        Running {
            stores,
            permits: Arc::new(Semaphore::new(settings.recovery_permits.max(1))),
            settings,
            running_recoveries: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
