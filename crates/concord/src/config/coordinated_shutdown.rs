//! `[coordinated-shutdown]`: phase timeouts (Akka `akka.coordinated-shutdown`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::duration;
use super::{Config, ConfigError};
use crate::coordinated_shutdown::{CoordinatedShutdownSettings, Phase};

/// `[coordinated-shutdown]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct CoordinatedShutdownConfig {
    /// Timeout of a phase without one of its own ("5s").
    #[serde(deserialize_with = "duration::de")]
    pub default_phase_timeout: Duration,
    /// `[coordinated-shutdown.phases.<phase>] timeout = "10s"`; phases are named as in
    /// Akka (`cluster-exiting`, ...).
    pub phases: BTreeMap<String, PhaseConfig>,
}

impl Default for CoordinatedShutdownConfig {
    fn default() -> Self {
        CoordinatedShutdownConfig {
            default_phase_timeout: Duration::from_secs(5),
            phases: BTreeMap::new(),
        }
    }
}

/// `[coordinated-shutdown.phases.<phase>]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct PhaseConfig {
    /// The phase's timeout.
    #[serde(deserialize_with = "duration::de")]
    pub timeout: Duration,
}

impl Config {
    /// The coordinated shutdown's settings (phase names checked by `validate`).
    pub fn coordinated_shutdown_settings(&self) -> CoordinatedShutdownSettings {
        let c = &self.coordinated_shutdown;
        CoordinatedShutdownSettings {
            default_phase_timeout: c.default_phase_timeout,
            phase_timeouts: c
                .phases
                .iter()
                .filter_map(|(name, p)| Phase::from_name(name).map(|ph| (ph, p.timeout)))
                .collect(),
        }
    }

    pub(super) fn validate_coordinated_shutdown(&self) -> Result<(), ConfigError> {
        let c = &self.coordinated_shutdown;
        if c.default_phase_timeout.is_zero() {
            return Err(ConfigError::new(
                "coordinated-shutdown.default-phase-timeout",
                "must be greater than zero",
            ));
        }
        for (name, p) in &c.phases {
            let key = format!("coordinated-shutdown.phases.{name}");
            if Phase::from_name(name).is_none() {
                return Err(ConfigError::new(
                    key,
                    format!(
                        "unknown phase; phases: {}",
                        Phase::ALL.map(Phase::name).join(", ")
                    ),
                ));
            }
            if p.timeout.is_zero() {
                return Err(ConfigError::new(
                    format!("{key}.timeout"),
                    "must be greater than zero",
                ));
            }
        }
        Ok(())
    }
}
