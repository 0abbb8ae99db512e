//! `[cluster-metrics]`: the settings of the cluster-metrics layer (docs/CLUSTER_METRICS.md).
//! Defaults are Akka's (`akka.cluster.metrics.collector`).

use std::time::Duration;

use concord_core::cluster_metrics::ClusterMetricsSettings;
use serde::{Deserialize, Serialize};

use crate::config::duration::ms;
use crate::config::{Config, ConfigError, ConfigSection};

/// Samples between two refreshes of a node's entry: 30 s with Akka's 3 s interval, and
/// proportionally sooner with faster sampling (tests).
const SAMPLES_PER_REFRESH: u64 = 10;

/// `[cluster-metrics]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ClusterMetricsConfig {
    /// Sample and spread metrics (true). Off, the node runs no cluster-metrics layer (no
    /// `GET /cluster/metrics`), and load-aware placement and adaptive routing see every
    /// node as equal.
    pub enabled: bool,
    /// How often a node samples its metrics ("3s").
    #[serde(with = "crate::config::duration::required")]
    pub sample_interval: Duration,
    /// How often a node starts a gossip round with one random member ("3s"): it sends a
    /// digest of the versions it holds, and the two exchange only the entries one of them
    /// lacks. (A node publishes a new version of its own entry when a value moved past its
    /// dead band, and at least every ten samples: a refresh.)
    #[serde(with = "crate::config::duration::required")]
    pub gossip_interval: Duration,
    /// The moving averages' half-life ("12s"; "0s": no smoothing).
    #[serde(with = "crate::config::duration::required")]
    pub moving_average_half_life: Duration,
    /// Delay before the first sample and gossip ("1s").
    #[serde(with = "crate::config::duration::required")]
    pub periodic_tasks_initial_delay: Duration,
}

impl Default for ClusterMetricsConfig {
    fn default() -> Self {
        let d = ClusterMetricsSettings::default();
        ClusterMetricsConfig {
            enabled: true,
            sample_interval: Duration::from_millis(d.sample_interval_ms),
            gossip_interval: Duration::from_millis(d.gossip_interval_ms),
            moving_average_half_life: Duration::from_millis(d.moving_average_half_life_ms),
            periodic_tasks_initial_delay: Duration::from_millis(d.periodic_tasks_initial_delay_ms),
        }
    }
}

impl ClusterMetricsConfig {
    /// The core's settings.
    pub fn settings(&self) -> ClusterMetricsSettings {
        ClusterMetricsSettings {
            sample_interval_ms: ms(self.sample_interval),
            gossip_interval_ms: ms(self.gossip_interval),
            moving_average_half_life_ms: ms(self.moving_average_half_life),
            periodic_tasks_initial_delay_ms: ms(self.periodic_tasks_initial_delay),
            refresh_interval_ms: ms(self.sample_interval).saturating_mul(SAMPLES_PER_REFRESH),
        }
    }
}

impl ConfigSection for ClusterMetricsConfig {
    const KEY: &'static str = "cluster-metrics";

    fn validate(&self, _config: &Config) -> Result<(), ConfigError> {
        for (key, d) in [
            ("cluster-metrics.sample-interval", self.sample_interval),
            ("cluster-metrics.gossip-interval", self.gossip_interval),
        ] {
            if d < Duration::from_millis(10) || d > Duration::from_secs(3600) {
                return Err(ConfigError::new(key, "must be from 10ms to 1h"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_akkas_and_nonsense_is_refused() {
        let c = Config::from_toml("").unwrap();
        let s = c.section::<ClusterMetricsConfig>().unwrap();
        assert!(s.enabled);
        assert_eq!(s.settings(), ClusterMetricsSettings::default());
        let c = Config::from_toml("[cluster-metrics]\ngossip-interval = \"0s\"\n").unwrap();
        let e = c.section::<ClusterMetricsConfig>().unwrap_err().to_string();
        assert!(e.contains("cluster-metrics.gossip-interval"), "{e}");
        let c = Config::from_toml("[cluster-metrics]\nsample-intervl = \"1s\"\n").unwrap();
        assert!(c.section::<ClusterMetricsConfig>().is_err());
    }
}
