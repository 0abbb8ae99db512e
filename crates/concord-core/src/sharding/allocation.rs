//! Where shards go: the [`ShardAllocationStrategy`] trait and its default,
//! [`LeastShardAllocationStrategy`] (Akka's `ShardCoordinator.LeastShardAllocationStrategy`
//! with `ClusterShardAllocationMixin`; research notes §1.4).
//!
//! **Allocation** picks, among the regions offered, the first in this order: a region
//! whose member is Up before one that is Leaving or Exiting, then the **highest
//! app-version** (so that in a rolling update new shards go to the new version), then the
//! fewest shards, then the lowest address.
//!
//! **Rebalance** (the newer algorithm, Akka 2.6.10, selected by a non-zero
//! `rebalance-absolute-limit`; Akka still defaults to the old one): no round while a
//! rebalance runs. With `optimal = ceil(shards / regions)` and `limit = max(1,
//! min(relative-limit × shards, absolute-limit))`:
//! 1. every region above `optimal` gives up its excess, its earliest allocated shards
//!    first, walking from the fullest region down; at most `limit` in all;
//! 2. only if phase 1 found nothing: if the regions below `optimal − 1` miss `k > 0`
//!    shards in all, the earliest shard of each region holding at least `optimal`, at
//!    most `min(k, limit)`.
//!
//! The **old algorithm** (`rebalance-absolute-limit = 0`) moves, while fewer than
//! `max-simultaneous-rebalance` shards move, `min(diff − threshold, threshold,
//! max-simultaneous − in-progress)` shards with the smallest ids of the fullest region when
//! the fullest and emptiest regions differ by more than `rebalance-threshold`.
//!
//! When a round may run at all (no member unreachable, joining or weakly up, one
//! app-version) is the coordinator's check, not the strategy's.
//!
//! [`super::LoadAwareShardAllocationStrategy`] (opt-in) also weighs each node's measured
//! load; it is fed through [`ShardAllocationStrategy::set_node_loads`].

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;

use super::ids::ShardId;
use super::settings::LeastShardAllocationSettings;

/// One region as the strategy sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionEntry {
    /// The region (its node).
    pub region: UniqueAddress,
    /// Its shards, earliest allocated first.
    pub shards: Vec<ShardId>,
    /// Its member's app-version (`cluster.app-version`).
    pub app_version: String,
    /// False if its member is Leaving, Exiting or Down.
    pub is_up: bool,
}

/// Decides where new shards go and which shards move (Akka's `ShardAllocationStrategy`).
/// Called by the coordinator; must not block.
pub trait ShardAllocationStrategy: Send {
    /// The region for `shard`, requested by `requester`, among `regions` (never empty);
    /// `None` to leave it unallocated for now.
    fn allocate_shard(
        &mut self,
        requester: &UniqueAddress,
        shard: &ShardId,
        regions: &[RegionEntry],
    ) -> Option<UniqueAddress>;

    /// The shards to move now, given the allocations and the shards already moving.
    fn rebalance(
        &mut self,
        regions: &[RegionEntry],
        rebalance_in_progress: &BTreeSet<ShardId>,
    ) -> Vec<ShardId>;

    /// The latest load of each node, 0.0 (idle) … 1.0 (saturated), as the runtime measures
    /// it (cluster metrics); nodes absent are unknown. Called often (every second on the
    /// node that runs the coordinator); must be cheap. Default: ignored (a strategy that
    /// does not look at load).
    fn set_node_loads(&mut self, _loads: &BTreeMap<UniqueAddress, f64>) {}
}

/// Compares two app-versions the way Akka's `Version` does: dot- or dash-separated parts,
/// numeric parts as numbers, others as text; a missing part is smaller.
pub fn compare_app_versions(a: &str, b: &str) -> Ordering {
    let split = |v: &str| -> Vec<String> {
        v.split(['.', '-'])
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    };
    let (pa, pb) = (split(a), split(b));
    for (x, y) in pa.iter().zip(pb.iter()) {
        let o = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(i), Ok(j)) => i.cmp(&j),
            (Ok(_), Err(_)) => Ordering::Greater,
            (Err(_), Ok(_)) => Ordering::Less,
            (Err(_), Err(_)) => x.cmp(y),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    pa.len().cmp(&pb.len())
}

/// Akka's preference between two homes before their shard counts: an Up member before a
/// leaving one, then the highest app-version. `Less` is the better home.
pub(super) fn preference(a: &RegionEntry, b: &RegionEntry) -> Ordering {
    (!a.is_up)
        .cmp(&!b.is_up)
        .then_with(|| compare_app_versions(&b.app_version, &a.app_version))
}

