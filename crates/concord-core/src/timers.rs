//! [`TimerTable`]: the deadlines of one protocol machine, keyed by an enum of its timers.
//!
//! Every sans-IO machine keeps its timers here instead of loose `next_*_ms` fields, so that
//! `poll_timeout` is simply [`TimerTable::next_deadline`] and no deadline can be forgotten.
//! A timer is either armed (one deadline, ms) or not; arming it again moves its deadline.
//! The table is small (a few periodic timers plus one per monitored node), so the earliest
//! deadline is found by a scan.

use std::collections::BTreeMap;

/// Deadlines (ms) of the timers `T` of one machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimerTable<T: Ord> {
    deadlines: BTreeMap<T, u64>,
}

impl<T: Ord> Default for TimerTable<T> {
    fn default() -> Self {
        TimerTable {
            deadlines: BTreeMap::new(),
        }
    }
}

impl<T: Ord + Clone> TimerTable<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms `timer` to fire at `at_ms` (replacing an earlier deadline of the same timer).
    pub fn set(&mut self, timer: T, at_ms: u64) {
        self.deadlines.insert(timer, at_ms);
    }

    /// Arms `timer` at `at_ms` unless it is already armed (keeps the existing deadline).
    pub fn set_if_unset(&mut self, timer: T, at_ms: u64) {
        self.deadlines.entry(timer).or_insert(at_ms);
    }

    /// Disarms `timer`; returns its deadline if it was armed.
    pub fn cancel(&mut self, timer: &T) -> Option<u64> {
        self.deadlines.remove(timer)
    }

    /// Disarms every timer for which `keep` returns false.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        self.deadlines.retain(|t, _| keep(t));
    }

    /// The deadline of `timer`, if armed.
    pub fn deadline(&self, timer: &T) -> Option<u64> {
        self.deadlines.get(timer).copied()
    }

    /// True if `timer` is armed.
    pub fn is_set(&self, timer: &T) -> bool {
        self.deadlines.contains_key(timer)
    }

    /// The earliest deadline of all armed timers, ms (what `poll_timeout` returns).
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.values().min().copied()
    }

    /// Disarms and returns every timer due at `now_ms`, earliest deadline first (ties in
    /// the timers' order).
    pub fn expired(&mut self, now_ms: u64) -> Vec<T> {
        let mut due: Vec<(u64, T)> = self
            .deadlines
            .iter()
            .filter(|(_, at)| **at <= now_ms)
            .map(|(t, at)| (*at, t.clone()))
            .collect();
        if due.is_empty() {
            return Vec::new();
        }
        due.sort();
        for (_, t) in &due {
            self.deadlines.remove(t);
        }
        due.into_iter().map(|(_, t)| t).collect()
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// True if no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }

    /// Disarms everything.
    pub fn clear(&mut self) {
        self.deadlines.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
    enum T {
        A,
        B,
        Per(u8),
    }

    #[test]
    fn earliest_deadline_and_expiry_in_deadline_order() {
        let mut t = TimerTable::new();
        assert_eq!(t.next_deadline(), None);
        t.set(T::B, 30);
        t.set(T::A, 50);
        t.set(T::Per(1), 10);
        assert_eq!(t.next_deadline(), Some(10));
        assert_eq!(t.expired(5), Vec::<T>::new());
        assert_eq!(t.expired(30), vec![T::Per(1), T::B]);
        assert_eq!(t.next_deadline(), Some(50));
        t.set(T::A, 20);
        assert_eq!(t.deadline(&T::A), Some(20), "re-arming moves the deadline");
        t.set_if_unset(T::A, 5);
        assert_eq!(t.deadline(&T::A), Some(20), "set_if_unset keeps it");
        assert_eq!(t.cancel(&T::A), Some(20));
        assert!(t.is_empty());
    }

    proptest! {
        #[test]
        fn expired_returns_exactly_the_due_timers(
            deadlines in proptest::collection::btree_map(0u8..50, 0u64..1000, 0..40),
            now in 0u64..1000,
        ) {
            let mut t = TimerTable::new();
            for (k, at) in &deadlines {
                t.set(T::Per(*k), *at);
            }
            let due = t.expired(now);
            let expected: usize = deadlines.values().filter(|at| **at <= now).count();
            prop_assert_eq!(due.len(), expected);
            prop_assert!(t.next_deadline().is_none_or(|d| d > now));
            prop_assert_eq!(t.len(), deadlines.len() - expected);
        }
    }
}
