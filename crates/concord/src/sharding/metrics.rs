//! The sharding layer's metrics (`concord_sharding_*`, labels `node` and `type`).

/// What an operator watches of one entity type's sharding on one node.
pub(super) struct ShardingGauges {
    pub(super) shards: usize,
    pub(super) entities: usize,
    pub(super) handoffs_in_progress: usize,
    pub(super) buffered: usize,
    pub(super) backlogged: usize,
    pub(super) coordinator: bool,
    pub(super) mailbox_dropped: u64,
}

/// Cluster Sharding gauges and counters of one entity type on one node.
pub(super) fn record_sharding(
    node: &str,
    type_name: &str,
    g: &ShardingGauges,
    s: &concord_core::sharding::ShardingStats,
) {
    #[cfg(feature = "runtime")]
    crate::metrics::ensure_recorder();
    let labels = [("node", node.to_string()), ("type", type_name.to_string())];
    metrics::gauge!("concord_sharding_shards", &labels).set(g.shards as f64);
    metrics::gauge!("concord_sharding_entities", &labels).set(g.entities as f64);
    metrics::gauge!("concord_sharding_handoffs_in_progress", &labels)
        .set(g.handoffs_in_progress as f64);
    metrics::gauge!("concord_sharding_buffered_messages", &labels).set(g.buffered as f64);
    metrics::gauge!("concord_sharding_outbound_backlog", "node" => node.to_string())
        .set(g.backlogged as f64);
    metrics::gauge!("concord_sharding_coordinator", &labels).set(if g.coordinator {
        1.0
    } else {
        0.0
    });
    for (name, v) in [
        (
            "concord_sharding_handoffs_started_total",
            s.handoffs_started,
        ),
        (
            "concord_sharding_handoffs_completed_total",
            s.handoffs_completed,
        ),
        ("concord_sharding_forwarded_messages_total", s.forwarded),
        ("concord_sharding_held_for_order_total", s.held_for_order),
        (
            "concord_sharding_rebalance_rounds_total",
            s.rebalance_rounds,
        ),
        (
            "concord_sharding_shards_allocated_total",
            s.shards_allocated,
        ),
        (
            "concord_sharding_entities_started_total",
            s.entities_started,
        ),
        (
            "concord_sharding_entities_passivated_total",
            s.entities_passivated,
        ),
        (
            "concord_sharding_invalid_messages_total",
            s.invalid_messages,
        ),
    ] {
        metrics::counter!(name, &labels).absolute(v);
    }
    for (reason, v) in [
        ("buffer-full", s.dropped_buffer_full),
        ("mailbox-full", g.mailbox_dropped),
        ("other", s.dropped_other),
    ] {
        let mut l = labels.to_vec();
        l.push(("reason", reason.to_string()));
        metrics::counter!("concord_sharding_dropped_messages_total", &l).absolute(v);
    }
}