/// The allocation order of the module docs: `Less` is the better home for a new shard.
fn suitability(a: &RegionEntry, b: &RegionEntry) -> Ordering {
    preference(a, b)
        .then_with(|| a.shards.len().cmp(&b.shards.len()))
        .then_with(|| a.region.cmp(&b.region))
}

/// Akka's least-shard allocation strategy, newer rebalance algorithm by default; see the
/// module docs.
#[derive(Clone, Debug)]
pub struct LeastShardAllocationStrategy {
    settings: LeastShardAllocationSettings,
}

impl LeastShardAllocationStrategy {
    /// The strategy with `settings`.
    pub fn new(settings: LeastShardAllocationSettings) -> Self {
        LeastShardAllocationStrategy { settings }
    }

    /// Most shards one round of the newer algorithm moves when `total_shards` are
    /// allocated: `max(1, min(floor(relative-limit × shards), absolute-limit))`.
    pub(super) fn limit(&self, total_shards: usize) -> usize {
        // `relative × total` is finite and non-negative for sane settings; `as` saturates.
        let relative = (self.settings.rebalance_relative_limit.max(0.0) * total_shards as f64)
            .floor() as usize;
        relative.min(self.settings.rebalance_absolute_limit).max(1)
    }

    fn rebalance_new(&self, regions: &[RegionEntry]) -> Vec<ShardId> {
        let total: usize = regions.iter().map(|r| r.shards.len()).sum();
        if regions.is_empty() || total == 0 {
            return Vec::new();
        }
        let optimal = total.div_ceil(regions.len());
        let limit = self.limit(total);
        let mut fullest_first: Vec<&RegionEntry> = regions.iter().collect();
        fullest_first.sort_by_key(|r| (Reverse(r.shards.len()), r.region.clone()));
        // Phase 1: the excess above optimal, earliest allocated first.
        let mut selected: Vec<ShardId> = Vec::new();
        for r in &fullest_first {
            if r.shards.len() > optimal {
                selected.extend(r.shards.iter().take(r.shards.len() - optimal).cloned());
            }
            if selected.len() >= limit {
                break;
            }
        }
        if !selected.is_empty() {
            selected.truncate(limit);
            return selected;
        }
        // Phase 2: regions more than one below optimal.
        let missing: usize = regions
            .iter()
            .map(|r| (optimal - 1).saturating_sub(r.shards.len()))
            .sum();
        if missing == 0 {
            return Vec::new();
        }
        fullest_first
            .iter()
            .filter(|r| r.shards.len() >= optimal)
            .filter_map(|r| r.shards.first().cloned())
            .take(missing.min(limit))
            .collect()
    }

    fn rebalance_old(
        &self,
        regions: &[RegionEntry],
        in_progress: &BTreeSet<ShardId>,
    ) -> Vec<ShardId> {
        let max_sim = self.settings.max_simultaneous_rebalance;
        if in_progress.len() >= max_sim || regions.len() < 2 {
            return Vec::new();
        }
        let moving = |r: &&RegionEntry| -> Vec<ShardId> {
            let mut v: Vec<ShardId> = r
                .shards
                .iter()
                .filter(|s| !in_progress.contains(*s))
                .cloned()
                .collect();
            v.sort();
            v
        };
        let Some(least) = regions.iter().min_by(|a, b| suitability(a, b)) else {
            return Vec::new();
        };
        let Some(most) = regions
            .iter()
            .max_by_key(|r| (moving(r).len(), Reverse(r.region.clone())))
        else {
            return Vec::new();
        };
        let most_shards = moving(&most);
        let diff = most_shards.len().saturating_sub(least.shards.len());
        let threshold = self.settings.rebalance_threshold;
        if diff <= threshold {
            return Vec::new();
        }
        let n = (diff - threshold)
            .min(threshold.max(1))
            .min(max_sim - in_progress.len());
        most_shards.into_iter().take(n).collect()
    }
}

impl ShardAllocationStrategy for LeastShardAllocationStrategy {
    fn allocate_shard(
        &mut self,
        _requester: &UniqueAddress,
        _shard: &ShardId,
        regions: &[RegionEntry],
    ) -> Option<UniqueAddress> {
        regions
            .iter()
            .min_by(|a, b| suitability(a, b))
            .map(|r| r.region.clone())
    }

