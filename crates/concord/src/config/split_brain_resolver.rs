//! `[cluster.split-brain-resolver]`: the downing provider and its strategies.

use std::time::Duration;

use serde::Deserialize;

use super::duration;

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
