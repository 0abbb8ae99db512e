//! [`PartitionTable`] (partition path → instance nodes) and [`PartitionChange`] (a
//! scheduled handoff), the two service fields of the gossip state.
//!
//! Spec: cluster-specification-original.md, the `GossipState` structure
//! (`partitions: Tree[PartitionPath, Node]`, `pending: Set[PartitionChange]`,
//! `PartitionChange { from, to, path, status }`, `PartitionChangeStatus = Awaiting |
//! Complete`) and "Partitioning" ("The partition table is only updated by the leader
//! node").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::PartitionPath;
use crate::address::UniqueAddress;

/// The partition table: for each partition path, its instance nodes in placement order
/// (the order [`place`](super::place) chose them in; the first is the oldest placement).
///
/// Invariants, kept by every constructor and by deserialization (a table from the network
/// is normalized, never rejected): no path maps to an empty list, and no node appears
/// twice in one path's list (the first occurrence is kept).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "BTreeMap<PartitionPath, Vec<UniqueAddress>>")]
#[serde(into = "BTreeMap<PartitionPath, Vec<UniqueAddress>>")]
pub struct PartitionTable {
    partitions: BTreeMap<PartitionPath, Vec<UniqueAddress>>,
}

impl PartitionTable {
    /// An empty table.
    pub fn new() -> Self {
        PartitionTable::default()
    }

    /// Sets the instance nodes of `path` (duplicates dropped, first occurrence kept); an
    /// empty list removes the path. Returns the previous instances, if any.
    pub fn insert(
        &mut self,
        path: PartitionPath,
        instances: Vec<UniqueAddress>,
    ) -> Option<Vec<UniqueAddress>> {
        let instances = dedup_keep_first(instances);
        if instances.is_empty() {
            self.partitions.remove(&path)
        } else {
            self.partitions.insert(path, instances)
        }
    }

    /// Removes `path`, returning its instances.
    pub fn remove(&mut self, path: &PartitionPath) -> Option<Vec<UniqueAddress>> {
        self.partitions.remove(path)
    }

    /// The instance nodes of `path` in placement order, or `None` if the table has none.
    pub fn instances(&self, path: &PartitionPath) -> Option<&[UniqueAddress]> {
        self.partitions.get(path).map(Vec::as_slice)
    }

    /// The paths, in sorted order.
    pub fn paths(&self) -> impl Iterator<Item = &PartitionPath> {
        self.partitions.keys()
    }

    /// `(path, instances)` pairs, in path order.
    pub fn iter(&self) -> impl Iterator<Item = (&PartitionPath, &[UniqueAddress])> {
        self.partitions.iter().map(|(p, n)| (p, n.as_slice()))
    }

