//! `[singleton]` and `[singleton-proxy]` (Akka's `akka.cluster.singleton` and
//! `akka.cluster.singleton-proxy`): the defaults of every singleton a node starts.

use std::time::Duration;

use concord_core::singleton::SingletonSettings;
use serde::{Deserialize, Serialize};

use crate::config::duration::ms;
use crate::config::{Config, ConfigSection};

/// `[singleton]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SingletonConfig {
    /// Run singletons only on members with this role ("" = any).
    pub role: String,
    /// How often the new oldest asks for the hand-over ("1s").
    #[serde(with = "crate::config::duration::required")]
    pub hand_over_retry_interval: Duration,
    /// Least number of hand-over retries (15).
    pub min_number_of_hand_over_retries: u32,
    /// Wait after a crashed oldest's removal before starting elsewhere; "off" or absent:
    /// the split brain resolver's `stable-after` when it is on, else 0.
    #[serde(with = "crate::config::duration::optional")]
    pub removal_margin: Option<Duration>,
    /// Start an instance only while holding a lease (false; a file lease in
    /// `split-brain-resolver.lease-majority.lease-directory`'s place).
    pub use_lease: bool,
    /// Retry interval for the lease ("5s").
    #[serde(with = "crate::config::duration::required")]
    pub lease_retry_interval: Duration,
}

impl Default for SingletonConfig {
    fn default() -> Self {
        let d = SingletonSettings::default();
        SingletonConfig {
            role: String::new(),
            hand_over_retry_interval: Duration::from_millis(d.hand_over_retry_interval_ms),
            min_number_of_hand_over_retries: d.min_number_of_hand_over_retries,
            removal_margin: None,
            use_lease: false,
            lease_retry_interval: Duration::from_millis(d.lease_retry_interval_ms),
        }
    }
}

/// `[singleton-proxy]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SingletonProxyConfig {
    /// How often the proxy looks for the instance ("1s").
    #[serde(with = "crate::config::duration::required")]
    pub singleton_identification_interval: Duration,
    /// Messages buffered while the instance moves (1000; 0 = none).
    pub buffer_size: usize,
}

impl Default for SingletonProxyConfig {
    fn default() -> Self {
        let d = SingletonSettings::default();
        SingletonProxyConfig {
            singleton_identification_interval: Duration::from_millis(
                d.singleton_identification_interval_ms,
            ),
            buffer_size: d.buffer_size,
        }
    }
}

impl ConfigSection for SingletonConfig {
    const KEY: &'static str = "singleton";
}

impl ConfigSection for SingletonProxyConfig {
    const KEY: &'static str = "singleton-proxy";
}

impl SingletonConfig {
    /// The settings of singleton `name` from this section and `[singleton-proxy]` (`proxy`);
    /// the removal margin from the split brain resolver's `stable-after` in `config` unless
    /// set.
    pub fn settings(
        &self,
        name: &str,
        proxy: &SingletonProxyConfig,
        config: &Config,
    ) -> SingletonSettings {
        let s = self;
        let p = proxy;
        let removal_margin_ms = config.removal_margin_ms(s.removal_margin);
        SingletonSettings {
            name: name.to_string(),
            role: (!s.role.is_empty()).then(|| s.role.clone()),
            hand_over_retry_interval_ms: ms(s.hand_over_retry_interval),
            min_number_of_hand_over_retries: s.min_number_of_hand_over_retries,
            removal_margin_ms,
            use_lease: s.use_lease,
            lease_retry_interval_ms: ms(s.lease_retry_interval),
            singleton_identification_interval_ms: ms(p.singleton_identification_interval),
            buffer_size: p.buffer_size,
        }
    }
}