    fn rebalance(
        &mut self,
        regions: &[RegionEntry],
        rebalance_in_progress: &BTreeSet<ShardId>,
    ) -> Vec<ShardId> {
        if self.settings.rebalance_absolute_limit == 0 {
            return self.rebalance_old(regions, rebalance_in_progress);
        }
        if !rebalance_in_progress.is_empty() {
            return Vec::new();
        }
        self.rebalance_new(regions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use proptest::prelude::*;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", 2550 + i), u64::from(i))
    }

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

    fn strategy(absolute: usize) -> LeastShardAllocationStrategy {
        LeastShardAllocationStrategy::new(LeastShardAllocationSettings {
            rebalance_absolute_limit: absolute,
            ..Default::default()
        })
    }

    #[test]
    fn allocates_to_the_least_loaded_up_region_of_the_newest_version() {
        let mut s = strategy(20);
        let mut rs = regions(&[3, 1, 2]);
        assert_eq!(s.allocate_shard(&node(0), &"x".into(), &rs), Some(node(1)));
        rs[1].is_up = false;
        assert_eq!(
            s.allocate_shard(&node(0), &"x".into(), &rs),
            Some(node(2)),
            "a leaving region only when nothing else"
        );
        rs[0].app_version = "1.10.0".into();
        assert_eq!(
            s.allocate_shard(&node(0), &"x".into(), &rs),
            Some(node(0)),
            "rolling update: the newest version first, even with more shards"
        );
    }

    #[test]
    fn app_versions_compare_numerically() {
        assert_eq!(compare_app_versions("1.10.0", "1.9.9"), Ordering::Greater);
        assert_eq!(compare_app_versions("1.0", "1.0.0"), Ordering::Less);
        assert_eq!(
            compare_app_versions("2.0.0-rc1", "2.0.0-rc2"),
            Ordering::Less
        );
        assert_eq!(compare_app_versions("0.0.0", "0.0.0"), Ordering::Equal);
        assert_eq!(compare_app_versions("1.0.0", "1.0.0-M1"), Ordering::Less);
    }

    #[test]
    fn new_algorithm_phase_1_takes_the_excess_from_the_fullest_first() {
        let mut s = strategy(20);
        // 1000 shards on 3 regions, a 4th joins: optimal 250, limit min(100, 20) = 20.
        let rs = regions(&[334, 333, 333, 0]);
        let moved = s.rebalance(&rs, &BTreeSet::new());
        assert_eq!(moved.len(), 20);
        assert!(
            moved.iter().all(|sh| rs[0].shards[..84].contains(sh)),
            "the fullest region's earliest shards"
        );
        assert!(s
            .rebalance(&rs, &moved.iter().cloned().collect())
            .is_empty());
    }

    #[test]
    fn new_algorithm_phase_2_when_the_excess_is_rounded_away() {
        let mut s = strategy(20);
        // optimal = ceil(9/4) = 3: nobody above it, the last region is 2 below optimal - 1.
        let rs = regions(&[3, 3, 3, 0]);
        let moved = s.rebalance(&rs, &BTreeSet::new());
        assert_eq!(moved.len(), 1, "min(missing 2, limit max(1, 0.1 × 9))");
        let balanced = regions(&[3, 2, 2, 2]);
        assert!(s.rebalance(&balanced, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn old_algorithm_moves_one_at_a_time_up_to_max_simultaneous() {
        let mut s = strategy(0);
        let rs = regions(&[10, 0]);
        let moved = s.rebalance(&rs, &BTreeSet::new());
        assert_eq!(moved, vec!["0000".to_string()]);
        let three: BTreeSet<ShardId> = ["0001", "0002", "0003"].map(String::from).into();
        assert!(s.rebalance(&rs, &three).is_empty(), "max-simultaneous 3");
        assert!(s.rebalance(&regions(&[2, 1]), &BTreeSet::new()).is_empty());
    }

    fn apply(rs: &mut [RegionEntry], moved: &[ShardId], s: &mut LeastShardAllocationStrategy) {
        for sh in moved {
            for r in rs.iter_mut() {
                r.shards.retain(|x| x != sh);
            }
            let target = s.allocate_shard(&node(0), sh, rs).expect("some region");
            rs.iter_mut()
                .find(|r| r.region == target)
                .expect("offered")
                .shards
                .push(sh.clone());
        }
    }

    proptest! {
        #[test]
        fn new_algorithm_converges_to_within_one_of_optimal(
            counts in proptest::collection::vec(0usize..200, 1..8)
        ) {
            let mut s = strategy(20);
            let mut rs = regions(&counts);
            let total: usize = counts.iter().sum();
            for _ in 0..1000 {
                let moved = s.rebalance(&rs, &BTreeSet::new());
                prop_assert!(moved.len() <= 20);
                if moved.is_empty() { break; }
                apply(&mut rs, &moved, &mut s);
            }
            let sizes: Vec<usize> = rs.iter().map(|r| r.shards.len()).collect();
            prop_assert_eq!(sizes.iter().sum::<usize>(), total);
            let max = *sizes.iter().max().unwrap_or(&0);
            let min = *sizes.iter().min().unwrap_or(&0);
            prop_assert!(max - min <= 2, "balanced: {sizes:?}");
            prop_assert!(s.rebalance(&rs, &BTreeSet::new()).is_empty(), "stable: {sizes:?}");
        }
    }
}
