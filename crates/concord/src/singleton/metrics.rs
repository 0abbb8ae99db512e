//! The Cluster Singleton layer's metrics (`concord_singleton_*`, labels `node` and `name`).

/// A singleton's lease was asked for and refused (another owner holds it).
pub(super) fn singleton_lease_refused(node: &str, name: &str) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    let labels = [("node", node.to_string()), ("name", name.to_string())];
    metrics::counter!("concord_singleton_lease_refused_total", &labels).increment(1);
}

/// Cluster Singleton gauges and counters of one named singleton on one node.
pub(super) fn record_singleton(
    node: &str,
    name: &str,
    running: bool,
    manager: &concord_core::singleton::ManagerStats,
    proxy: &concord_core::singleton::ProxyStats,
    buffered: usize,
) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    let labels = [("node", node.to_string()), ("name", name.to_string())];
    metrics::gauge!("concord_singleton_running", &labels).set(if running { 1.0 } else { 0.0 });
    metrics::counter!("concord_singleton_instances_started_total", &labels)
        .absolute(manager.instances_started);
    metrics::counter!("concord_singleton_hand_overs_total", &labels).absolute(manager.hand_overs);
    metrics::gauge!("concord_singleton_proxy_buffered", &labels).set(buffered as f64);
    metrics::counter!("concord_singleton_proxy_dropped_total", &labels).absolute(proxy.dropped);
}
