//! [`ServicesState`]: the partition table and its pending changes as the leader last wrote
//! them, versioned so that every node converges on the newest (spec:
//! cluster-specification-original.md, `GossipState.partitions` and `GossipState.pending`;
//! "The partition table is only updated by the leader node").
//!
//! Concord gossips this state in the partitioned-services protocol rather than inside the
//! membership gossip (one machine per protocol, DESIGN.md §3), with the same rule: only the
//! leader writes it. Each write raises `version` and names the writer; a node keeps the
//! state with the highest `(version, writer)`, so two leaders of a split cluster that both
//! wrote version `v` converge on the one with the higher address after the heal, and the
//! next leader step repairs whatever that table lacks.

use serde::{Deserialize, Serialize};

use super::{PartitionChange, PartitionPath, PartitionTable};
use crate::address::UniqueAddress;

/// The replicated services state; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicesState {
    /// Raised by one on each write (0: never written).
    pub version: u64,
    /// The leader that wrote this version (`None` before the first write).
    pub writer: Option<UniqueAddress>,
    /// Path → instance nodes.
    pub table: PartitionTable,
    /// Scheduled handoffs, sorted, at most one per path.
    pub pending: Vec<PartitionChange>,
}

impl ServicesState {
    /// Whether this state is newer than `other`: a higher `(version, writer)`.
    pub fn supersedes(&self, other: &ServicesState) -> bool {
        (self.version, &self.writer) > (other.version, &other.writer)
    }

    /// The pending change of `path`, if any.
    pub fn pending_for(&self, path: &PartitionPath) -> Option<&PartitionChange> {
        self.pending.iter().find(|c| &c.path == path)
    }

    /// The digest other nodes compare against theirs.
    pub fn digest(&self) -> (u64, Option<UniqueAddress>) {
        (self.version, self.writer.clone())
    }

    /// The number of distinct paths in the table and the pending changes (what a receiver
    /// bounds by `max-services`).
    pub fn paths(&self) -> usize {
        let mut paths: std::collections::BTreeSet<&PartitionPath> = self.table.paths().collect();
        paths.extend(self.pending.iter().map(|c| &c.path));
        paths.len()
    }

    /// Instances in the table plus pending changes.
    pub fn entries(&self) -> usize {
        self.table.total_instances() + self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "h", port), 1)
    }

    #[test]
    fn newer_is_the_higher_version_then_the_higher_writer() {
        let a = ServicesState {
            version: 2,
            writer: Some(node(1)),
            ..ServicesState::default()
        };
        let b = ServicesState {
            version: 2,
            writer: Some(node(2)),
            ..ServicesState::default()
        };
        let c = ServicesState {
            version: 3,
            writer: Some(node(1)),
            ..ServicesState::default()
        };
        assert!(b.supersedes(&a) && !a.supersedes(&b));
        assert!(c.supersedes(&b));
        assert!(!a.supersedes(&a));
        assert!(a.supersedes(&ServicesState::default()));
    }
}
