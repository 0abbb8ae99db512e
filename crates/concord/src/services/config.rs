//! `[services]`: partitioned services' timings and limits (docs/SERVICES.md).

use std::time::Duration;

use concord_core::services::ServicesSettings;
use serde::{Deserialize, Serialize};

use crate::config::{Config, ConfigError, ConfigSection};

/// Where the leader places instances.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The spec's ring placement only.
    Ring,
    /// Ring placement, then one move per step off a node whose load (cluster metrics,
    /// `mix` selector: 1 − capacity) exceeds the mean by more than `load-threshold`.
    LoadAware,
}

/// `[services]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ServicesConfig {
    /// State gossip, reports to the leader and handoff retries ("1s").
    #[serde(with = "crate::config::duration::required")]
    pub gossip_interval: Duration,
    /// How long messages held for order wait for their marker, and a handed-off path
    /// forwards late messages ("10s").
    #[serde(with = "crate::config::duration::required")]
    pub handoff_timeout: Duration,
    /// Messages buffered on this node at most, all paths together (10000).
    pub buffer_size: usize,
    /// Services one node may register (1000).
    pub max_services: usize,
    /// Messages waiting for one local instance (1000); beyond, messages are dropped and
    /// counted.
    pub mailbox_size: usize,
    /// Asks this node may have waiting for an answer (10000); one more is refused.
    pub max_pending_asks: usize,
    /// Mean mailbox depth above which a path counts as busy (100 messages).
    pub scale_up_depth: u32,
    /// Gossip intervals busy (or idle) in a row before the scaling wish moves (3).
    pub scale_sustained_rounds: u32,
    /// `ring` (default) or `load-aware`.
    pub placement: Placement,
    /// Load-aware placement's threshold above the mean load (0.2, in capacity units 0–1).
    pub load_threshold: f64,
    /// How long a leaving node waits for its instances to be handed off ("30s").
    #[serde(with = "crate::config::duration::required")]
    pub drain_timeout: Duration,
    /// How long the leader leaves the paths of a node it saw Down or removed as they are
    /// before it places that node's instances elsewhere (other paths keep moving); "off"
    /// or absent:
    /// the split brain resolver's `stable-after` when it is on, else 0 (as the singleton's
    /// `removal-margin`).
    #[serde(with = "crate::config::duration::optional")]
    pub removal_margin: Option<Duration>,
}

impl Default for ServicesConfig {
    fn default() -> Self {
        ServicesConfig {
            gossip_interval: Duration::from_secs(1),
            handoff_timeout: Duration::from_secs(10),
            buffer_size: 10_000,
            max_services: 1_000,
            mailbox_size: 1_000,
            max_pending_asks: 10_000,
            scale_up_depth: 100,
            scale_sustained_rounds: 3,
            placement: Placement::Ring,
            load_threshold: 0.2,
            drain_timeout: Duration::from_secs(30),
            removal_margin: None,
        }
    }
}

impl ServicesConfig {
    /// The machine's settings (`config`: the node's, for the split brain resolver's
    /// `stable-after`, the default removal margin).
    pub fn settings(&self, config: &Config) -> ServicesSettings {
        let ms = crate::config::duration::ms;
        ServicesSettings {
            removal_margin_ms: config.removal_margin_ms(self.removal_margin),
            gossip_interval_ms: ms(self.gossip_interval),
            handoff_timeout_ms: ms(self.handoff_timeout),
            buffer_size: self.buffer_size,
            max_services: self.max_services,
            scale_up_depth: self.scale_up_depth,
            scale_sustained_rounds: self.scale_sustained_rounds,
            load_threshold: (self.placement == Placement::LoadAware).then_some(self.load_threshold),
            ..ServicesSettings::default()
        }
    }
}

impl ConfigSection for ServicesConfig {
    const KEY: &'static str = "services";

    fn validate(&self, _config: &Config) -> Result<(), ConfigError> {
        let range = |key: &str, v: usize| {
            if (1..=1_000_000).contains(&v) {
                Ok(())
            } else {
                Err(ConfigError::new(key, "must be from 1 to 1000000"))
            }
        };
        range("services.buffer-size", self.buffer_size)?;
        range("services.max-services", self.max_services)?;
        range("services.mailbox-size", self.mailbox_size)?;
        range("services.max-pending-asks", self.max_pending_asks)?;
        if self.gossip_interval < Duration::from_millis(10) {
            return Err(ConfigError::new(
                "services.gossip-interval",
                "must be at least 10ms",
            ));
        }
        if self.handoff_timeout < self.gossip_interval {
            return Err(ConfigError::new(
                "services.handoff-timeout",
                "must be at least services.gossip-interval",
            ));
        }
        if !(self.load_threshold.is_finite() && (0.0..=1.0).contains(&self.load_threshold)) {
            return Err(ConfigError::new(
                "services.load-threshold",
                "must be from 0.0 to 1.0",
            ));
        }
        if self.scale_sustained_rounds == 0 {
            return Err(ConfigError::new(
                "services.scale-sustained-rounds",
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_nonsense_is_refused() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(
            c.section::<ServicesConfig>().unwrap(),
            ServicesConfig::default()
        );
        let c = Config::from_toml("[services]\nplacement = \"load-aware\"\nload-threshold = 0.3\n")
            .unwrap();
        let s = c.section::<ServicesConfig>().unwrap().settings(&c);
        assert_eq!(s.load_threshold, Some(0.3));
        for bad in [
            "[services]\nbuffer-size = 0\n",
            "[services]\nload-threshold = 2.0\n",
            "[services]\ngossip-interval = \"1ms\"\n",
            "[services]\nplacement = \"best\"\n",
        ] {
            assert!(
                Config::from_toml(bad)
                    .and_then(|c| c.section::<ServicesConfig>())
                    .is_err(),
                "{bad}"
            );
        }
    }
}
