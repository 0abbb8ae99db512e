//! The leader's placement of partitioned services: [`place`] computes the partition table
//! from the previous one, the ring of available nodes and the demand (instances per
//! path); [`pending_changes`] turns the difference between two tables into the handoffs the
//! leader gossips; [`demand`] evaluates the services' [`InstancePolicy`]s.
//!
//! Spec: cluster-specification-original.md, "Partitioning" — "Partitions are spread over
//! the cluster ring in a circular fashion, with each instance node in the first available
//! space ... the overlap of partitions is minimized", and after nodes join, "all instances
//! on the same physical nodes as before"; "Leader Actions" (setting the partition table,
//! scheduling handoffs as pending changes).

use std::collections::BTreeMap;

use super::{InstancePolicy, PartitionChange, PartitionPath, PartitionTable};
use crate::address::UniqueAddress;

/// The ring as [`place`] sees it: a sorted, deduplicated copy of `nodes` (by
/// [`UniqueAddress`]'s order: host, port, system, uid), so that the same set of nodes gives
/// the same ring on every node whatever order or repetitions it was given in.
pub fn sorted_ring(nodes: &[UniqueAddress]) -> Vec<UniqueAddress> {
    let mut ring = nodes.to_vec();
    ring.sort();
    ring.dedup();
    ring
}

/// A demand of `n` instances on a ring of `ring_len` nodes: at most one instance per node.
pub(super) fn capped(n: u32, ring_len: usize) -> usize {
    usize::try_from(n).map_or(ring_len, |n| n.min(ring_len))
}

/// The demand (instances per path) of the registered services on a cluster of `nodes`
/// nodes: [`InstancePolicy::instances`] of each policy, with the scaling wish of
/// `scaling` (instances, from metrics) for the paths that have one.
pub fn demand(
    policies: &BTreeMap<PartitionPath, InstancePolicy>,
    nodes: u32,
    scaling: &BTreeMap<PartitionPath, u32>,
) -> BTreeMap<PartitionPath, u32> {
    policies
        .iter()
        .map(|(path, policy)| {
            let wish = scaling.get(path).copied();
            (path.clone(), policy.instances(nodes, wish))
        })
        .collect()
}

/// The leader's placement: the partition table for `demand` (path → wanted instances,
/// the N-value) on `ring` (the available nodes, e.g. the Up members; any order, duplicates
/// allowed — a sorted, deduplicated copy is used, see [`sorted_ring`]), starting from
/// `previous` (the current table). Pure and deterministic: the same inputs give the same
/// table on every node. Never panics; an empty ring gives an empty table.
///
/// Every demanded path gets exactly `min(N, ring size)` instances, on distinct ring
/// nodes (a path with 0 instances is absent from the table). Positions below are 0-based
/// indices into the sorted ring.
///
/// **Phase 1 — stability.** For each demanded path, keep its previous instances that are
/// still on the ring, in their previous order, truncated to the demand. Paths no longer
/// demanded are dropped. Hence nodes joining never move an instance (the spec's example),
/// and a node leaving only re-places the instances it hosted.
///
/// **Phase 2 — fill (the spec's circular spread).** A cursor starts at ring position 0.
/// Paths are processed in sorted order, and the cursor carries over from one path to the
/// next. For each missing instance of a path: let `m` be the smallest instance count
/// (over all paths, phase 1 and phase 2 placements so far) among the ring nodes that do
/// not host this path; scan the ring circularly starting *at* the cursor (positions
/// `cursor, cursor + 1, …, len − 1, 0, …, cursor − 1`) and take the first node that does
/// not host this path and has count `m`; increment its count; set the cursor to the
/// position right after it (`(i + 1) mod len`). From an empty table this fills
/// consecutive nodes round the ring, wrapping to the least loaded ones, so the instance
/// counts per node differ by at most one.
///
/// Example (the spec's): 10 nodes, A, B, C with N = 4, 3, 5 give A → {1, 2, 3, 4},
/// B → {5, 6, 7}, C → {8, 9, 10, 1, 2} (nodes numbered 1.. in ring order).
///
/// Cost: O(P · R + I · R) time for P paths, R ring nodes and I instances placed in phase 2.
pub fn place(
    previous: &PartitionTable,
    ring: &[UniqueAddress],
    demand: &BTreeMap<PartitionPath, u32>,
) -> PartitionTable {
    let ring = sorted_ring(ring);
    let len = ring.len();
    let mut counts = vec![0usize; len];

    // Phase 1: keep what is still valid, in previous order.
    let mut placed: Vec<(&PartitionPath, usize, Vec<usize>)> = Vec::with_capacity(demand.len());
    for (path, &n) in demand {
        let want = capped(n, len);
        let mut kept: Vec<usize> = Vec::with_capacity(want);
        for node in previous.instances(path).unwrap_or(&[]) {
            if kept.len() >= want {
                break;
            }
            if let Ok(i) = ring.binary_search(node) {
                if !kept.contains(&i) {
                    kept.push(i);
                    counts[i] += 1;
                }
            }
        }
        placed.push((path, want, kept));
    }

    // Phase 2: fill the missing instances round the ring.
    let mut cursor = 0usize;
    for (_, want, kept) in &mut placed {
        if kept.len() >= *want {
            continue;
        }
        let mut hosts = vec![false; len];
        for &i in kept.iter() {
            hosts[i] = true;
        }
        while kept.len() < *want {
            let Some(i) = next_node(&counts, &hosts, cursor) else {
                break;
            };
            hosts[i] = true;
            counts[i] += 1;
            kept.push(i);
            cursor = (i + 1) % len;
        }
    }

    placed
        .into_iter()
        .map(|(path, _, kept)| {
            let nodes = kept.into_iter().map(|i| ring[i].clone()).collect();
            (path.clone(), nodes)
        })
        .collect()
}

