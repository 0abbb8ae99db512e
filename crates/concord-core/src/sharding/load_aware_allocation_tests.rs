//! Unit and property tests of [`LoadAwareShardAllocationStrategy`].

use super::*;
use crate::address::Address;
use proptest::prelude::*;

fn node(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("s", "127.0.0.1", 2550 + i), u64::from(i))
}

/// Regions holding `counts` shards, numbered in allocation order.
fn regions(counts: &[usize]) -> Vec<RegionEntry> {
    let mut next = 0;
    counts
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let shards = (next..next + n).map(|s| format!("{s:04}")).collect();
            next += n;
            RegionEntry {
                region: node(i as u16),
                shards,
                app_version: "1.0.0".into(),
                is_up: true,
            }
        })
        .collect()
}

fn limits(absolute: usize) -> LeastShardAllocationSettings {
    LeastShardAllocationSettings {
        rebalance_absolute_limit: absolute,
        ..Default::default()
    }
}

fn strategy(loads: &[f64]) -> LoadAwareShardAllocationStrategy {
    let mut s = LoadAwareShardAllocationStrategy::new(limits(20), Default::default());
    let map: BTreeMap<UniqueAddress, f64> = loads
        .iter()
        .enumerate()
        .map(|(i, l)| (node(i as u16), *l))
        .collect();
    s.set_node_loads(&map);
    s
}

fn none() -> BTreeSet<ShardId> {
    BTreeSet::new()
}

/// Allocates `n` new shards one by one, each counted at its home before the next.
fn allocate_many(s: &mut LoadAwareShardAllocationStrategy, rs: &mut [RegionEntry], n: usize) {
    for i in 0..n {
        let shard = format!("new-{i}");
        let home = s.allocate_shard(&node(0), &shard, rs).expect("a home");
        rs.iter_mut()
            .find(|r| r.region == home)
            .expect("offered")
            .shards
            .push(shard);
    }
}

/// The region that holds `shard`.
fn owner<'a>(rs: &'a [RegionEntry], shard: &ShardId) -> &'a UniqueAddress {
    &rs.iter()
        .find(|r| r.shards.contains(shard))
        .expect("held")
        .region
}

#[test]
fn allocates_to_the_least_loaded_node() {
    let mut s = strategy(&[0.6, 0.1, 0.4]);
    assert_eq!(
        s.allocate_shard(&node(0), &"x".into(), &regions(&[2, 2, 2])),
        Some(node(1))
    );
}

#[test]
fn akkas_preference_comes_before_load() {
    let mut s = strategy(&[0.9, 0.0, 0.0]);
    let mut rs = regions(&[0, 0, 0]);
    rs[1].is_up = false;
    rs[2].app_version = "0.9.0".into();
    assert_eq!(
        s.allocate_shard(&node(0), &"x".into(), &rs),
        Some(node(0)),
        "the only Up region of the newest version, however loaded"
    );
}

#[test]
fn a_saturated_node_gets_no_new_shards_while_others_are_idle() {
    let mut s = strategy(&[1.0, 0.0, 0.0]);
    let mut rs = regions(&[0, 0, 0]);
    allocate_many(&mut s, &mut rs, 300);
    assert!(rs[0].shards.is_empty(), "{}", rs[0].shards.len());
    assert_eq!(rs[1].shards.len(), 150);
    assert_eq!(rs[2].shards.len(), 150);
}

#[test]
fn a_burst_spreads_by_effective_load_before_the_metrics_catch_up() {
    // 0.0 + 1.0 × s/optimal against 0.5 + 1.0 × s/optimal (not above: the mean is 0.33):
    // the idle node takes about half an optimal count more, not everything.
    let mut s = strategy(&[0.0, 0.5, 0.5]);
    let mut rs = regions(&[0, 0, 0]);
    allocate_many(&mut s, &mut rs, 30);
    let sizes: Vec<usize> = rs.iter().map(|r| r.shards.len()).collect();
    assert_eq!(sizes.iter().sum::<usize>(), 30);
    assert!(sizes[0] > sizes[1] && sizes[0] > sizes[2], "{sizes:?}");
    assert!(sizes[1] >= 7 && sizes[2] >= 7, "{sizes:?}");
}

