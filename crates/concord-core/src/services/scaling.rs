//! [`ScalingTracker`]: the leader's scaling wishes for partitioned services, from the
//! mailbox depths the instances' nodes report (spec: cluster-specification-original.md,
//! "Partitioning" — "the number of instances ... can be scaled ... based on metrics").
//!
//! Each gossip interval the leader computes, per path, the mean depth over its instances.
//! After `sustained` intervals in a row above `busy_depth` the wish becomes one more than
//! the current instance count; after `sustained` intervals in a row with nothing waiting,
//! one fewer (at least 1). [`InstancePolicy::instances`](super::InstancePolicy::instances)
//! clamps a wish into the service's scaling bounds (and ignores it without bounds).

use std::collections::BTreeMap;

use super::{PartitionPath, PartitionTable};
use crate::address::UniqueAddress;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Streak {
    busy: u32,
    idle: u32,
}

/// The leader's scaling state; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalingTracker {
    busy_depth: u32,
    sustained: u32,
    streaks: BTreeMap<PartitionPath, Streak>,
    wishes: BTreeMap<PartitionPath, u32>,
}

impl ScalingTracker {
    /// A tracker: busy above `busy_depth` messages, for `sustained` intervals (at least 1).
    pub fn new(busy_depth: u32, sustained: u32) -> Self {
        ScalingTracker {
            busy_depth,
            sustained: sustained.max(1),
            streaks: BTreeMap::new(),
            wishes: BTreeMap::new(),
        }
    }

    /// One interval's observation: `depths` are the reports (node → path → depth); only
    /// the table's instances count.
    pub fn observe(
        &mut self,
        table: &PartitionTable,
        depths: &BTreeMap<UniqueAddress, BTreeMap<PartitionPath, u32>>,
    ) {
        self.streaks.retain(|p, _| table.instances(p).is_some());
        self.wishes.retain(|p, _| table.instances(p).is_some());
        for (path, nodes) in table.iter() {
            let total: u64 = nodes
                .iter()
                .filter_map(|n| depths.get(n).and_then(|d| d.get(path)))
                .map(|d| u64::from(*d))
                .sum();
            let count = nodes.len() as u64;
            let mean = total / count.max(1);
            let streak = self.streaks.entry(path.clone()).or_default();
            if mean > u64::from(self.busy_depth) {
                streak.busy += 1;
                streak.idle = 0;
            } else if total == 0 {
                streak.idle += 1;
                streak.busy = 0;
            } else {
                *streak = Streak::default();
            }
            let current = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
            if streak.busy >= self.sustained {
                self.wishes.insert(path.clone(), current.saturating_add(1));
                *streak = Streak::default();
            } else if streak.idle >= self.sustained {
                self.wishes
                    .insert(path.clone(), current.saturating_sub(1).max(1));
                *streak = Streak::default();
            }
        }
    }

    /// The wishes, instances per path (paths never busy or idle long enough are absent).
    pub fn wishes(&self) -> &BTreeMap<PartitionPath, u32> {
        &self.wishes
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
    fn busy_raises_and_idle_lowers_after_sustained_intervals() {
        let path = PartitionPath::new("a").unwrap();
        let table: PartitionTable = [(path.clone(), vec![node(1), node(2)])]
            .into_iter()
            .collect();
        let mut t = ScalingTracker::new(100, 2);
        let busy: BTreeMap<_, _> = [
            (node(1), [(path.clone(), 500)].into()),
            (node(2), [(path.clone(), 10)].into()),
        ]
        .into();
        t.observe(&table, &busy);
        assert!(t.wishes().is_empty());
        t.observe(&table, &busy);
        assert_eq!(t.wishes().get(&path), Some(&3));
        let idle = BTreeMap::new();
        t.observe(&table, &idle);
        assert_eq!(t.wishes().get(&path), Some(&3));
        t.observe(&table, &idle);
        assert_eq!(t.wishes().get(&path), Some(&1));
        // A path that leaves the table is forgotten.
        t.observe(&PartitionTable::new(), &idle);
        assert!(t.wishes().is_empty());
    }
}
