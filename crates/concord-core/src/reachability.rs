//! [`Reachability`]: who observes whom as unreachable.
//!
//! Spec: cluster-specification.md, "Failure Detector" and cluster-membership-service.md,
//! "Failure Detection and Unreachability"; Akka's `Reachability`. Each observer owns its
//! rows (observer → subject → status) and a version it increments on every change; a merge
//! takes, per observer, the rows with the higher version. A member is unreachable when any
//! observer says so, and reachable again only when every observer that said so says
//! reachable. `Terminated` is final (an old incarnation that is known to be gone).

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;

/// What one observer thinks of one subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReachabilityStatus {
    /// Heartbeats arrive (again).
    Reachable,
    /// The failure detector of the observer suspects the subject.
    Unreachable,
    /// The subject is known to be gone for good (e.g. replaced by a new incarnation).
    Terminated,
}

/// The reachability table gossiped with the membership state.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Reachability {
    /// observer → subject → status. Observers with only Reachable rows are pruned.
    rows: BTreeMap<UniqueAddress, BTreeMap<UniqueAddress, ReachabilityStatus>>,
    /// observer → version of its rows.
    versions: BTreeMap<UniqueAddress, u64>,
}

impl Reachability {
    /// The empty table (everyone reachable).
    pub fn new() -> Self {
        Self::default()
    }

    /// Rebuilds a table from its wire parts: `(observer, subject, status)` records and
    /// observer versions.
    pub fn from_parts(
        records: impl IntoIterator<Item = (UniqueAddress, UniqueAddress, ReachabilityStatus)>,
        versions: impl IntoIterator<Item = (UniqueAddress, u64)>,
    ) -> Self {
        let mut rows: BTreeMap<UniqueAddress, BTreeMap<UniqueAddress, ReachabilityStatus>> =
            BTreeMap::new();
        for (o, s, st) in records {
            rows.entry(o).or_default().insert(s, st);
        }
        Reachability {
            rows,
            versions: versions.into_iter().collect(),
        }
    }

    /// All `(observer, subject, status)` records.
    pub fn records(
        &self,
    ) -> impl Iterator<Item = (&UniqueAddress, &UniqueAddress, ReachabilityStatus)> {
        self.rows
            .iter()
            .flat_map(|(o, r)| r.iter().map(move |(s, st)| (o, s, *st)))
    }

    /// Observer versions.
    pub fn versions(&self) -> impl Iterator<Item = (&UniqueAddress, u64)> {
        self.versions.iter().map(|(k, v)| (k, *v))
    }

    fn change(
        &self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
        status: ReachabilityStatus,
    ) -> Reachability {
        let old_rows = self.rows.get(observer);
        let old = old_rows.and_then(|r| r.get(subject)).copied();
        match old {
            Some(ReachabilityStatus::Terminated) => return self.clone(),
            Some(s) if s == status => return self.clone(),
            None if status == ReachabilityStatus::Reachable => return self.clone(),
            _ => {}
        }
        let mut next = self.clone();
        let v = next.versions.entry(observer.clone()).or_insert(0);
        *v += 1;
        let rows = next.rows.entry(observer.clone()).or_default();
        rows.insert(subject.clone(), status);
        if rows.values().all(|s| *s == ReachabilityStatus::Reachable) {
            // All reachable again for this observer: prune its rows, keep the bumped version.
            next.rows.remove(observer);
        }
        next
    }

