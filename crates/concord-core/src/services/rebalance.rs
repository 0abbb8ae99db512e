//! Load-aware rebalancing of partitioned services (opt-in; fed by cluster metrics).
//!
//! Spec: cluster-specification-original.md, "Leader Actions" — "Automatic rebalancing
//! based on runtime metrics in the system (such as CPU, RAM, Garbage Collection, mailbox
//! depth etc.)"; "Partitioning" — "Each instance can be assigned to any node and the more
//! advanced load balancing algorithms will make use of this". The moves it makes become
//! pending changes ([`pending_changes`](super::pending_changes)) carried out by handoff.

use std::collections::BTreeMap;

use super::placement::{place, sorted_ring};
use super::{PartitionPath, PartitionTable};
use crate::address::UniqueAddress;

/// Moves instances off overloaded nodes: at most `max_moves` instances, each from a node
/// whose load exceeds the mean load of the ring by more than `threshold` to the
/// least-loaded ring node that does not host that path. Pure and deterministic.
///
/// - `table` is first repaired with [`place`]`(table, ring, demand)` (instances on nodes
///   off the ring re-placed, demand applied); that repair is not counted as a move. The
///   result therefore keeps `place`'s invariants: exactly `min(N, ring size)` instances
///   per demanded path, all on the ring, never two of one path on one node.
/// - `ring`: the available nodes, any order, duplicates allowed (see [`sorted_ring`]).
/// - `load`: one figure per node, larger = busier, in any consistent unit (e.g. a CPU
///   fraction or a mailbox-depth EWMA). Ring nodes missing from `load`, or whose value is
///   negative or not finite, count as the mean of the valid figures of ring nodes; entries
///   for nodes off the ring are ignored. With no valid figure nothing moves.
/// - `threshold`: in the unit of `load`; a node is overloaded when
///   `load > mean + threshold` (NaN: nothing moves).
///
/// Each step picks the most loaded overloaded node that has a movable instance (ties by
/// ring order), and on it the first path (sorted order) whose least-loaded non-hosting
/// node `t` (ties by ring order) would end up below it: with the node's *share*
/// `s = load / instances on it` (an estimate of one instance's load) the move is made only
/// if `load(t) + s < load(source)`. The moved instance takes the source's place in the
/// path's list, `s` is moved from the source's load to `t`'s, and that instance is not
/// moved again in this call, so the call ends after at most one move per instance.
///
/// Cost: O(M · R · (log R + P · R)) for M moves, R ring nodes and P paths.
pub fn rebalance(
    table: &PartitionTable,
    ring: &[UniqueAddress],
    demand: &BTreeMap<PartitionPath, u32>,
    load: &BTreeMap<UniqueAddress, f64>,
    threshold: f64,
    max_moves: usize,
) -> PartitionTable {
    let placed = place(table, ring, demand);
    let ring = sorted_ring(ring);
    if ring.is_empty() || max_moves == 0 {
        return placed;
    }
    let Some(mut loads) = ring_loads(&ring, load) else {
        return placed;
    };
    let mean = loads.iter().sum::<f64>() / loads.len() as f64;

    // (path, ring positions of its instances, whether each slot has moved in this call).
    let mut slots: Vec<(PartitionPath, Vec<usize>, Vec<bool>)> = Vec::with_capacity(placed.len());
    let mut counts = vec![0usize; ring.len()];
    for (path, nodes) in placed.iter() {
        let positions: Vec<usize> = nodes
            .iter()
            .filter_map(|n| ring.binary_search(n).ok())
            .collect();
        for &i in &positions {
            counts[i] += 1;
        }
        let moved = vec![false; positions.len()];
        slots.push((path.clone(), positions, moved));
    }

    let mut moves = 0;
    while moves < max_moves {
        let Some((source, path_index, slot, target, share)) =
            next_move(&slots, &loads, &counts, mean, threshold)
        else {
            break;
        };
        let (_, positions, moved) = &mut slots[path_index];
        positions[slot] = target;
        moved[slot] = true;
        counts[source] -= 1;
        counts[target] += 1;
        loads[source] -= share;
        loads[target] += share;
        moves += 1;
    }

    slots
        .into_iter()
        .map(|(path, positions, _)| {
            let nodes = positions.into_iter().map(|i| ring[i].clone()).collect();
            (path, nodes)
        })
        .collect()
}

