//! [`LoadAwareShardAllocationStrategy`]: shard placement that weighs each node's measured
//! load (cluster metrics) as well as its shard count — opt-in, selected by
//! [`super::ShardingSettings::load_aware_allocation`] (`[sharding] allocation-strategy =
//! "load-aware"`). Concord's, after Orleans' resource-optimized placement and activation
//! rebalancer (research notes, persistence-delivery-services §4.2–4.3); Akka's
//! cluster-metrics drive only routers.
//!
//! **Loads.** The runtime gives the strategy every node's load with
//! [`ShardAllocationStrategy::set_node_loads`]: `1 − capacity` by the configured
//! [`crate::cluster_metrics::CapacitySelector`], in *load units*, 0.0 idle … 1.0
//! saturated. A value that is not a finite number is unknown; others are clamped to
//! 0.0–1.0. A region whose load is unknown counts as the mean of the known loads of the
//! regions considered, or 0.0 when none is known — so with no metrics at all every region
//! is equal and the strategy behaves exactly as [`LeastShardAllocationStrategy`]. A region
//! is **above** when its load exceeds the mean of the regions' loads by more than
//! `load-threshold`.
//!
//! **Allocation** (a new shard, or the destination of a moving one):
//! 1. among the regions offered, only the best by Akka's order — an Up member before a
//!    leaving one, then the highest app-version — as [`LeastShardAllocationStrategy`];
//! 2. among those, regions that are above are skipped while one that is not above remains
//!    (a saturated node gets no new shards while others are idle);
//! 3. the lowest **effective load** wins:
//!    `effective = load + shard-count-weight × shards / optimal`, with `optimal =
//!    max(1, ceil(all offered regions' shards / regions))` and `shard-count-weight` 1.0
//!    (a region holding the optimal count counts as one load unit busier). Shards being
//!    allocated or moving already count at their destination (the coordinator's region
//!    entries), so a burst of allocations spreads before the metrics show its load;
//! 4. ties: fewer shards, then the lower address.
//!
//! **Rebalance** (one call per coordinator rebalance round):
//! 1. nothing while a rebalance is in progress (such a call does not count as a round);
//! 2. each region above counts one more consecutive round above; a region not above starts
//!    again from zero;
//! 3. regions above for `load-sustained-rounds` rounds (3) that hold shards give up their
//!    earliest allocated shards, the most loaded region first, provided a region below the
//!    mean exists to take them: `k = ceil(shards × (load − mean) / load)` of each (the
//!    share that would bring a region whose load comes from its shards down to the mean),
//!    at most `limit` in all — the least-shard strategy's limit, `max(1, min(floor(
//!    rebalance-relative-limit × all shards), rebalance-absolute-limit))`, or
//!    `max-simultaneous-rebalance` when `rebalance-absolute-limit` is 0. After such a move
//!    every region's count starts again from zero, so the metrics can show the move's
//!    effect before the next one;
//! 4. otherwise, while some region above holds shards, nothing moves (the count balance
//!    must not undo what the load asks for);
//! 5. otherwise the least-shard rebalance ([`LeastShardAllocationStrategy`]) over the
//!    regions that are not above, so the shard counts stay balanced.
//!
//! Destinations of moving shards are chosen by the allocation above (the coordinator asks
//! the strategy with the source left out).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;

use super::allocation::{
    preference, LeastShardAllocationStrategy, RegionEntry, ShardAllocationStrategy,
};
use super::ids::ShardId;
use super::settings::{LeastShardAllocationSettings, LoadAwareAllocationSettings};

/// Load-aware allocation and rebalance; see the module docs.
#[derive(Clone, Debug)]
pub struct LoadAwareShardAllocationStrategy {
    /// The fallback rebalance and the limits.
    least: LeastShardAllocationStrategy,
    limits: LeastShardAllocationSettings,
    settings: LoadAwareAllocationSettings,
    /// The latest loads, finite and within 0.0–1.0.
    loads: BTreeMap<UniqueAddress, f64>,
    /// Consecutive rebalance rounds each region has been above.
    rounds_above: BTreeMap<UniqueAddress, u32>,
}

/// `x` if it is a finite number, else `fallback`.
fn finite_or(x: f64, fallback: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        fallback
    }
}

impl LoadAwareShardAllocationStrategy {
    /// The strategy with the least-shard strategy's `limits` (rebalance limits and the
    /// fallback) and the load-aware `settings`; every load unknown until
    /// [`ShardAllocationStrategy::set_node_loads`].
    pub fn new(
        limits: LeastShardAllocationSettings,
        settings: LoadAwareAllocationSettings,
    ) -> Self {
        LoadAwareShardAllocationStrategy {
            least: LeastShardAllocationStrategy::new(limits),
            limits,
            settings,
            loads: BTreeMap::new(),
            rounds_above: BTreeMap::new(),
        }
    }

    /// The loads it holds (after dropping values that are not finite and clamping the rest
    /// to 0.0–1.0), load units.
    pub fn node_loads(&self) -> &BTreeMap<UniqueAddress, f64> {
        &self.loads
    }

    /// The consecutive rebalance rounds `region` has been above, count.
    pub fn rounds_above(&self, region: &UniqueAddress) -> u32 {
        self.rounds_above.get(region).copied().unwrap_or(0)
    }

    /// `load-threshold`, load units (a value that is not a number: never above).
    fn threshold(&self) -> f64 {
        finite_or(self.settings.load_threshold, f64::INFINITY).max(0.0)
    }

    /// `shard-count-weight`, load units per optimal count (not a number: 0).
    fn weight(&self) -> f64 {
        finite_or(self.settings.shard_count_weight, 0.0).max(0.0)
    }

