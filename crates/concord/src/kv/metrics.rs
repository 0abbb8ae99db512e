//! The key-value store's metrics (`concord_kv_*`, each with a `node` label; the list is in
//! [`crate::metrics`]).

/// The key-value store's gauges and counters on one node.
pub(super) fn record_kv(
    node: &str,
    status: &concord_core::kv::KvStatus,
    s: &concord_core::kv::KvStats,
) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    let n = || node.to_string();
    metrics::gauge!("concord_kv_keys", "node" => n()).set(status.keys as f64);
    metrics::gauge!("concord_kv_misplaced_keys", "node" => n()).set(status.misplaced_keys as f64);
    metrics::gauge!("concord_kv_pending_segments", "node" => n())
        .set(status.pending_segments as f64);
    metrics::gauge!("concord_kv_handoffs_in_progress", "node" => n())
        .set(status.handoffs_in_progress as f64);
    metrics::gauge!("concord_kv_requests_in_progress", "node" => n())
        .set(status.requests_in_progress as f64);
    for (member, segments) in &status.ownership {
        metrics::gauge!("concord_kv_ring_segments", "node" => n(), "member" => member.address.to_string())
            .set(*segments as f64);
    }
    for (name, v) in [
        ("concord_kv_hinted_writes_total", s.hinted_writes),
        ("concord_kv_read_repairs_total", s.read_repairs),
        ("concord_kv_tombstones_reaped_total", s.tombstones_reaped),
        ("concord_kv_anti_entropy_exchanges_total", s.ae_exchanges),
        (
            "concord_kv_anti_entropy_keys_repaired_total",
            s.ae_keys_repaired,
        ),
        ("concord_kv_handoff_keys_sent_total", s.handoff_keys_sent),
        (
            "concord_kv_handoff_keys_received_total",
            s.handoff_keys_received,
        ),
        (
            "concord_kv_handoff_keys_removed_total",
            s.handoff_keys_removed,
        ),
        ("concord_kv_invalid_messages_total", s.invalid_messages),
        ("concord_kv_storage_errors_total", s.storage_errors),
        ("concord_kv_overloaded_total", s.overloaded),
    ] {
        metrics::counter!(name, "node" => n()).absolute(v);
    }
}

/// One key-value request coordinated on this node finished.
pub(super) fn kv_request(node: &str, op: &'static str, ok: bool, took: std::time::Duration) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    let result = if ok { "ok" } else { "error" };
    metrics::counter!("concord_kv_requests_total", "node" => node.to_string(), "op" => op, "result" => result)
        .increment(1);
    metrics::histogram!("concord_kv_request_duration_seconds", "node" => node.to_string(), "op" => op)
        .record(took.as_secs_f64());
}