    /// The paths with an instance on `node`, in sorted order.
    pub fn instances_on(&self, node: &UniqueAddress) -> Vec<PartitionPath> {
        self.partitions
            .iter()
            .filter(|(_, nodes)| nodes.contains(node))
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// The number of instances per node (nodes without instances are absent).
    pub fn instance_counts(&self) -> BTreeMap<UniqueAddress, usize> {
        let mut counts = BTreeMap::new();
        for node in self.partitions.values().flatten() {
            *counts.entry(node.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// The number of paths in the table.
    pub fn len(&self) -> usize {
        self.partitions.len()
    }

    /// Whether the table has no path.
    pub fn is_empty(&self) -> bool {
        self.partitions.is_empty()
    }

    /// The total number of instances over all paths.
    pub fn total_instances(&self) -> usize {
        self.partitions.values().map(Vec::len).sum()
    }
}

/// O(n log n): a table from the network may list many nodes per path.
fn dedup_keep_first(nodes: Vec<UniqueAddress>) -> Vec<UniqueAddress> {
    let mut seen = std::collections::BTreeSet::new();
    nodes
        .into_iter()
        .filter(|n| seen.insert(n.clone()))
        .collect()
}

impl From<BTreeMap<PartitionPath, Vec<UniqueAddress>>> for PartitionTable {
    /// Normalizes: empty lists dropped, duplicate nodes per path removed.
    fn from(map: BTreeMap<PartitionPath, Vec<UniqueAddress>>) -> Self {
        map.into_iter().collect()
    }
}

impl From<PartitionTable> for BTreeMap<PartitionPath, Vec<UniqueAddress>> {
    fn from(table: PartitionTable) -> Self {
        table.partitions
    }
}

impl FromIterator<(PartitionPath, Vec<UniqueAddress>)> for PartitionTable {
    /// Later entries for the same path replace earlier ones (as [`PartitionTable::insert`]).
    fn from_iter<I: IntoIterator<Item = (PartitionPath, Vec<UniqueAddress>)>>(iter: I) -> Self {
        let mut table = PartitionTable::new();
        for (path, nodes) in iter {
            table.insert(path, nodes);
        }
        table
    }
}

/// The state of a [`PartitionChange`] (spec: `PartitionChangeStatus = Awaiting | Complete`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PartitionChangeStatus {
    /// Scheduled by the leader; the handoff has not finished (spec handoff steps 1–3).
    Awaiting,
    /// The previous host has handed off (step 4); the leader may update the table (step 5).
    Complete,
}

/// A pending change of the partition table: an instance of `path` moves `from` a node
/// `to` another (spec: `PartitionChange { from, to, path, status }`, gossiped in the set
/// `pending`).
///
/// `from` is `None` when there is no previous host to hand off from: a new instance (the
/// demand grew, or the path is new) or a re-placement of an instance whose node has left
/// the ring (crashed or removed), which starts afresh on `to`.
///
/// Ordered by path, then `from` (`None` first), then `to`, then status — the
/// deterministic order of [`pending_changes`](super::pending_changes).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PartitionChange {
    /// The partition that moves.
    pub path: PartitionPath,
    /// The previous instance node (`N1` in the spec's handoff), if it can hand off.
    pub from: Option<UniqueAddress>,
    /// The new instance node (`N2`).
    pub to: UniqueAddress,
    /// Whether the handoff is done.
    pub status: PartitionChangeStatus,
}

impl PartitionChange {
    /// A change that has just been scheduled ([`PartitionChangeStatus::Awaiting`]).
    pub fn awaiting(path: PartitionPath, from: Option<UniqueAddress>, to: UniqueAddress) -> Self {
        PartitionChange {
            path,
            from,
            to,
            status: PartitionChangeStatus::Awaiting,
        }
    }

    /// The same change marked [`PartitionChangeStatus::Complete`].
    pub fn complete(self) -> Self {
        PartitionChange {
            status: PartitionChangeStatus::Complete,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "host", port), 1)
    }

    fn path(p: &str) -> PartitionPath {
        PartitionPath::new(p).unwrap()
    }

    #[test]
    fn accessors() {
        let mut t = PartitionTable::new();
        assert!(t.is_empty());
        t.insert(path("b"), vec![node(2), node(3)]);
        t.insert(path("a"), vec![node(3), node(1)]);
        assert_eq!(t.len(), 2);
        assert_eq!(t.total_instances(), 4);
        assert_eq!(t.instances(&path("a")), Some(&[node(3), node(1)][..]));
        assert_eq!(t.instances(&path("c")), None);
        assert_eq!(
            t.paths().cloned().collect::<Vec<_>>(),
            [path("a"), path("b")]
        );
        assert_eq!(t.instances_on(&node(3)), [path("a"), path("b")]);
        assert_eq!(t.instances_on(&node(2)), [path("b")]);
        assert!(t.instances_on(&node(9)).is_empty());
        let counts = t.instance_counts();
        assert_eq!(counts.get(&node(3)), Some(&2));
        assert_eq!(counts.get(&node(1)), Some(&1));
        assert_eq!(t.remove(&path("b")), Some(vec![node(2), node(3)]));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn insert_normalizes() {
        let mut t = PartitionTable::new();
        t.insert(path("a"), vec![node(2), node(1), node(2)]);
        assert_eq!(t.instances(&path("a")), Some(&[node(2), node(1)][..]));
        t.insert(path("a"), vec![]);
        assert!(t.is_empty());
    }

    #[test]
    fn serde_round_trips_and_normalizes() {
        let t: PartitionTable = [(path("a"), vec![node(1), node(2)])].into_iter().collect();
        let bytes = postcard::to_allocvec(&t).unwrap();
        assert_eq!(postcard::from_bytes::<PartitionTable>(&bytes).unwrap(), t);

        let mut raw = BTreeMap::new();
        raw.insert(path("a"), vec![node(1), node(1)]);
        raw.insert(path("b"), vec![]);
        let bytes = postcard::to_allocvec(&raw).unwrap();
        let back = postcard::from_bytes::<PartitionTable>(&bytes).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(back.instances(&path("a")), Some(&[node(1)][..]));
    }

    #[test]
    fn changes_order_and_complete() {
        let a = PartitionChange::awaiting(path("a"), Some(node(1)), node(2));
        let b = PartitionChange::awaiting(path("a"), None, node(3));
        let c = PartitionChange::awaiting(path("b"), None, node(1));
        let mut v = vec![c.clone(), a.clone(), b.clone()];
        v.sort();
        assert_eq!(v, [b, a.clone(), c]);
        let done = a.clone().complete();
        assert_eq!(done.status, PartitionChangeStatus::Complete);
        assert_eq!((done.path, done.from, done.to), (a.path, a.from, a.to));
        let bytes = postcard::to_allocvec(&v).unwrap();
        assert_eq!(
            postcard::from_bytes::<Vec<PartitionChange>>(&bytes).unwrap(),
            v
        );
    }
}