    /// Each region's load in the order of `regions` (unknown: the mean of the known ones,
    /// or 0.0), and their mean.
    fn region_loads(&self, regions: &[RegionEntry]) -> (Vec<f64>, f64) {
        let known: Vec<Option<f64>> = regions
            .iter()
            .map(|r| self.loads.get(&r.region).copied())
            .collect();
        let (sum, n) = known
            .iter()
            .flatten()
            .fold((0.0, 0usize), |(s, n), l| (s + l, n + 1));
        let fill = if n == 0 { 0.0 } else { sum / n as f64 };
        let loads: Vec<f64> = known.into_iter().map(|l| l.unwrap_or(fill)).collect();
        let mean = if loads.is_empty() {
            0.0
        } else {
            loads.iter().sum::<f64>() / loads.len() as f64
        };
        (loads, mean)
    }

    /// Most shards one round moves for load when `total_shards` are allocated.
    fn limit(&self, total_shards: usize) -> usize {
        if self.limits.rebalance_absolute_limit == 0 {
            self.limits.max_simultaneous_rebalance.max(1)
        } else {
            self.least.limit(total_shards)
        }
    }

    /// Step 3 of the rebalance: the shards to move away from regions above for the
    /// sustained rounds (empty if none, or if no region is below the mean).
    fn load_moves(&self, regions: &[RegionEntry], loads: &[f64], mean: f64) -> Vec<ShardId> {
        if !loads.iter().any(|l| *l < mean) {
            return Vec::new();
        }
        let sustained = self.settings.load_sustained_rounds.max(1);
        let mut hot: Vec<(&RegionEntry, f64)> = regions
            .iter()
            .zip(loads.iter().copied())
            .filter(|(r, _)| !r.shards.is_empty() && self.rounds_above(&r.region) >= sustained)
            .collect();
        hot.sort_by(|(a, la), (b, lb)| lb.total_cmp(la).then_with(|| a.region.cmp(&b.region)));
        let total: usize = regions.iter().map(|r| r.shards.len()).sum();
        let limit = self.limit(total);
        let mut selected: Vec<ShardId> = Vec::new();
        for (r, load) in hot {
            let n = r.shards.len();
            // Above the mean (≥ 0) by more than the threshold: `load` > 0.
            let share = if load > 0.0 {
                ((load - mean) / load).clamp(0.0, 1.0)
            } else {
                0.0
            };
            // `n × share` is finite and within 0..=n; `as` saturates.
            let k = ((n as f64 * share).ceil() as usize).max(1).min(n);
            selected.extend(r.shards.iter().take(k).cloned());
            if selected.len() >= limit {
                break;
            }
        }
        selected.truncate(limit);
        selected
    }
}

impl ShardAllocationStrategy for LoadAwareShardAllocationStrategy {
    fn allocate_shard(
        &mut self,
        _requester: &UniqueAddress,
        _shard: &ShardId,
        regions: &[RegionEntry],
    ) -> Option<UniqueAddress> {
        let best = regions.iter().min_by(|a, b| preference(a, b))?;
        let (loads, mean) = self.region_loads(regions);
        let threshold = self.threshold();
        let total: usize = regions.iter().map(|r| r.shards.len()).sum();
        let optimal = total.div_ceil(regions.len()).max(1) as f64;
        let weight = self.weight();
        let class: Vec<(&RegionEntry, f64)> = regions
            .iter()
            .zip(loads)
            .filter(|(r, _)| preference(r, best) == Ordering::Equal)
            .collect();
        let is_above = |l: f64| l > mean + threshold;
        let some_not_above = class.iter().any(|(_, l)| !is_above(*l));
        class
            .into_iter()
            .filter(|(_, l)| !(some_not_above && is_above(*l)))
            .map(|(r, l)| (r, l + weight * r.shards.len() as f64 / optimal))
            .min_by(|(a, ea), (b, eb)| {
                ea.total_cmp(eb)
                    .then_with(|| a.shards.len().cmp(&b.shards.len()))
                    .then_with(|| a.region.cmp(&b.region))
            })
            .map(|(r, _)| r.region.clone())
    }

    fn rebalance(
        &mut self,
        regions: &[RegionEntry],
        rebalance_in_progress: &BTreeSet<ShardId>,
    ) -> Vec<ShardId> {
        if !rebalance_in_progress.is_empty() || regions.is_empty() {
            return Vec::new();
        }
        let (loads, mean) = self.region_loads(regions);
        let threshold = self.threshold();
        let above: Vec<bool> = loads.iter().map(|l| *l > mean + threshold).collect();
        self.rounds_above = regions
            .iter()
            .zip(&above)
            .filter(|(_, a)| **a)
            .map(|(r, _)| {
                (
                    r.region.clone(),
                    self.rounds_above(&r.region).saturating_add(1),
                )
            })
            .collect();
        let moved = self.load_moves(regions, &loads, mean);
        if !moved.is_empty() {
            self.rounds_above.clear();
            return moved;
        }
        if regions
            .iter()
            .zip(&above)
            .any(|(r, a)| *a && !r.shards.is_empty())
        {
            return Vec::new();
        }
        let calm: Vec<RegionEntry> = regions
            .iter()
            .zip(&above)
            .filter(|(_, a)| !**a)
            .map(|(r, _)| r.clone())
            .collect();
        self.least.rebalance(&calm, rebalance_in_progress)
    }

    fn set_node_loads(&mut self, loads: &BTreeMap<UniqueAddress, f64>) {
        self.loads = loads
            .iter()
            .filter(|(_, l)| l.is_finite())
            .map(|(n, l)| (n.clone(), l.clamp(0.0, 1.0)))
            .collect();
    }
}

#[cfg(test)]
#[path = "load_aware_allocation_tests.rs"]
mod tests;