#[test]
fn unknown_and_nan_loads_count_as_the_mean() {
    let mut s = LoadAwareShardAllocationStrategy::new(limits(20), Default::default());
    let loads: BTreeMap<UniqueAddress, f64> = [
        (node(0), 0.8),
        (node(1), f64::NAN),
        (node(2), 0.2),
        (node(3), f64::INFINITY),
    ]
    .into();
    s.set_node_loads(&loads);
    assert_eq!(s.node_loads().len(), 2, "not-a-number loads are unknown");
    // Nodes 1 and 3 count as 0.5: below node 0, above node 2.
    let rs = regions(&[0, 0, 0, 0]);
    assert_eq!(s.allocate_shard(&node(0), &"x".into(), &rs), Some(node(2)));
    // Node 2 busy with shards (0.2 + 4 / 1): an unknown node before the known busier
    // node 0; ties by address.
    let rs = regions(&[0, 0, 4, 0]);
    assert_eq!(s.allocate_shard(&node(0), &"x".into(), &rs), Some(node(1)));
    let loads: BTreeMap<UniqueAddress, f64> = [(node(0), -3.0), (node(1), 7.0)].into();
    s.set_node_loads(&loads);
    assert_eq!(s.node_loads().get(&node(0)), Some(&0.0), "clamped");
    assert_eq!(s.node_loads().get(&node(1)), Some(&1.0), "clamped");
}

#[test]
fn moves_away_from_a_node_that_stays_above_after_the_sustained_rounds() {
    // Mean 0.4; node 0 is 0.5 above it.
    let mut s = strategy(&[0.9, 0.15, 0.15]);
    let rs = regions(&[10, 10, 10]);
    for round in 1..3 {
        assert!(s.rebalance(&rs, &none()).is_empty(), "round {round}");
        assert_eq!(s.rounds_above(&node(0)), round);
    }
    let moved = s.rebalance(&rs, &none());
    // ceil(10 × 0.5 / 0.9) = 6, limit max(1, min(floor(0.1 × 30), 20)) = 3.
    assert_eq!(moved, rs[0].shards[..3].to_vec(), "the earliest shards");
    assert_eq!(s.rounds_above(&node(0)), 0, "counted again after a move");
    assert!(s.rebalance(&rs, &none()).is_empty());
}

#[test]
fn a_node_that_dips_below_the_threshold_starts_counting_again() {
    let mut s = strategy(&[0.9, 0.15, 0.15]);
    let rs = regions(&[10, 10, 10]);
    s.rebalance(&rs, &none());
    s.rebalance(&rs, &none());
    s.set_node_loads(&[(node(0), 0.5), (node(1), 0.4), (node(2), 0.4)].into());
    assert!(s.rebalance(&rs, &none()).is_empty());
    assert_eq!(s.rounds_above(&node(0)), 0);
    s.set_node_loads(&[(node(0), 0.9), (node(1), 0.15), (node(2), 0.15)].into());
    assert!(s.rebalance(&rs, &none()).is_empty());
    assert!(s.rebalance(&rs, &none()).is_empty());
    assert_eq!(s.rebalance(&rs, &none()).len(), 3);
}

#[test]
fn never_while_a_rebalance_is_in_progress_and_such_calls_do_not_count() {
    let mut s = strategy(&[0.9, 0.15, 0.15]);
    let rs = regions(&[10, 10, 10]);
    let moving: BTreeSet<ShardId> = ["0011".to_string()].into();
    for _ in 0..5 {
        assert!(s.rebalance(&rs, &moving).is_empty());
    }
    assert_eq!(s.rounds_above(&node(0)), 0);
    let unbalanced = regions(&[30, 0, 0]);
    assert!(s.rebalance(&unbalanced, &moving).is_empty());
}

#[test]
fn falls_back_to_the_least_shard_rebalance_when_loads_are_even() {
    let mut s = strategy(&[0.3, 0.35, 0.3, 0.25]);
    let rs = regions(&[334, 333, 333, 0]);
    let mut least = LeastShardAllocationStrategy::new(limits(20));
    assert_eq!(s.rebalance(&rs, &none()), least.rebalance(&rs, &none()));
    assert_eq!(s.rebalance(&rs, &none()).len(), 20);
}

#[test]
fn holds_the_count_balance_while_a_node_with_shards_is_above() {
    // Node 0 is hot but not yet for long: the counts wait rather than fight the load.
    let mut s = strategy(&[0.9, 0.1, 0.1, 0.1]);
    let rs = regions(&[20, 20, 20, 0]);
    assert!(s.rebalance(&rs, &none()).is_empty());
    // A hot node without shards does not hold the others' balance, and gets none of it.
    let mut s = strategy(&[0.1, 0.1, 0.1, 0.9]);
    let rs = regions(&[30, 30, 0, 0]);
    let moved = s.rebalance(&rs, &none());
    assert!(!moved.is_empty());
    let mut rs2 = rs.clone();
    for sh in &moved {
        let from = owner(&rs, sh).clone();
        let others: Vec<RegionEntry> = rs2.iter().filter(|r| r.region != from).cloned().collect();
        assert_eq!(s.allocate_shard(&from, sh, &others), Some(node(2)));
        rs2.iter_mut()
            .find(|r| r.region == node(2))
            .unwrap()
            .shards
            .push(sh.clone());
    }
}