    /// `observer` detected `subject` as unreachable.
    pub fn unreachable(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> Reachability {
        self.change(observer, subject, ReachabilityStatus::Unreachable)
    }

    /// `observer` detected `subject` as reachable again.
    pub fn reachable(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> Reachability {
        self.change(observer, subject, ReachabilityStatus::Reachable)
    }

    /// `observer` knows `subject` is gone for good.
    pub fn terminated(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> Reachability {
        self.change(observer, subject, ReachabilityStatus::Terminated)
    }

    /// Merges two tables: per observer the rows with the higher version win (ties broken
    /// deterministically). Rows whose observer or subject is not `allowed` are dropped.
    /// Commutative, associative and idempotent for a fixed `allowed`.
    pub fn merge(
        &self,
        other: &Reachability,
        allowed: impl Fn(&UniqueAddress) -> bool,
    ) -> Reachability {
        let observers: BTreeSet<&UniqueAddress> =
            self.versions.keys().chain(other.versions.keys()).collect();
        let mut out = Reachability::new();
        let empty = BTreeMap::new();
        for o in observers {
            if !allowed(o) {
                continue;
            }
            let v1 = self.versions.get(o).copied().unwrap_or(0);
            let v2 = other.versions.get(o).copied().unwrap_or(0);
            let r1 = self.rows.get(o).unwrap_or(&empty);
            let r2 = other.rows.get(o).unwrap_or(&empty);
            let rows = match v1.cmp(&v2) {
                std::cmp::Ordering::Greater => r1,
                std::cmp::Ordering::Less => r2,
                std::cmp::Ordering::Equal => r1.max(r2),
            };
            let filtered: BTreeMap<_, _> = rows
                .iter()
                .filter(|(s, _)| allowed(s))
                .map(|(s, st)| (s.clone(), *st))
                .collect();
            if !filtered.is_empty() {
                out.rows.insert(o.clone(), filtered);
            }
            out.versions.insert(o.clone(), v1.max(v2));
        }
        out
    }

    /// Drops every record where `nodes` is observer or subject, and those observers' versions.
    pub fn remove<'a>(&self, nodes: impl IntoIterator<Item = &'a UniqueAddress>) -> Reachability {
        let nodes: BTreeSet<&UniqueAddress> = nodes.into_iter().collect();
        let mut next = self.clone();
        next.rows.retain(|o, _| !nodes.contains(o));
        next.versions.retain(|o, _| !nodes.contains(o));
        for r in next.rows.values_mut() {
            r.retain(|s, _| !nodes.contains(s));
        }
        next.rows
            .retain(|_, r| r.values().any(|s| *s != ReachabilityStatus::Reachable));
        next
    }

    /// Drops the rows of the given observers (e.g. downed observers, whose opinion no
    /// longer counts for convergence).
    pub fn remove_observers(&self, observers: &BTreeSet<UniqueAddress>) -> Reachability {
        if observers.is_empty() {
            return self.clone();
        }
        let mut next = self.clone();
        next.rows.retain(|o, _| !observers.contains(o));
        next.versions.retain(|o, _| !observers.contains(o));
        next
    }

    /// Aggregated status of `subject`: Terminated if any observer says so, else
    /// Unreachable if any observer says so, else Reachable.
    pub fn status(&self, subject: &UniqueAddress) -> ReachabilityStatus {
        let mut st = ReachabilityStatus::Reachable;
        for r in self.rows.values() {
            if let Some(s) = r.get(subject) {
                st = st.max(*s);
            }
        }
        st
    }

    /// What `observer` says of `subject`.
    pub fn status_from(
        &self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
    ) -> ReachabilityStatus {
        self.rows
            .get(observer)
            .and_then(|r| r.get(subject))
            .copied()
            .unwrap_or(ReachabilityStatus::Reachable)
    }

    /// True if no observer says `subject` is unreachable or terminated.
    pub fn is_reachable(&self, subject: &UniqueAddress) -> bool {
        self.status(subject) == ReachabilityStatus::Reachable
    }

    /// True if `observer` does not say `subject` is unreachable or terminated.
    pub fn is_reachable_from(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> bool {
        self.status_from(observer, subject) == ReachabilityStatus::Reachable
    }

    /// True if nobody is unreachable or terminated.
    pub fn is_all_reachable(&self) -> bool {
        self.rows.is_empty()
    }

    /// Subjects that some observer sees as Unreachable or Terminated.
    pub fn all_unreachable_or_terminated(&self) -> BTreeSet<UniqueAddress> {
        self.rows
            .values()
            .flat_map(|r| {
                r.iter()
                    .filter(|(_, s)| **s != ReachabilityStatus::Reachable)
                    .map(|(k, _)| k.clone())
            })
            .collect()
    }

    /// Subjects that `observer` sees as Unreachable — not Terminated (Akka's
    /// `allUnreachableFrom`).
    pub fn all_unreachable_from(&self, observer: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        self.rows
            .get(observer)
            .map(|r| {
                r.iter()
                    .filter(|(_, s)| **s == ReachabilityStatus::Unreachable)
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// subject → observers that see it as Unreachable; Terminated records are left out
    /// (Akka's `observersGroupedByUnreachable`).
    pub fn observers_by_unreachable_subject(
        &self,
    ) -> BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> {
        self.observers_by_subject(|st| st == ReachabilityStatus::Unreachable)
    }

    /// subject → observers that see it as Unreachable or Terminated: the members a
    /// [`crate::MembershipView`] reports unreachable, as Akka's cluster state does
    /// (`allUnreachableOrTerminated`).
    pub fn observers_by_unreachable_or_terminated_subject(
        &self,
    ) -> BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> {
        self.observers_by_subject(|st| st != ReachabilityStatus::Reachable)
    }

    fn observers_by_subject(
        &self,
        counts: impl Fn(ReachabilityStatus) -> bool,
    ) -> BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> {
        let mut out: BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> = BTreeMap::new();
        for (o, s, st) in self.records() {
            if counts(st) {
                out.entry(s.clone()).or_default().insert(o.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Address;
    use proptest::prelude::*;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "h", i + 1), 7)
    }

    #[test]
    fn unreachable_from_and_grouped_by_unreachable_leave_terminated_out() {
        // Akka's `allUnreachableFrom` and `observersGroupedByUnreachable` count Unreachable
        // records only; Terminated ones are in the "or terminated" queries.
        let r = Reachability::new()
            .unreachable(&n(1), &n(2))
            .terminated(&n(1), &n(3))
            .terminated(&n(4), &n(2))
            .unreachable(&n(4), &n(5));
        assert_eq!(r.all_unreachable_from(&n(1)), [n(2)].into());
        assert_eq!(r.all_unreachable_from(&n(4)), [n(5)].into());
        let grouped = r.observers_by_unreachable_subject();
        assert_eq!(
            grouped,
            [(n(2), [n(1)].into()), (n(5), [n(4)].into())].into()
        );
        let all = r.observers_by_unreachable_or_terminated_subject();
        assert_eq!(all[&n(2)], [n(1), n(4)].into());
        assert_eq!(all[&n(3)], [n(1)].into());
        assert_eq!(r.all_unreachable_or_terminated(), [n(2), n(3), n(5)].into());
    }

    #[test]
    fn one_observer_is_enough_to_make_a_member_unreachable() {
        let r = Reachability::new().unreachable(&n(1), &n(3));
        assert!(!r.is_reachable(&n(3)));
        assert!(r.is_reachable(&n(1)));
        assert!(!r.is_all_reachable());
    }

    #[test]
    fn reachable_again_only_when_every_observer_says_so() {
        let r = Reachability::new()
            .unreachable(&n(1), &n(3))
            .unreachable(&n(2), &n(3));
        let r = r.reachable(&n(1), &n(3));
        assert!(!r.is_reachable(&n(3)), "observer 2 still says unreachable");
        let r = r.reachable(&n(2), &n(3));
        assert!(r.is_reachable(&n(3)));
        assert!(r.is_all_reachable(), "all-reachable rows are pruned");
        assert_eq!(r.versions().count(), 2, "versions are kept after pruning");
    }

    #[test]
    fn terminated_is_final() {
        let r = Reachability::new()
            .terminated(&n(1), &n(3))
            .reachable(&n(1), &n(3));
        assert_eq!(r.status(&n(3)), ReachabilityStatus::Terminated);
    }

    #[test]
    fn merge_takes_the_newer_rows_of_each_observer() {
        let old = Reachability::new().unreachable(&n(1), &n(3));
        let new = old.reachable(&n(1), &n(3));
        let other = Reachability::new().unreachable(&n(2), &n(4));
        let m = old.merge(&new, |_| true).merge(&other, |_| true);
        assert!(m.is_reachable(&n(3)));
        assert!(!m.is_reachable(&n(4)));
    }

    #[test]
    fn merge_drops_rows_of_disallowed_nodes() {
        let r = Reachability::new()
            .unreachable(&n(1), &n(3))
            .unreachable(&n(2), &n(4));
        let m = r.merge(&r, |x| *x != n(3) && *x != n(2));
        assert!(m.is_all_reachable());
    }

    #[test]
    fn remove_forgets_nodes_as_observers_and_subjects() {
        let r = Reachability::new()
            .unreachable(&n(1), &n(3))
            .unreachable(&n(3), &n(2));
        let r = r.remove([&n(3)]);
        assert!(r.is_all_reachable());
    }

    fn arb_reach() -> impl Strategy<Value = Reachability> {
        proptest::collection::vec((0u16..4, 0u16..4, 0u8..3), 0..10).prop_map(|ops| {
            let mut r = Reachability::new();
            for (o, s, op) in ops {
                if o == s {
                    continue;
                }
                r = match op {
                    0 => r.unreachable(&n(o), &n(s)),
                    1 => r.reachable(&n(o), &n(s)),
                    _ => r.terminated(&n(o), &n(s)),
                };
            }
            r
        })
    }

    proptest! {
        #[test]
        fn merge_is_commutative_associative_idempotent(a in arb_reach(), b in arb_reach(), c in arb_reach()) {
            let all = |_: &UniqueAddress| true;
            prop_assert_eq!(a.merge(&b, all), b.merge(&a, all));
            prop_assert_eq!(a.merge(&b, all).merge(&c, all), a.merge(&b.merge(&c, all), all));
            prop_assert_eq!(a.merge(&a, all), a.clone());
        }
    }
}
