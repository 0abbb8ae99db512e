//! [`HeartbeatNodeRing`]: who sends heartbeats to whom.
//!
//! Spec: cluster-specification.md, "Failure Detector" — each node is monitored by a few
//! (`monitored-by-nr-of-members`, default 5 in the spec) neighbours picked from a ring
//! ordered by a hash of the node identity, so monitoring crosses racks, and the order is
//! the same on all nodes, which ensures full coverage. Akka `HeartbeatNodeRing`.

use std::collections::BTreeSet;

use crate::address::UniqueAddress;

/// The heartbeat ring of one node.
#[derive(Clone, Debug)]
pub struct HeartbeatNodeRing {
    self_address: UniqueAddress,
    /// Ring order: (stable hash, node).
    ring: Vec<(u64, UniqueAddress)>,
    unreachable: BTreeSet<UniqueAddress>,
    monitored_by_nr_of_members: usize,
}

impl HeartbeatNodeRing {
    /// Builds the ring of `nodes` (self is added if missing). `unreachable` nodes are
    /// skipped when counting monitors, but kept as receivers when they lie between, so
    /// their recovery is still noticed.
    pub fn new(
        self_address: UniqueAddress,
        nodes: impl IntoIterator<Item = UniqueAddress>,
        unreachable: BTreeSet<UniqueAddress>,
        monitored_by_nr_of_members: usize,
    ) -> Self {
        let mut set: BTreeSet<UniqueAddress> = nodes.into_iter().collect();
        set.insert(self_address.clone());
        let mut ring: Vec<(u64, UniqueAddress)> =
            set.into_iter().map(|n| (n.stable_hash(), n)).collect();
        ring.sort();
        HeartbeatNodeRing {
            self_address,
            ring,
            unreachable,
            monitored_by_nr_of_members: monitored_by_nr_of_members.max(1),
        }
    }

    /// Number of nodes in the ring (self included).
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// True if the ring holds only self.
    pub fn is_empty(&self) -> bool {
        self.ring.len() <= 1
    }

    /// The nodes `sender` sends heartbeats to: walking the ring clockwise from `sender`,
    /// take nodes until `monitored-by-nr-of-members` reachable ones are taken; unreachable
    /// nodes met on the way are included too while fewer than `monitored-by-nr-of-members`
    /// receivers are taken (Akka's `HeartbeatNodeRing`). With fewer nodes than that,
    /// everyone else.
    pub fn receivers(&self, sender: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        let n = self.ring.len();
        let mut out = BTreeSet::new();
        if n <= 1 {
            return out;
        }
        if n - 1 <= self.monitored_by_nr_of_members {
            return self
                .ring
                .iter()
                .filter(|(_, a)| a != sender)
                .map(|(_, a)| a.clone())
                .collect();
        }
        let start = match self.ring.iter().position(|(_, a)| a == sender) {
            Some(i) => i,
            None => self
                .ring
                .partition_point(|(h, _)| *h < sender.stable_hash())
                .wrapping_sub(1),
        };
        let mut reachable_taken = 0;
        for step in 1..n {
            let (_, node) = &self.ring[(start.wrapping_add(step)) % n];
            if node == sender {
                continue;
            }
            if self.unreachable.contains(node) {
                // Keep watching unreachable nodes in between (to see them come back),
                // until `monitored-by-nr-of-members` receivers are taken.
                if out.len() < self.monitored_by_nr_of_members {
                    out.insert(node.clone());
                }
            } else {
                out.insert(node.clone());
                reachable_taken += 1;
                if reachable_taken >= self.monitored_by_nr_of_members {
                    break;
                }
            }
        }
        out
    }

    /// The nodes this node sends heartbeats to.
    pub fn my_receivers(&self) -> BTreeSet<UniqueAddress> {
        self.receivers(&self.self_address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use std::collections::BTreeMap;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "10.0.0.1", 2550 + i), u64::from(i) * 31)
    }

    #[test]
    fn small_clusters_monitor_everyone() {
        let nodes: Vec<_> = (0..4).map(n).collect();
        let ring = HeartbeatNodeRing::new(n(0), nodes, BTreeSet::new(), 5);
        assert_eq!(ring.my_receivers().len(), 3);
        assert!(!ring.my_receivers().contains(&n(0)));
    }

    #[test]
    fn every_node_is_monitored_by_exactly_k_others_and_the_ring_is_the_same_everywhere() {
        let nodes: Vec<_> = (0..20).map(n).collect();
        let k = 5;
        let mut monitored_by: BTreeMap<UniqueAddress, usize> = BTreeMap::new();
        for me in &nodes {
            let ring = HeartbeatNodeRing::new(me.clone(), nodes.clone(), BTreeSet::new(), k);
            let other_view = HeartbeatNodeRing::new(n(7), nodes.clone(), BTreeSet::new(), k);
            assert_eq!(
                ring.receivers(me),
                other_view.receivers(me),
                "same on all nodes"
            );
            let r = ring.my_receivers();
            assert_eq!(r.len(), k);
            for x in r {
                *monitored_by.entry(x).or_default() += 1;
            }
        }
        assert_eq!(monitored_by.len(), 20, "full coverage");
        assert!(monitored_by.values().all(|c| *c == k));
    }

    #[test]
    fn unreachable_receivers_stop_once_k_receivers_are_taken() {
        let nodes: Vec<_> = (0..20).map(n).collect();
        for keep in 0..20u16 {
            // Everyone unreachable except four nodes somewhere on the ring.
            let reachable: BTreeSet<_> = (0..4).map(|i| n((keep + i * 5) % 20)).collect();
            let unreachable: BTreeSet<_> = nodes
                .iter()
                .filter(|x| !reachable.contains(*x) && **x != n(0))
                .cloned()
                .collect();
            let ring = HeartbeatNodeRing::new(n(0), nodes.clone(), unreachable.clone(), 3);
            let r = ring.my_receivers();
            let unreachable_taken = r.iter().filter(|x| unreachable.contains(*x)).count();
            let reachable_taken = r.len() - unreachable_taken;
            assert!(
                unreachable_taken <= 3,
                "{unreachable_taken} unreachable receivers"
            );
            assert_eq!(
                reachable_taken,
                reachable.iter().filter(|x| **x != n(0)).count().min(3)
            );
        }
    }

    #[test]
    fn unreachable_neighbours_do_not_count_towards_k() {
        let nodes: Vec<_> = (0..20).map(n).collect();
        let ring = HeartbeatNodeRing::new(n(0), nodes.clone(), BTreeSet::new(), 3);
        let first: Vec<_> = ring.my_receivers().into_iter().collect();
        let unreachable: BTreeSet<_> = first.iter().take(1).cloned().collect();
        let ring2 = HeartbeatNodeRing::new(n(0), nodes, unreachable.clone(), 3);
        let r2 = ring2.my_receivers();
        let reachable_count = r2.iter().filter(|x| !unreachable.contains(*x)).count();
        assert_eq!(reachable_count, 3);
    }
}