/// The load of each ring position; invalid or missing figures count as the mean of the
/// valid ones. `None` if no ring node has a valid figure.
fn ring_loads(ring: &[UniqueAddress], load: &BTreeMap<UniqueAddress, f64>) -> Option<Vec<f64>> {
    let valid = |n: &UniqueAddress| load.get(n).copied().filter(|l| l.is_finite() && *l >= 0.0);
    let known: Vec<f64> = ring.iter().filter_map(valid).collect();
    if known.is_empty() {
        return None;
    }
    let mean = known.iter().sum::<f64>() / known.len() as f64;
    Some(ring.iter().map(|n| valid(n).unwrap_or(mean)).collect())
}

/// The next move `(source, path index, slot, target, share)`, if any; see [`rebalance`].
fn next_move(
    slots: &[(PartitionPath, Vec<usize>, Vec<bool>)],
    loads: &[f64],
    counts: &[usize],
    mean: f64,
    threshold: f64,
) -> Option<(usize, usize, usize, usize, f64)> {
    let mut sources: Vec<usize> = (0..loads.len())
        .filter(|&i| counts[i] > 0 && loads[i] > mean + threshold)
        .collect();
    // Most loaded first; the sort is stable, so ties stay in ring order.
    sources.sort_by(|&a, &b| loads[b].total_cmp(&loads[a]));
    for source in sources {
        let share = loads[source] / counts[source] as f64;
        for (path_index, (_, positions, moved)) in slots.iter().enumerate() {
            let Some(slot) = positions.iter().position(|&i| i == source) else {
                continue;
            };
            if moved[slot] {
                continue;
            }
            let target = (0..loads.len())
                .filter(|i| !positions.contains(i))
                .min_by(|&a, &b| loads[a].total_cmp(&loads[b]));
            if let Some(target) = target {
                if loads[target] + share < loads[source] {
                    return Some((source, path_index, slot, target, share));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "10.0.0.1", 1000 + i), 3)
    }

    fn path(p: &str) -> PartitionPath {
        PartitionPath::new(p).unwrap()
    }

    fn ring(n: u16) -> Vec<UniqueAddress> {
        (1..=n).map(node).collect()
    }

    fn loads(pairs: &[(u16, f64)]) -> BTreeMap<UniqueAddress, f64> {
        pairs.iter().map(|&(i, l)| (node(i), l)).collect()
    }

    /// A table with paths p0..pk all on `host`.
    fn all_on(host: u16, k: usize) -> (PartitionTable, BTreeMap<PartitionPath, u32>) {
        let table = (0..k)
            .map(|j| (path(&format!("p{j}")), vec![node(host)]))
            .collect();
        let demand = (0..k).map(|j| (path(&format!("p{j}")), 1)).collect();
        (table, demand)
    }

    #[test]
    fn moves_from_hot_to_coolest() {
        let (table, demand) = all_on(1, 4);
        let load = loads(&[(1, 0.9), (2, 0.1), (3, 0.3)]);
        let t = rebalance(&table, &ring(3), &demand, &load, 0.1, 10);
        // Share 0.225: p0 → 2 (0.1 → 0.325, 1 → 0.675); p1 → 3 (0.3 → 0.525, 1 → 0.45);
        // then 1 (0.45) is not above mean 0.433 + 0.1: stop.
        assert_eq!(t.instances(&path("p0")).unwrap(), [node(2)]);
        assert_eq!(t.instances(&path("p1")).unwrap(), [node(3)]);
        assert_eq!(t.instances(&path("p2")).unwrap(), [node(1)]);
        assert_eq!(t.instances(&path("p3")).unwrap(), [node(1)]);
    }

    #[test]
    fn respects_max_moves_and_threshold() {
        let (table, demand) = all_on(1, 4);
        let load = loads(&[(1, 0.9), (2, 0.1), (3, 0.3)]);
        let t = rebalance(&table, &ring(3), &demand, &load, 0.1, 1);
        assert_eq!(t.instances_on(&node(1)).len(), 3);
        assert_eq!(rebalance(&table, &ring(3), &demand, &load, 0.1, 0), table);
        assert_eq!(rebalance(&table, &ring(3), &demand, &load, 0.5, 9), table);
        assert_eq!(
            rebalance(&table, &ring(3), &demand, &load, f64::NAN, 9),
            table
        );
    }

    #[test]
    fn missing_and_invalid_loads_count_as_mean() {
        let (table, demand) = all_on(1, 2);
        // Only node 1 has a figure: every node is at the mean, nothing moves.
        let load = loads(&[(1, 0.9)]);
        assert_eq!(rebalance(&table, &ring(3), &demand, &load, 0.0, 9), table);
        let load = loads(&[(1, 0.9), (2, f64::NAN), (3, -1.0), (4, f64::INFINITY)]);
        assert_eq!(rebalance(&table, &ring(3), &demand, &load, 0.0, 9), table);
        assert_eq!(
            rebalance(&table, &ring(3), &demand, &BTreeMap::new(), 0.0, 9),
            table
        );
        // Node 3 missing counts as the mean of 0.9 and 0.1 (0.5): node 2 is the coolest.
        let load = loads(&[(1, 0.9), (2, 0.1)]);
        let t = rebalance(&table, &ring(3), &demand, &load, 0.0, 1);
        assert_eq!(t.instances(&path("p0")).unwrap(), [node(2)]);
    }

    #[test]
    fn never_two_instances_on_one_node() {
        let table: PartitionTable = [(path("a"), vec![node(1), node(2)])].into_iter().collect();
        let demand = [(path("a"), 2)].into_iter().collect();
        let load = loads(&[(1, 5.0), (2, 0.0), (3, 4.0)]);
        let t = rebalance(&table, &ring(3), &demand, &load, 0.0, 9);
        // Node 2 (coolest) already hosts `a`; moving to node 3 would not help
        // (4.0 + 5.0 is not below 5.0), so nothing moves.
        assert_eq!(t, table);
        // With a second path on node 1 its share is 2.5: `a` moves to node 3 (1.0 → 3.5),
        // not to node 2 (0.0) which already hosts it; then nothing improves any more.
        let table: PartitionTable = [
            (path("a"), vec![node(1), node(2)]),
            (path("b"), vec![node(1)]),
        ]
        .into_iter()
        .collect();
        let demand = [(path("a"), 2), (path("b"), 1)].into_iter().collect();
        let load = loads(&[(1, 5.0), (2, 0.0), (3, 1.0)]);
        let t = rebalance(&table, &ring(3), &demand, &load, 0.0, 9);
        assert_eq!(t.instances(&path("a")).unwrap(), [node(3), node(2)]);
        assert_eq!(t.instances(&path("b")).unwrap(), [node(1)]);
    }

    #[test]
    fn repairs_like_place_and_handles_empty_inputs() {
        let table: PartitionTable = [(path("a"), vec![node(9)])].into_iter().collect();
        let demand: BTreeMap<_, _> = [(path("a"), 1)].into_iter().collect();
        let load = loads(&[(1, 1.0)]);
        let t = rebalance(&table, &ring(2), &demand, &load, 0.0, 0);
        assert_eq!(t, place(&table, &ring(2), &demand));
        assert!(rebalance(&table, &[], &demand, &load, 0.0, 5).is_empty());
        assert!(rebalance(&table, &ring(2), &BTreeMap::new(), &load, 0.0, 5).is_empty());
    }

    #[test]
    fn deterministic_for_ring_order() {
        let (table, demand) = all_on(2, 5);
        let load = loads(&[(1, 0.2), (2, 0.95), (3, 0.2), (4, 0.2)]);
        let mut shuffled = ring(4);
        shuffled.reverse();
        shuffled.push(node(3));
        assert_eq!(
            rebalance(&table, &ring(4), &demand, &load, 0.1, 3),
            rebalance(&table, &shuffled, &demand, &load, 0.1, 3)
        );
    }
}
