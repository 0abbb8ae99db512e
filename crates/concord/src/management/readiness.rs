//! [`ReadinessChecks`]: named conditions a node must meet before `GET /ready` answers 200,
//! besides being an Up member (Akka Management's `readiness-checks`): an application
//! registers one for what it must have before it takes traffic — a producer started, a
//! cache warmed — so that a load balancer or Kubernetes' readiness gate sends nothing to
//! a node that would only make its callers wait.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The node's readiness checks; clones share them. Give them to the node with
/// [`crate::node::NodeBuilder::readiness_checks`].
#[derive(Clone, Debug, Default)]
pub struct ReadinessChecks {
    checks: Arc<Mutex<BTreeMap<String, bool>>>,
}

/// One registered check; [`ReadinessCheck::set`] says whether it is met. Dropping it
/// leaves the check as it was last set.
#[derive(Clone, Debug)]
pub struct ReadinessCheck {
    name: String,
    checks: ReadinessChecks,
}

impl ReadinessChecks {
    /// No checks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the check `name`, not met until [`ReadinessCheck::set`]`(true)` (a name
    /// registered again starts over, not met).
    pub fn register(&self, name: impl Into<String>) -> ReadinessCheck {
        let name = name.into();
        self.lock().insert(name.clone(), false);
        ReadinessCheck {
            name,
            checks: self.clone(),
        }
    }

    /// The names of the checks not met, in order.
    pub fn unmet(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, met)| !**met)
            .map(|(n, _)| n.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        self.checks.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ReadinessCheck {
    /// Whether the check is met.
    pub fn set(&self, met: bool) {
        self.checks.lock().insert(self.name.clone(), met);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_is_unmet_until_set_and_again_when_unset() {
        let checks = ReadinessChecks::new();
        assert!(checks.unmet().is_empty());
        let producer = checks.register("producer");
        let cache = checks.register("cache");
        assert_eq!(checks.unmet(), ["cache", "producer"]);
        producer.set(true);
        assert_eq!(checks.unmet(), ["cache"]);
        cache.set(true);
        assert!(checks.unmet().is_empty());
        producer.set(false);
        assert_eq!(checks.unmet(), ["producer"]);
    }
}
