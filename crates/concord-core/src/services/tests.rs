//! Property tests of the placement ([`place`], [`pending_changes`]) and of [`rebalance`].

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::address::{Address, UniqueAddress};

fn node(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("sys", "10.0.0.1", 2000 + i), u64::from(i))
}

fn path(i: u8) -> PartitionPath {
    PartitionPath::new(&format!("svc/p{i}")).unwrap()
}

/// Node indices, duplicates allowed (0..24).
fn ring_input() -> impl Strategy<Value = Vec<u16>> {
    proptest::collection::vec(0u16..24, 0..20)
}

/// Distinct node indices, at least one.
fn distinct_ring() -> impl Strategy<Value = Vec<u16>> {
    proptest::collection::btree_set(0u16..24, 1..16).prop_map(|s| s.into_iter().collect())
}

/// Instances per path: mostly small, sometimes larger than any ring, sometimes 0.
fn demand() -> impl Strategy<Value = BTreeMap<PartitionPath, u32>> {
    proptest::collection::btree_map(
        (0u8..10).prop_map(path),
        prop_oneof![6 => 0u32..6, 1 => 0u32..40, 1 => Just(u32::MAX)],
        0..8,
    )
}

/// Any previous table: nodes on or off the ring, duplicates, any lengths.
fn any_table() -> impl Strategy<Value = PartitionTable> {
    proptest::collection::btree_map(
        (0u8..12).prop_map(path),
        proptest::collection::vec((0u16..30).prop_map(node), 0..8),
        0..8,
    )
    .prop_map(PartitionTable::from)
}

fn nodes(indices: &[u16]) -> Vec<UniqueAddress> {
    indices.iter().copied().map(node).collect()
}

/// Invariants (b): exactly min(N, ring size) instances per demanded path, on distinct ring
/// nodes; nothing for undemanded paths.
fn check_invariants(
    t: &PartitionTable,
    ring: &[UniqueAddress],
    demand: &BTreeMap<PartitionPath, u32>,
) -> Result<(), TestCaseError> {
    let ring: BTreeSet<&UniqueAddress> = ring.iter().collect();
    for p in t.paths() {
        prop_assert!(demand.contains_key(p), "undemanded path {p}");
    }
    for (p, &n) in demand {
        let expected = usize::try_from(n).unwrap().min(ring.len());
        let got = t.instances(p).unwrap_or(&[]);
        prop_assert_eq!(got.len(), expected, "path {}", p);
        let distinct: BTreeSet<_> = got.iter().collect();
        prop_assert_eq!(
            distinct.len(),
            got.len(),
            "two instances of {} on one node",
            p
        );
        for n in got {
            prop_assert!(ring.contains(n), "{} placed off the ring", n);
        }
    }
    Ok(())
}

