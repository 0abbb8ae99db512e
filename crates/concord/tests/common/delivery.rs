//! Settings shared by the reliable delivery tests.

use std::time::Duration;

use concord::Config;
use concord_core::delivery::DeliverySettings;

/// Short resend intervals and a window of 10.
pub fn settings() -> DeliverySettings {
    DeliverySettings {
        flow_control_window: 10,
        resend_interval_min_ms: 300,
        resend_interval_max_ms: 3_000,
        buffer_size: 2_000,
        ..DeliverySettings::default()
    }
}

/// Fast rebalances and 30 shards.
pub fn tune(c: &mut Config) {
    c.cluster.split_brain_resolver.stable_after = Duration::from_secs(2);
    c.update_section(|s: &mut concord::sharding::ShardingConfig| {
        s.rebalance_interval = Duration::from_millis(500);
        s.retry_interval = Duration::from_millis(200);
        s.number_of_shards = 30;
    })
    .expect("the section parses");
}
