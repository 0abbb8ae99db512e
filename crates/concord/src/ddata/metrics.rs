//! The Distributed Data layer's metrics (`concord_ddata_*`, each with a `node` label).

/// Distributed Data counters, copied from the replicator's stats.
pub(super) fn record_replicator(
    node: &str,
    keys: usize,
    replicas: usize,
    s: &concord_core::ddata::replicator::ReplicatorStats,
) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    metrics::gauge!("concord_ddata_keys", "node" => node.to_string()).set(keys as f64);
    metrics::gauge!("concord_ddata_replicas", "node" => node.to_string()).set(replicas as f64);
    for (name, v) in [
        ("concord_ddata_deltas_sent_total", s.deltas_sent),
        ("concord_ddata_deltas_applied_total", s.deltas_applied),
        ("concord_ddata_delta_nacks_total", s.delta_nacks),
        ("concord_ddata_read_repairs_total", s.read_repairs),
        ("concord_ddata_unknown_types_total", s.unknown_types),
        ("concord_ddata_bad_values_total", s.bad_values),
        ("concord_ddata_too_large_total", s.too_large),
        ("concord_ddata_keys_refused_total", s.keys_refused),
        ("concord_ddata_pruning_performed_total", s.pruning_performed),
    ] {
        metrics::counter!(name, "node" => node.to_string()).absolute(v);
    }
    for (op, v) in [("read", s.read_timeouts), ("write", s.write_timeouts)] {
        metrics::counter!("concord_ddata_timeouts_total", "node" => node.to_string(), "op" => op)
            .absolute(v);
    }
}

/// Bytes of a Distributed Data anti-entropy message sent.
#[cfg_attr(not(feature = "runtime"), allow(dead_code))]
pub(super) fn ddata_gossip_bytes(node: &str, bytes: usize) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    metrics::counter!("concord_ddata_gossip_bytes_total", "node" => node.to_string())
        .increment(bytes as u64);
}

/// The latency of one Distributed Data request.
pub(super) fn ddata_request(node: &str, op: &'static str, consistency: &'static str, secs: f64) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    metrics::histogram!(
        "concord_ddata_request_duration_seconds",
        "node" => node.to_string(),
        "op" => op,
        "consistency" => consistency
    )
    .record(secs);
}

/// A durable write failed.
pub(super) fn ddata_store_failure(node: &str) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    metrics::counter!("concord_ddata_store_failures_total", "node" => node.to_string())
        .increment(1);
}
