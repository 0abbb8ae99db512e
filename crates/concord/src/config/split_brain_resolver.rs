//! `[cluster.split-brain-resolver]`: the downing provider and its strategies.

use std::time::Duration;

use concord_core::split_brain_resolver::{DowningStrategy, SbrSettings};
use serde::Deserialize;

use super::duration::{self, ms};
use super::{Config, ConfigError};

/// `[cluster.split-brain-resolver.<strategy>]` with only a role.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct RoleOnlyConfig {
    /// Only members with this role count ("" = all).
    pub role: String,
}

/// `[cluster.split-brain-resolver.static-quorum]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct StaticQuorumConfig {
    /// Minimum members for a side to survive; required for static-quorum.
    pub quorum_size: Option<usize>,
    /// Only members with this role count ("" = all).
    pub role: String,
}

/// `[cluster.split-brain-resolver.keep-oldest]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct KeepOldestConfig {
    /// The oldest, cut off from all others, downs itself (true).
    pub down_if_alone: bool,
    /// Only members with this role count ("" = all).
    pub role: String,
}

impl Default for KeepOldestConfig {
    fn default() -> Self {
        KeepOldestConfig {
            down_if_alone: true,
            role: String::new(),
        }
    }
}

/// `[cluster.split-brain-resolver.lease-majority]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct LeaseMajorityConfig {
    /// Lease implementation: `"file"` (a lock file shared by processes on one host).
    pub lease_implementation: String,
    /// Lease name (default `<system>-concord-sbr`).
    pub lease_name: String,
    /// Directory of the file lease (default: the system temp directory).
    pub lease_directory: String,
    /// The minority waits this long before trying ("2s").
    #[serde(deserialize_with = "duration::de")]
    pub acquire_lease_delay_for_minority: Duration,
    /// A held lease expires after this unless renewed ("40s").
    #[serde(deserialize_with = "duration::de")]
    pub release_after: Duration,
    /// Only members with this role count ("" = all).
    pub role: String,
}

impl Default for LeaseMajorityConfig {
    fn default() -> Self {
        LeaseMajorityConfig {
            lease_implementation: "file".into(),
            lease_name: String::new(),
            lease_directory: String::new(),
            acquire_lease_delay_for_minority: Duration::from_secs(2),
            release_after: Duration::from_secs(40),
            role: String::new(),
        }
    }
}

/// `[cluster.split-brain-resolver]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SplitBrainResolverConfig {
    /// keep-majority (default), static-quorum, keep-oldest, down-all, lease-majority.
    pub active_strategy: String,
    /// Unreachability must be stable this long before a decision ("20s").
    #[serde(deserialize_with = "duration::de")]
    pub stable_after: Duration,
    /// `"on"` (3/4 of stable-after, at least 4 s), `"off"`, or a duration.
    pub down_all_when_unstable: String,
    /// `[..keep-majority]`.
    pub keep_majority: RoleOnlyConfig,
    /// `[..static-quorum]`.
    pub static_quorum: StaticQuorumConfig,
    /// `[..keep-oldest]`.
    pub keep_oldest: KeepOldestConfig,
    /// `[..lease-majority]`.
    pub lease_majority: LeaseMajorityConfig,
}

impl Default for SplitBrainResolverConfig {
    fn default() -> Self {
        SplitBrainResolverConfig {
            active_strategy: "keep-majority".into(),
            stable_after: Duration::from_secs(20),
            down_all_when_unstable: "on".into(),
            keep_majority: RoleOnlyConfig::default(),
            static_quorum: StaticQuorumConfig::default(),
            keep_oldest: KeepOldestConfig::default(),
            lease_majority: LeaseMajorityConfig::default(),
        }
    }
}

impl Config {
    /// The downing provider: `None` for `downing-provider = "none"`.
    pub fn downing(&self) -> Result<Option<SbrSettings>, ConfigError> {
        match self.cluster.downing_provider.as_str() {
            "none" | "" => return Ok(None),
            "split-brain-resolver" => {}
            other => {
                return Err(ConfigError::new(
                    "cluster.downing-provider",
                    format!("`{other}` is not one of \"split-brain-resolver\", \"none\""),
                ))
            }
        }
        let c = &self.cluster.split_brain_resolver;
        let role = |r: &str| {
            if r.is_empty() {
                None
            } else {
                Some(r.to_string())
            }
        };
        let strategy = match c.active_strategy.as_str() {
            "keep-majority" => DowningStrategy::KeepMajority { role: role(&c.keep_majority.role) },
            "static-quorum" => {
                let q = c.static_quorum.quorum_size.filter(|q| *q > 0).ok_or_else(|| {
                    ConfigError::new("cluster.split-brain-resolver.static-quorum.quorum-size", "must be set to at least 1 for static-quorum")
                })?;
                DowningStrategy::StaticQuorum { quorum_size: q, role: role(&c.static_quorum.role) }
            }
            "keep-oldest" => DowningStrategy::KeepOldest { down_if_alone: c.keep_oldest.down_if_alone, role: role(&c.keep_oldest.role) },
            "down-all" => DowningStrategy::DownAll,
            "lease-majority" => {
                if c.lease_majority.lease_implementation != "file" {
                    return Err(ConfigError::new(
                        "cluster.split-brain-resolver.lease-majority.lease-implementation",
                        format!("`{}` is not a known lease implementation (\"file\")", c.lease_majority.lease_implementation),
                    ));
                }
                DowningStrategy::LeaseMajority {
                    role: role(&c.lease_majority.role),
                    acquire_lease_delay_for_minority_ms: ms(c.lease_majority.acquire_lease_delay_for_minority),
                    release_after_ms: ms(c.lease_majority.release_after),
                }
            }
            other => {
                return Err(ConfigError::new(
                    "cluster.split-brain-resolver.active-strategy",
                    format!("`{other}` is not one of keep-majority, static-quorum, keep-oldest, down-all, lease-majority"),
                ))
            }
        };
        if c.stable_after.is_zero() {
            return Err(ConfigError::new(
                "cluster.split-brain-resolver.stable-after",
                "must be greater than zero",
            ));
        }
        let stable_after_ms = ms(c.stable_after);
        let down_all_when_unstable_ms = match c.down_all_when_unstable.trim() {
            "on" | "true" => Some(SbrSettings::derived_down_all_when_unstable_ms(
                stable_after_ms,
            )),
            "off" | "false" => None,
            d => Some(ms(humantime::parse_duration(d).map_err(|e| {
                ConfigError::new(
                    "cluster.split-brain-resolver.down-all-when-unstable",
                    format!("`{d}` is not \"on\", \"off\" or a duration: {e}"),
                )
            })?)),
        };
        Ok(Some(SbrSettings {
            strategy,
            stable_after_ms,
            down_all_when_unstable_ms,
            rules: concord_core::split_brain_resolver::SbrRules::Concord,
        }))
    }

    /// The lease name for lease-majority: `lease-name` without surrounding whitespace, or
    /// `<system>-concord-sbr` when that leaves nothing (an empty name or one of only
    /// spaces; Akka's `lease-name` is trimmed the same way).
    pub fn lease_name(&self) -> String {
        let n = self
            .cluster
            .split_brain_resolver
            .lease_majority
            .lease_name
            .trim();
        if n.is_empty() {
            format!("{}-concord-sbr", self.system)
        } else {
            n.to_string()
        }
    }
}
