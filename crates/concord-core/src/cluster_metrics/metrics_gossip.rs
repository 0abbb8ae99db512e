//! [`MetricsGossip`]: every node's latest [`NodeMetrics`] as one node knows them (Akka's
//! `MetricsGossip`), decoded for readers — what routing, placement, `GET /cluster/metrics`
//! and Prometheus read. The collector keeps it in step with the gossiped, compact entries
//! ([`super::MetricsState`]). Merging two of them keeps, per node, the entry with the
//! highest sequence number, so it is commutative, associative and idempotent.

use std::collections::{BTreeMap, BTreeSet};

use super::node_metrics::NodeMetrics;
use crate::address::UniqueAddress;

/// Node → its latest metrics. Holds only members of the cluster (see
/// [`MetricsGossip::retain_members`]), so its size is bounded by the membership's.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsGossip {
    nodes: BTreeMap<UniqueAddress, NodeMetrics>,
}

impl MetricsGossip {
    /// No entries.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `entry` if it is newer (a higher sequence) than the one held for its node;
    /// returns whether it was kept.
    pub fn merge_entry(&mut self, entry: NodeMetrics) -> bool {
        match self.nodes.get(&entry.node) {
            Some(held) if held.sequence >= entry.sequence => false,
            _ => {
                self.nodes.insert(entry.node.clone(), entry);
                true
            }
        }
    }

    /// Merges every entry of `other`; returns how many were newer.
    pub fn merge(&mut self, other: &MetricsGossip) -> usize {
        other
            .nodes
            .values()
            .filter(|e| self.merge_entry((*e).clone()))
            .count()
    }

    /// Sets the entry of its node, whatever its version.
    pub(crate) fn insert(&mut self, entry: NodeMetrics) {
        self.nodes.insert(entry.node.clone(), entry);
    }

    /// Drops the entry of `node`.
    pub(crate) fn remove(&mut self, node: &UniqueAddress) {
        self.nodes.remove(node);
    }

    /// Drops the entries of the nodes `keep` refuses.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&UniqueAddress) -> bool) {
        self.nodes.retain(|n, _| keep(n));
    }

    /// Drops the entries of nodes not in `members`.
    pub fn retain_members(&mut self, members: &BTreeSet<UniqueAddress>) {
        self.nodes.retain(|n, _| members.contains(n));
    }

    /// The entry of `node`.
    pub fn get(&self, node: &UniqueAddress) -> Option<&NodeMetrics> {
        self.nodes.get(node)
    }

    /// Every entry, in address order.
    pub fn entries(&self) -> impl Iterator<Item = &NodeMetrics> {
        self.nodes.values()
    }

    /// Number of nodes with an entry.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether no node has an entry.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

impl FromIterator<NodeMetrics> for MetricsGossip {
    fn from_iter<I: IntoIterator<Item = NodeMetrics>>(iter: I) -> Self {
        let mut g = MetricsGossip::new();
        for e in iter {
            g.merge_entry(e);
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::cluster_metrics::Metric;
    use proptest::prelude::*;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "h", i), u64::from(i))
    }

    fn entry(i: u16, sequence: u64, v: f64) -> NodeMetrics {
        NodeMetrics {
            node: node(i),
            sequence,
            sampled_at_ms: sequence * 10,
            metrics: [(
                "m".to_string(),
                Metric {
                    value: v,
                    smoothed: v,
                },
            )]
            .into(),
        }
    }

    #[test]
    fn the_newest_entry_of_a_node_wins() {
        let mut g = MetricsGossip::new();
        assert!(g.merge_entry(entry(1, 2, 2.0)));
        assert!(!g.merge_entry(entry(1, 1, 1.0)));
        assert!(!g.merge_entry(entry(1, 2, 9.0)));
        assert!(g.merge_entry(entry(1, 3, 3.0)));
        assert_eq!(g.get(&node(1)).map(|e| e.sequence), Some(3));
        g.merge_entry(entry(2, 1, 1.0));
        g.retain_members(&[node(2)].into());
        assert_eq!(g.len(), 1);
        assert!(g.get(&node(1)).is_none());
    }

    fn arb_gossip() -> impl Strategy<Value = MetricsGossip> {
        proptest::collection::vec((0u16..6, 1u64..5), 0..12).prop_map(|v| {
            v.into_iter()
                // The value is a function of (node, sequence): one sample, one value.
                .map(|(n, s)| entry(n, s, f64::from(n) * 100.0 + s as f64))
                .collect()
        })
    }

    proptest! {
        #[test]
        fn merge_is_commutative_associative_and_idempotent(
            a in arb_gossip(), b in arb_gossip(), c in arb_gossip(),
        ) {
            let merged = |x: &MetricsGossip, y: &MetricsGossip| {
                let mut m = x.clone();
                m.merge(y);
                m
            };
            prop_assert_eq!(merged(&a, &b), merged(&b, &a));
            prop_assert_eq!(merged(&merged(&a, &b), &c), merged(&a, &merged(&b, &c)));
            prop_assert_eq!(merged(&a, &a), a.clone());
            let mut twice = merged(&a, &b);
            prop_assert_eq!(twice.merge(&b), 0);
        }
    }
}