/// The phase-2 choice: the first position from `cursor` (circularly) among the nodes not
/// in `hosts` with the least count; `None` if every node hosts the path.
fn next_node(counts: &[usize], hosts: &[bool], cursor: usize) -> Option<usize> {
    let len = counts.len();
    let free = |i: &usize| !hosts[*i];
    let least = (0..len).filter(free).map(|i| counts[i]).min()?;
    (0..len)
        .map(|k| (cursor + k) % len)
        .find(|i| free(i) && counts[*i] == least)
}

/// The handoffs that turn `current` into `target`, for the leader to gossip as pending
/// changes (spec: "When rebalancing is required the leader will schedule handoffs,
/// gossiping a set of pending changes").
///
/// For each path of `target`: the *departures* are its instance nodes in `current` that
/// are not in `target` and are in `live`, in `current`'s order; the *arrivals* are its
/// instance nodes in `target` that are not in `current`, in `target`'s order. Departures
/// and arrivals are paired in order, giving `from: Some(departure)`, `to: arrival`;
/// arrivals beyond the departures get `from: None` (a new instance, started afresh).
/// All changes are [`Awaiting`](super::PartitionChangeStatus::Awaiting); the result is
/// sorted by [`PartitionChange`]'s order, without duplicates.
///
/// `live` is the set of nodes that can still hand off (any order): typically the
/// Up, Leaving and Exiting members ([`super::live_nodes`]) — a superset of the ring given
/// to [`place`], since a Leaving or Exiting node is off the placement ring but hands its
/// partitions off gracefully before it is removed. A departed instance node that is not in `live` (crashed, downed,
/// removed) is skipped, so its replacement gets `from: None`.
///
/// Departures without an arrival (the demand shrank, or the path is no longer demanded)
/// yield no change: nothing has to be handed over, the leader drops them from the table.
pub fn pending_changes(
    current: &PartitionTable,
    target: &PartitionTable,
    live: &[UniqueAddress],
) -> Vec<PartitionChange> {
    let live = sorted_ring(live);
    let mut changes = Vec::new();
    for (path, arrived) in target.iter() {
        let before = current.instances(path).unwrap_or(&[]);
        let mut departures = before
            .iter()
            .filter(|n| !arrived.contains(n) && live.binary_search(n).is_ok());
        for to in arrived.iter().filter(|n| !before.contains(n)) {
            changes.push(PartitionChange::awaiting(
                path.clone(),
                departures.next().cloned(),
                to.clone(),
            ));
        }
    }
    changes.sort();
    changes.dedup();
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use crate::services::{FaultTolerance, ScalingBounds};

    /// A node whose ring position follows its port.
    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "10.0.0.1", port), 7)
    }

    fn path(p: &str) -> PartitionPath {
        PartitionPath::new(p).unwrap()
    }

    fn abc_demand() -> BTreeMap<PartitionPath, u32> {
        [(path("A"), 4), (path("B"), 3), (path("C"), 5)]
            .into_iter()
            .collect()
    }

    /// The old nodes 1..=10 (ports 10, 20, …, 100).
    fn old(i: u16) -> UniqueAddress {
        node(i * 10)
    }

    /// The 15-node ring after five nodes join right after old nodes 2, 4, 5, 7 and 8.
    fn ring15() -> Vec<UniqueAddress> {
        let mut ring: Vec<_> = (1..=10).map(old).collect();
        ring.extend([25, 45, 55, 75, 85].map(node));
        sorted_ring(&ring)
    }

    fn numbered(ring: &[UniqueAddress], numbers: &[usize]) -> Vec<UniqueAddress> {
        numbers.iter().map(|&i| ring[i - 1].clone()).collect()
    }

    #[test]
    fn spec_example_ten_nodes() {
        let ring: Vec<_> = (1..=10).map(old).collect();
        let t = place(&PartitionTable::new(), &ring, &abc_demand());
        assert_eq!(
            t.instances(&path("A")).unwrap(),
            numbered(&ring, &[1, 2, 3, 4])
        );
        assert_eq!(
            t.instances(&path("B")).unwrap(),
            numbered(&ring, &[5, 6, 7])
        );
        assert_eq!(
            t.instances(&path("C")).unwrap(),
            numbered(&ring, &[8, 9, 10, 1, 2])
        );
    }

    #[test]
    fn spec_example_five_nodes_join() {
        let ring10: Vec<_> = (1..=10).map(old).collect();
        let first = place(&PartitionTable::new(), &ring10, &abc_demand());
        let ring = ring15();
        // The ring order the spec describes: new nodes after old 2, 4, 5, 7, 8.
        let expected_order = [10, 20, 25, 30, 40, 45, 50, 55, 60, 70, 75, 80, 85, 90, 100];
        assert_eq!(ring, expected_order.map(node));
        let t = place(&first, &ring, &abc_demand());
        assert_eq!(
            t.instances(&path("A")).unwrap(),
            numbered(&ring, &[1, 2, 4, 5])
        );
        assert_eq!(
            t.instances(&path("B")).unwrap(),
            numbered(&ring, &[7, 9, 10])
        );
        assert_eq!(
            t.instances(&path("C")).unwrap(),
            numbered(&ring, &[12, 14, 15, 1, 2])
        );
        // The same physical nodes as before.
        assert_eq!(t, first);
        assert!(pending_changes(&first, &t, &ring).is_empty());
    }

    #[test]
    fn ring_order_and_duplicates_do_not_matter() {
        let mut ring: Vec<_> = (1..=10).rev().map(old).collect();
        ring.extend((1..=10).map(old));
        let sorted: Vec<_> = (1..=10).map(old).collect();
        let empty = PartitionTable::new();
        assert_eq!(
            place(&empty, &ring, &abc_demand()),
            place(&empty, &sorted, &abc_demand())
        );
    }

    #[test]
    fn degenerate_inputs() {
        let empty = PartitionTable::new();
        assert!(place(&empty, &[], &abc_demand()).is_empty());
        let ring: Vec<_> = (1..=3).map(old).collect();
        let zero: BTreeMap<_, _> = [(path("A"), 0)].into_iter().collect();
        assert!(place(&empty, &ring, &zero).is_empty());
        let huge: BTreeMap<_, _> = [(path("A"), u32::MAX)].into_iter().collect();
        let t = place(&empty, &ring, &huge);
        assert_eq!(t.instances(&path("A")).unwrap(), ring.as_slice());
        assert!(
            place(&t, &ring, &BTreeMap::new()).is_empty(),
            "undemanded paths dropped"
        );
    }

    #[test]
    fn stale_previous_table_is_repaired() {
        let ring: Vec<_> = (1..=4).map(old).collect();
        // A previous table naming a gone node, a duplicate and too many instances.
        let prev: PartitionTable = [(
            path("A"),
            vec![old(9), old(3), old(3), old(1), old(2), old(4)],
        )]
        .into_iter()
        .collect();
        let demand: BTreeMap<_, _> = [(path("A"), 2)].into_iter().collect();
        let t = place(&prev, &ring, &demand);
        assert_eq!(t.instances(&path("A")).unwrap(), [old(3), old(1)]);
    }

    #[test]
    fn crashed_node_is_replaced_on_least_loaded() {
        let ring: Vec<_> = (1..=10).map(old).collect();
        let first = place(&PartitionTable::new(), &ring, &abc_demand());
        // Node 1 hosts A and C; it crashes.
        let ring9: Vec<_> = (2..=10).map(old).collect();
        let t = place(&first, &ring9, &abc_demand());
        // A keeps 2, 3, 4 and gets the first least-loaded free node from the cursor (0):
        // counts are 2→2, 3→1, 4→1, 5..7→1, 8..10→1; the least (1) free of A: 5.
        assert_eq!(
            t.instances(&path("A")).unwrap(),
            [old(2), old(3), old(4), old(5)]
        );
        // C keeps 8, 9, 10, 2 and gets the next least-loaded free node after 5: 6.
        assert_eq!(
            t.instances(&path("C")).unwrap(),
            [old(8), old(9), old(10), old(2), old(6)]
        );
        assert_eq!(t.instances(&path("B")), first.instances(&path("B")));
        // Node 1 is not live: the re-placements start afresh.
        let changes = pending_changes(&first, &t, &ring9);
        assert_eq!(
            changes,
            [
                PartitionChange::awaiting(path("A"), None, old(5)),
                PartitionChange::awaiting(path("C"), None, old(6)),
            ]
        );
    }

    #[test]
    fn pending_changes_pair_departures_with_arrivals() {
        let live: Vec<_> = (1..=6).map(old).collect();
        let current: PartitionTable = [
            (path("A"), vec![old(1), old(2), old(3)]),
            (path("B"), vec![old(4)]),
            (path("gone"), vec![old(5)]),
        ]
        .into_iter()
        .collect();
        let target: PartitionTable = [
            (path("A"), vec![old(2), old(5), old(6), old(4)]),
            (path("B"), vec![old(1)]),
            (path("new"), vec![old(3)]),
        ]
        .into_iter()
        .collect();
        let changes = pending_changes(&current, &target, &live);
        assert_eq!(
            changes,
            [
                PartitionChange::awaiting(path("A"), None, old(4)),
                PartitionChange::awaiting(path("A"), Some(old(1)), old(5)),
                PartitionChange::awaiting(path("A"), Some(old(3)), old(6)),
                PartitionChange::awaiting(path("B"), Some(old(4)), old(1)),
                PartitionChange::awaiting(path("new"), None, old(3)),
            ]
        );
        // Without node 1 live, A's first arrival pairs with node 3 instead.
        let live: Vec<_> = (2..=6).map(old).collect();
        let changes = pending_changes(&current, &target, &live);
        assert!(changes.contains(&PartitionChange::awaiting(path("A"), Some(old(3)), old(5))));
        assert!(changes.contains(&PartitionChange::awaiting(path("A"), None, old(6))));
        assert!(pending_changes(&target, &target, &live).is_empty());
    }

    #[test]
    fn demand_evaluates_policies() {
        let bounds = ScalingBounds::new(2, 4).unwrap();
        let policies: BTreeMap<_, _> = [
            (path("fixed"), InstancePolicy::Fixed(3)),
            (
                path("ft"),
                FaultTolerance::tolerate(1).with_scaling(bounds).into(),
            ),
        ]
        .into_iter()
        .collect();
        let scaling: BTreeMap<_, _> = [(path("ft"), 9)].into_iter().collect();
        let d = demand(&policies, 5, &scaling);
        assert_eq!(d.get(&path("fixed")), Some(&3));
        assert_eq!(d.get(&path("ft")), Some(&4));
        assert_eq!(
            demand(&policies, 5, &BTreeMap::new()).get(&path("ft")),
            Some(&2)
        );
    }
}
