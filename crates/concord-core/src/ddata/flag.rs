//! [`Flag`]: a boolean that starts false and, once switched on, stays on (Akka `Flag`).

use super::replicated_data::{DeltaReplicatedData, ReplicatedData};

/// A flag that can only be switched on.
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Flag {
    enabled: bool,
    #[serde(skip)]
    changed: bool,
}

impl PartialEq for Flag {
    fn eq(&self, other: &Self) -> bool {
        self.enabled == other.enabled
    }
}

impl Eq for Flag {}

impl Flag {
    /// A flag that is off.
    pub fn new() -> Self {
        Self::default()
    }

    /// A flag with this value (a decoded value).
    pub fn with_value(enabled: bool) -> Self {
        Flag {
            enabled,
            changed: false,
        }
    }

    /// Whether it is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Switches it on.
    pub fn switch_on(&mut self) {
        if !self.enabled {
            self.enabled = true;
            self.changed = true;
        }
    }
}

impl ReplicatedData for Flag {
    fn merge(&mut self, other: &Self) {
        self.enabled |= other.enabled;
    }
}

impl DeltaReplicatedData for Flag {
    type Delta = Flag;

    fn take_delta(&mut self) -> Option<Flag> {
        std::mem::take(&mut self.changed).then(|| Flag::with_value(self.enabled))
    }

    fn merge_delta(&mut self, delta: &Flag) {
        self.merge(delta);
    }
}

// A flag holds no per-replica entries.
no_replica_entries!([] Flag);