#[test]
fn nothing_moves_for_load_when_no_node_is_below_the_mean() {
    // Everyone equal: nobody above, the counts are balanced: nothing.
    let mut s = strategy(&[0.9, 0.9, 0.9]);
    let rs = regions(&[5, 5, 5]);
    for _ in 0..5 {
        assert!(s.rebalance(&rs, &none()).is_empty());
    }
}

#[test]
fn the_old_algorithms_limit_is_max_simultaneous_rebalance() {
    let mut s = LoadAwareShardAllocationStrategy::new(limits(0), Default::default());
    s.set_node_loads(&[(node(0), 0.9), (node(1), 0.1), (node(2), 0.1)].into());
    let rs = regions(&[40, 40, 40]);
    s.rebalance(&rs, &none());
    s.rebalance(&rs, &none());
    assert_eq!(s.rebalance(&rs, &none()).len(), 3);
}

/// `max(1, min(floor(0.1 × total), 20))`.
fn expected_limit(total: usize) -> usize {
    ((total as f64 * 0.1).floor() as usize).clamp(1, 20)
}

fn load_strategy() -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        1 => Just(None),
        1 => Just(Some(f64::NAN)),
        8 => (0.0f64..=1.0).prop_map(Some),
    ]
}

proptest! {
    #[test]
    fn unknown_loads_behave_like_the_least_shard_strategy(
        counts in proptest::collection::vec(0usize..60, 1..7),
        down in proptest::collection::vec(any::<bool>(), 7),
        versions in proptest::collection::vec(0u8..3, 7),
        same in proptest::option::of(0.0f64..=1.0),
    ) {
        let mut rs = regions(&counts);
        for (i, r) in rs.iter_mut().enumerate() {
            r.is_up = !down[i];
            r.app_version = format!("1.{}.0", versions[i]);
        }
        let mut s = LoadAwareShardAllocationStrategy::new(limits(20), Default::default());
        if let Some(l) = same {
            // Every load known and equal is the same as none known.
            let all: BTreeMap<UniqueAddress, f64> = rs.iter().map(|r| (r.region.clone(), l)).collect();
            s.set_node_loads(&all);
        }
        let mut least = LeastShardAllocationStrategy::new(limits(20));
        prop_assert_eq!(
            s.allocate_shard(&node(0), &"x".into(), &rs),
            least.allocate_shard(&node(0), &"x".into(), &rs)
        );
        for _ in 0..4 {
            prop_assert_eq!(s.rebalance(&rs, &none()), least.rebalance(&rs, &none()));
        }
    }

    #[test]
    fn rebalance_keeps_the_limits_and_moves_only_from_nodes_above(
        counts in proptest::collection::vec(0usize..120, 2..7),
        loads in proptest::collection::vec(load_strategy(), 7),
        rounds in 1usize..8,
    ) {
        let rs = regions(&counts);
        let mut s = LoadAwareShardAllocationStrategy::new(limits(20), Default::default());
        let map: BTreeMap<UniqueAddress, f64> = loads
            .iter()
            .enumerate()
            .filter_map(|(i, l)| l.map(|l| (node(i as u16), l)))
            .collect();
        s.set_node_loads(&map);
        let (effective, mean) = s.region_loads(&rs);
        let above: BTreeSet<UniqueAddress> = rs
            .iter()
            .zip(&effective)
            .filter(|(_, l)| **l > mean + 0.2)
            .map(|(r, _)| r.region.clone())
            .collect();
        let hot_with_shards = rs.iter().any(|r| above.contains(&r.region) && !r.shards.is_empty());
        let total: usize = counts.iter().sum();
        for round in 1..=rounds {
            let moved = s.rebalance(&rs, &none());
            prop_assert!(moved.len() <= expected_limit(total), "{} > limit", moved.len());
            let distinct: BTreeSet<&ShardId> = moved.iter().collect();
            prop_assert_eq!(distinct.len(), moved.len());
            if hot_with_shards {
                for sh in &moved {
                    prop_assert!(above.contains(owner(&rs, sh)), "{sh} from a node not above");
                }
                if round < 3 {
                    prop_assert!(moved.is_empty(), "before the sustained rounds");
                }
            }
            prop_assert!(s.rebalance(&rs, &[moved.first().cloned().unwrap_or_default()].into()).is_empty());
        }
    }

    #[test]
    fn allocation_prefers_the_least_loaded_of_equal_counts(
        loads in proptest::collection::vec(0.0f64..=1.0, 2..7),
        count in 0usize..50,
    ) {
        let rs = regions(&vec![count; loads.len()]);
        let mut s = strategy(&loads);
        let home = s.allocate_shard(&node(0), &"x".into(), &rs).expect("a home");
        let i = rs.iter().position(|r| r.region == home).expect("offered");
        let least = loads.iter().copied().fold(f64::INFINITY, f64::min);
        prop_assert_eq!(loads[i], least);
    }
}
