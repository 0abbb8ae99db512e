//! The persistence metrics (`concord_persistence_*`, labels `node` and `type`).

use std::time::Duration;

use super::PersistenceError;

fn labels(node: &str, entity_type: &str) -> [(&'static str, String); 2] {
    [
        ("node", node.to_string()),
        ("type", entity_type.to_string()),
    ]
}

/// An atomic write of `events` events was stored.
pub(super) fn persisted(node: &str, entity_type: &str, events: usize) {
    crate::metrics::ensure_recorder();
    let l = labels(node, entity_type);
    metrics::counter!("concord_persistence_events_persisted_total", &l).increment(events as u64);
    metrics::histogram!("concord_persistence_write_events", &l).record(events as f64);
}

/// A durable state was stored.
pub(super) fn state_persisted(node: &str, entity_type: &str) {
    crate::metrics::ensure_recorder();
    metrics::counter!(
        "concord_persistence_states_persisted_total",
        &labels(node, entity_type)
    )
    .increment(1);
}

/// A recovery finished after `took`, replaying `events` events.
pub(super) fn recovered(node: &str, entity_type: &str, took: Duration, events: u64) {
    crate::metrics::ensure_recorder();
    let l = labels(node, entity_type);
    metrics::counter!("concord_persistence_recoveries_total", &l).increment(1);
    metrics::counter!("concord_persistence_events_replayed_total", &l).increment(events);
    metrics::histogram!("concord_persistence_recovery_seconds", &l).record(took.as_secs_f64());
}

/// Recoveries running (holding a permit) on the node.
pub(super) fn recoveries_running(node: &str, running: usize) {
    crate::metrics::ensure_recorder();
    metrics::gauge!("concord_persistence_recoveries_running", "node" => node.to_string())
        .set(running as f64);
}

/// A failure, by kind (`conflict`, `recovery-failed`, ...).
pub(super) fn failed(node: &str, entity_type: &str, e: &PersistenceError) {
    crate::metrics::ensure_recorder();
    let [n, t] = labels(node, entity_type);
    metrics::counter!(
        "concord_persistence_failures_total",
        &[n, t, ("kind", e.kind().to_string())]
    )
    .increment(1);
}

/// A snapshot was saved (`ok`) or failed.
pub(super) fn snapshot(node: &str, entity_type: &str, ok: bool) {
    crate::metrics::ensure_recorder();
    let [n, t] = labels(node, entity_type);
    let outcome = if ok { "saved" } else { "failed" };
    metrics::counter!(
        "concord_persistence_snapshots_total",
        &[n, t, ("outcome", outcome.to_string())]
    )
    .increment(1);
}
