//! `[testkit]`: test and chaos tooling.

use serde::Deserialize;

/// `[testkit]`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct TestkitConfig {
    /// Allow injecting link faults over the management API (off).
    pub fault_injection: bool,
}