/// `(path, node)` pairs of `after` that are not in `before`.
fn arrivals(before: &PartitionTable, after: &PartitionTable) -> usize {
    after
        .iter()
        .map(|(p, nodes)| {
            let old = before.instances(p).unwrap_or(&[]);
            nodes.iter().filter(|n| !old.contains(n)).count()
        })
        .sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// (a) The ring's order and repetitions do not change the result.
    #[test]
    fn place_ignores_ring_order_and_duplicates(
        (ring, shuffled) in ring_input().prop_flat_map(|r| {
            let mut doubled = r.clone();
            doubled.extend(r.iter().take(r.len() / 2).copied());
            (Just(r), Just(doubled).prop_shuffle())
        }),
        prev in any_table(),
        demand in demand(),
    ) {
        let a = place(&prev, &nodes(&ring), &demand);
        let b = place(&prev, &nodes(&shuffled), &demand);
        prop_assert_eq!(a, b);
    }

    /// (b) Invariants from any previous table, and placing again changes nothing.
    #[test]
    fn place_keeps_invariants(ring in ring_input(), prev in any_table(), demand in demand()) {
        let ring = nodes(&ring);
        let t = place(&prev, &ring, &demand);
        check_invariants(&t, &ring, &demand)?;
        prop_assert_eq!(place(&t, &ring, &demand), t.clone());
        prop_assert!(pending_changes(&t, &t, &ring).is_empty());
    }

    /// (c) Adding a node moves no instance; removing one re-places only its instances.
    #[test]
    fn place_moves_minimally(
        ring in distinct_ring(),
        extra in 0u16..24,
        removed_at in any::<prop::sample::Index>(),
        prev in any_table(),
        demand in demand(),
    ) {
        let ring_nodes = nodes(&ring);
        let before = place(&prev, &ring_nodes, &demand);

        if !ring.contains(&extra) {
            let mut grown = ring_nodes.clone();
            grown.push(node(extra));
            let after = place(&before, &grown, &demand);
            for (p, old) in before.iter() {
                let new = after.instances(p).unwrap_or(&[]);
                prop_assert!(new.starts_with(old), "{}: {:?} → {:?}", p, old, new);
            }
        }

        let gone = ring_nodes[removed_at.index(ring_nodes.len())].clone();
        let shrunk: Vec<_> = ring_nodes.iter().filter(|n| **n != gone).cloned().collect();
        let after = place(&before, &shrunk, &demand);
        check_invariants(&after, &shrunk, &demand)?;
        for (p, old) in before.iter() {
            let kept: Vec<_> = old.iter().filter(|n| **n != gone).cloned().collect();
            let new = after.instances(p).unwrap_or(&[]);
            prop_assert!(new.starts_with(&kept), "{}: {:?} → {:?}", p, old, new);
            let replaced = usize::from(old.contains(&gone));
            prop_assert!(new.len() - kept.len() <= replaced);
        }
        // Only the gone node's instances arrive elsewhere, all started afresh.
        let changes = pending_changes(&before, &after, &shrunk);
        prop_assert!(changes.len() <= before.instances_on(&gone).len());
        prop_assert!(changes.iter().all(|c| c.from.is_none()));
    }

    /// (d) From an empty table, instance counts per ring node differ by at most one.
    #[test]
    fn place_spreads_evenly(ring in ring_input(), demand in demand()) {
        let ring = sorted_ring(&nodes(&ring));
        let t = place(&PartitionTable::new(), &ring, &demand);
        let counts = t.instance_counts();
        let per_node: Vec<usize> = ring.iter().map(|n| counts.get(n).copied().unwrap_or(0)).collect();
        if let (Some(lo), Some(hi)) = (per_node.iter().min(), per_node.iter().max()) {
            prop_assert!(hi - lo <= 1, "counts {:?}", per_node);
        }
    }

    /// Pending changes: one per arrival; every `from` left the path and is live.
    #[test]
    fn pending_changes_describe_the_difference(
        live in ring_input(),
        current in any_table(),
        target in any_table(),
    ) {
        let live = nodes(&live);
        let changes = pending_changes(&current, &target, &live);
        prop_assert_eq!(changes.len(), arrivals(&current, &target));
        let mut sorted = changes.clone();
        sorted.sort();
        prop_assert_eq!(&sorted, &changes);
        for c in &changes {
            prop_assert_eq!(c.status, PartitionChangeStatus::Awaiting);
            let before = current.instances(&c.path).unwrap_or(&[]);
            let after = target.instances(&c.path).unwrap_or(&[]);
            prop_assert!(after.contains(&c.to) && !before.contains(&c.to));
            if let Some(from) = &c.from {
                prop_assert!(before.contains(from) && !after.contains(from) && live.contains(from));
            }
        }
    }

    /// (e) `rebalance` never exceeds `max_moves`, keeps the invariants, and is
    /// deterministic for any ring order.
    #[test]
    fn rebalance_is_bounded_and_valid(
        ring in ring_input(),
        prev in any_table(),
        demand in demand(),
        load in proptest::collection::btree_map(
            (0u16..30).prop_map(node),
            prop_oneof![8 => 0.0f64..10.0, 1 => Just(f64::NAN), 1 => -5.0f64..0.0],
            0..20,
        ),
        threshold in prop_oneof![0.0f64..3.0, Just(-1.0)],
        max_moves in 0usize..12,
    ) {
        let ring_nodes = nodes(&ring);
        let table = place(&prev, &ring_nodes, &demand);
        let t = rebalance(&table, &ring_nodes, &demand, &load, threshold, max_moves);
        check_invariants(&t, &ring_nodes, &demand)?;
        prop_assert!(arrivals(&table, &t) <= max_moves);
        let mut reversed = ring_nodes.clone();
        reversed.reverse();
        prop_assert_eq!(
            rebalance(&table, &reversed, &demand, &load, threshold, max_moves),
            t
        );
        // Starting from a stale table, the repair by `place` comes for free.
        let t = rebalance(&prev, &ring_nodes, &demand, &load, threshold, max_moves);
        check_invariants(&t, &ring_nodes, &demand)?;
        prop_assert!(arrivals(&table, &t) <= max_moves);
    }
}
