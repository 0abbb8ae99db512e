//! `[reliable-delivery]`: the settings of reliable delivery's producers and consumers
//! (docs/RELIABLE_DELIVERY.md). Defaults are Akka's (`akka.reliable-delivery`).

use std::time::Duration;

use concord_core::delivery::DeliverySettings;
use serde::{Deserialize, Serialize};

use crate::config::{Config, ConfigError, ConfigSection};

/// `[reliable-delivery]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ReliableDeliveryConfig {
    /// Messages a consumer lets a producer send beyond its last confirmation (50).
    pub flow_control_window: u32,
    /// First resend of an unconfirmed message after this ("2s").
    #[serde(with = "crate::config::duration::required")]
    pub resend_interval_min: Duration,
    /// Resends back off (doubling, with jitter) up to this ("30s").
    #[serde(with = "crate::config::duration::required")]
    pub resend_interval_max: Duration,
    /// Messages a producer holds unconfirmed at most, over all its consumers (1000); a
    /// `send` beyond it is refused.
    pub buffer_size: u32,
    /// A sharded producer forgets an entity it has nothing unconfirmed for after this
    /// ("120s").
    #[serde(with = "crate::config::duration::required")]
    pub cleanup_unused_after: Duration,
    /// Producers a consumer remembers (1000).
    pub max_producers_per_consumer: u32,
}

impl Default for ReliableDeliveryConfig {
    fn default() -> Self {
        let d = DeliverySettings::default();
        ReliableDeliveryConfig {
            flow_control_window: d.flow_control_window,
            resend_interval_min: Duration::from_millis(d.resend_interval_min_ms),
            resend_interval_max: Duration::from_millis(d.resend_interval_max_ms),
            buffer_size: d.buffer_size,
            cleanup_unused_after: Duration::from_millis(d.cleanup_unused_after_ms),
            max_producers_per_consumer: d.max_producers_per_consumer,
        }
    }
}

impl ReliableDeliveryConfig {
    /// The core's settings.
    pub fn settings(&self) -> DeliverySettings {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        DeliverySettings {
            flow_control_window: self.flow_control_window,
            resend_interval_min_ms: ms(self.resend_interval_min),
            resend_interval_max_ms: ms(self.resend_interval_max),
            buffer_size: self.buffer_size,
            cleanup_unused_after_ms: ms(self.cleanup_unused_after),
            max_producers_per_consumer: self.max_producers_per_consumer,
        }
    }
}

impl ConfigSection for ReliableDeliveryConfig {
    const KEY: &'static str = "reliable-delivery";

    fn validate(&self, _config: &Config) -> Result<(), ConfigError> {
        if !(1..=100_000).contains(&self.flow_control_window) {
            return Err(ConfigError::new(
                "reliable-delivery.flow-control-window",
                "must be from 1 to 100000",
            ));
        }
        if self.resend_interval_min.is_zero() {
            return Err(ConfigError::new(
                "reliable-delivery.resend-interval-min",
                "must be above 0",
            ));
        }
        if self.resend_interval_max < self.resend_interval_min {
            return Err(ConfigError::new(
                "reliable-delivery.resend-interval-max",
                "must be at least resend-interval-min",
            ));
        }
        if !(1..=10_000_000).contains(&self.buffer_size) {
            return Err(ConfigError::new(
                "reliable-delivery.buffer-size",
                "must be from 1 to 10000000",
            ));
        }
        if !(1..=1_000_000).contains(&self.max_producers_per_consumer) {
            return Err(ConfigError::new(
                "reliable-delivery.max-producers-per-consumer",
                "must be from 1 to 1000000",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_akkas_and_bad_values_name_their_key() {
        let d = ReliableDeliveryConfig::default().settings();
        assert_eq!(d, DeliverySettings::default());
        assert_eq!(d.flow_control_window, 50);
        let config = Config::default();
        let mut c = ReliableDeliveryConfig {
            flow_control_window: 0,
            ..Default::default()
        };
        assert!(c
            .validate(&config)
            .unwrap_err()
            .to_string()
            .contains("reliable-delivery.flow-control-window"));
        c.flow_control_window = 10;
        c.resend_interval_max = Duration::from_millis(1);
        assert!(c
            .validate(&config)
            .unwrap_err()
            .to_string()
            .contains("resend-interval-max"));
    }
}
