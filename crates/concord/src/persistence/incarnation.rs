//! What an event-sourced and a durable-state entity share while running: the persistence
//! id (made from the entity id on first use), the store (waited for), a write under the
//! write deadline, and stopping after a failure (counted, logged, passivated).

use std::future::Future;

use concord_core::persistence::PersistenceId;
use tracing::warn;

use super::handle::{Persistence, Running};
use super::{metrics, PersistenceError};
use crate::sharding::EntityContext;

/// How long a command waits for the node's store to start (connect, create its schema)
/// before the entity stops with [`PersistenceError::Unavailable`].
pub(crate) const STORE_START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The persistence id `<entity_type>|<entity id>`, made once and kept in `cached`.
pub(crate) fn persistence_id(
    cached: &mut Option<PersistenceId>,
    entity_type: &str,
    ctx: &EntityContext,
) -> Result<PersistenceId, PersistenceError> {
    if let Some(p) = cached {
        return Ok(p.clone());
    }
    let p = PersistenceId::new(entity_type, ctx.entity_id())
        .map_err(|e| PersistenceError::BadId(e.to_string()))?;
    *cached = Some(p.clone());
    Ok(p)
}

/// The node's running store, waiting up to [`STORE_START_TIMEOUT`] for it.
pub(crate) async fn running(persistence: &Persistence) -> Result<Running, PersistenceError> {
    persistence.running(STORE_START_TIMEOUT).await
}

/// `write` of `pid`, bounded by `write-timeout`: not acknowledged by then is
/// [`PersistenceError::Unavailable`] (it may still be stored).
pub(crate) async fn write_within<T>(
    running: &Running,
    pid: &PersistenceId,
    write: impl Future<Output = Result<T, PersistenceError>>,
) -> Result<T, PersistenceError> {
    let deadline = running.settings.write_timeout;
    tokio::time::timeout(deadline, write)
        .await
        .unwrap_or_else(|_| {
            Err(PersistenceError::unavailable(format!(
                "the write of {pid} was not acknowledged within {} ms",
                deadline.as_millis()
            )))
        })
}

/// After `error`: a rejection is only counted (the entity goes on, nothing was stored);
/// anything else is counted, logged and stops the entity (true: it must refuse what is
/// still in its mailbox).
pub(crate) fn stops(
    ctx: &mut EntityContext,
    node: &str,
    entity_type: &str,
    error: &PersistenceError,
) -> bool {
    metrics::failed(node, entity_type, error);
    match error {
        PersistenceError::Rejected { .. } => return false,
        PersistenceError::Conflict { .. } => {
            warn!(%node, error = %error, "another writer of this entity exists; stopping this incarnation")
        }
        _ => warn!(%node, error = %error, "persistent entity stops"),
    }
    ctx.passivate();
    true
}
