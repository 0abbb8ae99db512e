//! The reliable delivery metrics (`concord_delivery_*`, labels `node` and `producer` or
//! `type`).

#[cfg(feature = "runtime")]
use super::status::ProducerStatus;

#[cfg(feature = "runtime")]
/// A producer's gauges and counters, refreshed about once a second by its task.
pub(super) fn producer(node: &str, producer_id: &str, s: &ProducerStatus) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    let l = [
        ("node", node.to_string()),
        ("producer", producer_id.to_string()),
    ];
    metrics::gauge!("concord_delivery_producer_unconfirmed", &l).set(s.unconfirmed as f64);
    metrics::gauge!("concord_delivery_producer_in_flight", &l).set(s.in_flight as f64);
    metrics::gauge!("concord_delivery_producer_entities", &l).set(s.entities as f64);
    metrics::gauge!("concord_delivery_producer_window", &l).set(s.window as f64);
    metrics::counter!("concord_delivery_producer_sent_total", &l).absolute(s.sent);
    metrics::counter!("concord_delivery_producer_resent_total", &l).absolute(s.resent);
    metrics::counter!("concord_delivery_producer_confirmed_total", &l).absolute(s.confirmed);
    metrics::counter!("concord_delivery_producer_invalid_total", &l).absolute(s.invalid);
}

#[cfg(feature = "runtime")]
/// A `send` was refused: the buffer was full.
pub(super) fn producer_refused(node: &str, producer_id: &str) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    metrics::counter!(
        "concord_delivery_producer_refused_total",
        "node" => node.to_string(),
        "producer" => producer_id.to_string()
    )
    .increment(1);
}

/// A consumer handed `count` messages to its entity.
pub(super) fn consumer_delivered(node: &str, entity_type: &str, count: u64) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    metrics::counter!(
        "concord_delivery_consumer_delivered_total",
        "node" => node.to_string(),
        "type" => entity_type.to_string()
    )
    .increment(count);
}

/// A consumer dropped a message: `duplicate`, `gap` (a resend asked), `stale`, `invalid`
/// or `undecodable`.
pub(super) fn consumer_dropped(node: &str, entity_type: &str, why: &'static str) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    metrics::counter!(
        "concord_delivery_consumer_dropped_total",
        "node" => node.to_string(),
        "type" => entity_type.to_string(),
        "reason" => why
    )
    .increment(1);
}

#[cfg(feature = "runtime")]
/// A producer stopped: its durable queue failed.
pub(super) fn producer_failed(node: &str, producer_id: &str) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    metrics::counter!(
        "concord_delivery_producer_failed_total",
        "node" => node.to_string(),
        "producer" => producer_id.to_string()
    )
    .increment(1);
}

/// The delivery layer dropped an envelope for a local endpoint: `unknown-endpoint`,
/// `endpoint-full` (the producer sends it again) or `malformed`.
#[cfg(feature = "runtime")]
pub(super) fn router_dropped(node: &str, reason: &'static str) {
    crate::metrics::ensure_recorder();
    metrics::counter!(
        "concord_delivery_router_dropped_total",
        "node" => node.to_string(),
        "reason" => reason
    )
    .increment(1);
}

/// The delivery layer's endpoints and envelopes, refreshed every second.
#[cfg(feature = "runtime")]
pub(super) fn router(node: &str, endpoints: usize, s: &concord_core::delivery::RouterStats) {
    crate::metrics::ensure_recorder();
    let l = [("node", node.to_string())];
    metrics::gauge!("concord_delivery_router_endpoints", &l).set(endpoints as f64);
    metrics::counter!("concord_delivery_router_sent_total", &l).absolute(s.sent);
    metrics::counter!("concord_delivery_router_received_total", &l).absolute(s.received);
    metrics::counter!("concord_delivery_router_malformed_total", &l).absolute(s.malformed);
}

/// A work-pulling (or point-to-point) producer's own gauges, next to [`producer`]'s.
#[cfg(feature = "runtime")]
pub(super) fn work_pulling(
    node: &str,
    producer_id: &str,
    waiting: usize,
    workers: usize,
    reassigned: u64,
) {
    crate::metrics::ensure_recorder();
    let l = [
        ("node", node.to_string()),
        ("producer", producer_id.to_string()),
    ];
    metrics::gauge!("concord_delivery_producer_waiting", &l).set(waiting as f64);
    metrics::gauge!("concord_delivery_producer_workers", &l).set(workers as f64);
    metrics::counter!("concord_delivery_producer_reassigned_total", &l).absolute(reassigned);
}
