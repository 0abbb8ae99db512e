//! [`SbrView`]: one side's view of the cluster as the downing strategies see it — the
//! members, which of them this node cannot reach, and the reachability records — with the
//! derived views the resolver's rules evaluate (another member's own observations, a side
//! cut off, the records without the indirectly connected). Source: Akka's
//! `DowningStrategy` state (Akka documentation "Split Brain Resolver").

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;
use crate::reachability::ReachabilityStatus;

/// One side's view, as the strategies see it.
#[derive(Clone, Debug)]
pub struct SbrView {
    /// The node deciding.
    pub self_node: UniqueAddress,
    /// Every member of the view, any status.
    pub members: Vec<Member>,
    /// Members other than self that this view holds unreachable, plus members that are
    /// Down or Exiting (as Akka's resolver adds them on `MemberDowned`/`MemberExited`).
    pub unreachable: BTreeSet<UniqueAddress>,
    /// `(observer, subject)` of every Unreachable or Terminated record between members
    /// (records of Down observers left out).
    pub records: BTreeSet<(UniqueAddress, UniqueAddress)>,
    /// Members that have seen the current gossip.
    pub seen_by: BTreeSet<UniqueAddress>,
    /// Members Down in this view that an unreachable member may not know are Down: over
    /// there they may still count (filled by the resolver, which tracks who has seen each
    /// downing; empty from [`SbrView::from_state`]).
    pub down_unseen_by_other_side: BTreeSet<UniqueAddress>,
}

impl SbrView {
    /// The view of `state`'s node.
    pub fn from_state(state: &MembershipState) -> SbrView {
        let g = &state.latest_gossip;
        let me = &state.self_unique_address;
        let reach = state.reachability_excluding_downed_observers();
        let records: BTreeSet<(UniqueAddress, UniqueAddress)> = reach
            .records()
            .filter(|(o, s, st)| {
                *st != ReachabilityStatus::Reachable && g.has_member(o) && g.has_member(s)
            })
            .map(|(o, s, _)| (o.clone(), s.clone()))
            .collect();
        let unreachable = reach
            .all_unreachable_or_terminated()
            .into_iter()
            .filter(|n| g.has_member(n))
            .chain(
                g.members
                    .values()
                    .filter(|m| matches!(m.status, MemberStatus::Down | MemberStatus::Exiting))
                    .map(|m| m.unique_address.clone()),
            )
            .filter(|n| n != me)
            .collect();
        SbrView {
            self_node: me.clone(),
            members: g.members.values().cloned().collect(),
            unreachable,
            records,
            seen_by: g.overview.seen.clone(),
            down_unseen_by_other_side: BTreeSet::new(),
        }
    }

    /// Of the members in `down_unseen_by_other_side`, those with `role`.
    pub(super) fn down_unseen(&self, role: Option<&str>) -> Vec<&Member> {
        self.members
            .iter()
            .filter(|m| self.down_unseen_by_other_side.contains(&m.unique_address))
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .collect()
    }

    /// Members counted by a decision: never Down, Exiting or Removed; Joining and WeaklyUp
    /// only with `including_possibly_up` (they may be Up on the other side); Leaving not
    /// with `excluding_possibly_exiting` (it may be Exiting on the other side); only
    /// members with `role` when one is set. Sorted by address.
    pub fn counted(
        &self,
        role: Option<&str>,
        including_possibly_up: bool,
        excluding_possibly_exiting: bool,
    ) -> Vec<&Member> {
        let mut v: Vec<&Member> = self
            .members
            .iter()
            .filter(|m| match m.status {
                MemberStatus::Joining | MemberStatus::WeaklyUp => including_possibly_up,
                MemberStatus::Leaving => !excluding_possibly_exiting,
                MemberStatus::Up
                | MemberStatus::PreparingForShutdown
                | MemberStatus::ReadyForShutdown => true,
                MemberStatus::Down | MemberStatus::Exiting | MemberStatus::Removed => false,
            })
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .collect();
        v.sort_by(|a, b| a.unique_address.cmp(&b.unique_address));
        v
    }

    pub(super) fn count(
        &self,
        role: Option<&str>,
        up: bool,
        exiting: bool,
        reachable: bool,
    ) -> usize {
        self.counted(role, up, exiting)
            .iter()
            .filter(|m| self.unreachable.contains(&m.unique_address) != reachable)
            .count()
    }

    pub(super) fn is_unreachable(&self, m: &Member) -> bool {
        self.unreachable.contains(&m.unique_address)
    }

    /// Members that can be downed: every member that is not Down or Exiting (a member
    /// that is leaving anyway is removed by the normal path).
    pub fn downable(&self) -> BTreeSet<UniqueAddress> {
        self.members
            .iter()
            .filter(|m| {
                !matches!(
                    m.status,
                    MemberStatus::Down | MemberStatus::Exiting | MemberStatus::Removed
                )
            })
            .map(|m| m.unique_address.clone())
            .collect()
    }

    /// Observers that are themselves observed unreachable (a cycle in the unreachability
    /// graph).
    pub(super) fn observers_that_are_subjects(&self) -> BTreeSet<UniqueAddress> {
        let subjects: BTreeSet<&UniqueAddress> = self.records.iter().map(|(_, s)| s).collect();
        self.records
            .iter()
            .map(|(o, _)| o)
            .filter(|o| subjects.contains(o))
            .cloned()
            .collect()
    }

    /// Both ends of every record whose subject has seen the current gossip (it is reported
    /// unreachable, yet gossip reaches it).
    pub(super) fn ends_of_records_with_seen_subject(&self) -> BTreeSet<UniqueAddress> {
        self.records
            .iter()
            .filter(|(_, s)| self.seen_by.contains(s))
            .flat_map(|(o, s)| [o.clone(), s.clone()])
            .collect()
    }

    /// Members that are unreachable over some links but still talk to the cluster through
    /// others: observers that are also observed unreachable, and both ends of a record
    /// whose subject has seen the current gossip. Clean partitions and crashes produce none.
    pub fn indirectly_connected(&self) -> BTreeSet<UniqueAddress> {
        let mut out = self.observers_that_are_subjects();
        out.extend(self.ends_of_records_with_seen_subject());
        out
    }

    /// This view as this node observes it itself: unreachable only what it cannot hear, no
    /// other observations (so no indirect connections).
    pub(super) fn own_observations(&self) -> SbrView {
        self.observations_of(&self.self_node)
    }

    /// This view as member `observer` observes it itself, as the records here show: from
    /// `observer`, unreachable only what it cannot hear, no other observations.
    pub(super) fn observations_of(&self, observer: &UniqueAddress) -> SbrView {
        let unreachable: BTreeSet<UniqueAddress> = self
            .records
            .iter()
            .filter(|(o, _)| o == observer)
            .map(|(_, s)| s.clone())
            .chain(
                self.members
                    .iter()
                    .filter(|m| matches!(m.status, MemberStatus::Down | MemberStatus::Exiting))
                    .map(|m| m.unique_address.clone()),
            )
            .filter(|n| n != observer)
            .collect();
        SbrView {
            self_node: observer.clone(),
            members: self.members.clone(),
            unreachable,
            records: BTreeSet::new(),
            seen_by: self.seen_by.clone(),
            down_unseen_by_other_side: self.down_unseen_by_other_side.clone(),
        }
    }

    /// Of the indirectly connected members, as few as leave no unreachability record
    /// between the kept ones: every one that a member outside them observes unreachable,
    /// then, one at a time, the one in the most records left between the others (ties: not
    /// this node, then the highest address). Two members that cannot hear each other: the
    /// one with the higher address.
    pub fn indirectly_connected_to_down(&self) -> BTreeSet<UniqueAddress> {
        let indirect = self.indirectly_connected();
        let mut down: BTreeSet<UniqueAddress> = self
            .records
            .iter()
            .filter(|(o, s)| indirect.contains(s) && !indirect.contains(o))
            .map(|(_, s)| s.clone())
            .collect();
        let mut between: Vec<&(UniqueAddress, UniqueAddress)> = self
            .records
            .iter()
            .filter(|(o, s)| o != s && indirect.contains(o) && indirect.contains(s))
            .collect();
        loop {
            between.retain(|(o, s)| !down.contains(o) && !down.contains(s));
            let mut degree: BTreeMap<&UniqueAddress, usize> = BTreeMap::new();
            for (o, s) in &between {
                *degree.entry(o).or_default() += 1;
                *degree.entry(s).or_default() += 1;
            }
            let Some(pick) = degree
                .into_iter()
                .max_by_key(|(n, d)| (*d, **n != self.self_node, *n))
                .map(|(n, _)| n.clone())
            else {
                return down;
            };
            down.insert(pick);
        }
    }

    /// This view as it would be were the members in `cut` (some or all of the indirectly
    /// connected) cut off from this node by a clean partition, together: they unreachable
    /// from here, no other observations, and the members that are unreachable otherwise
    /// (crashed or cut off cleanly — the strategy's second evaluation decides about them)
    /// left out.
    pub(super) fn with_cut_off(&self, cut: &BTreeSet<UniqueAddress>) -> SbrView {
        let indirect = self.indirectly_connected();
        let left_out: BTreeSet<&UniqueAddress> = self
            .unreachable
            .iter()
            .filter(|n| !indirect.contains(*n))
            .collect();
        SbrView {
            self_node: self.self_node.clone(),
            members: self
                .members
                .iter()
                .filter(|m| !left_out.contains(&m.unique_address))
                .cloned()
                .collect(),
            unreachable: cut.clone(),
            records: BTreeSet::new(),
            seen_by: self.seen_by.clone(),
            down_unseen_by_other_side: self.down_unseen_by_other_side.clone(),
        }
    }

    /// This view as member `observer` would decide on it: the same members, unreachable
    /// set and records, with `observer` as the deciding node (for a view without records,
    /// such as [`SbrView::with_cut_off`]'s, that is the other side's complement).
    pub(super) fn seen_by(&self, observer: &UniqueAddress) -> SbrView {
        SbrView {
            self_node: observer.clone(),
            ..self.clone()
        }
    }

    /// This view with the observations between indirectly connected members left out
    /// (and those of members that cannot be downed): the view the strategy decides on for
    /// the rest of the cluster.
    pub(super) fn without_indirect_observations(
        &self,
        downable: &BTreeSet<UniqueAddress>,
    ) -> SbrView {
        let cycle = self.observers_that_are_subjects();
        let seen = self.ends_of_records_with_seen_subject();
        let records: BTreeSet<(UniqueAddress, UniqueAddress)> = self
            .records
            .iter()
            .filter(|(o, s)| {
                downable.contains(o)
                    && downable.contains(s)
                    && !(cycle.contains(o) && cycle.contains(s))
                    && !(seen.contains(o) && seen.contains(s))
            })
            .cloned()
            .collect();
        SbrView {
            self_node: self.self_node.clone(),
            members: self.members.clone(),
            unreachable: records.iter().map(|(_, s)| s.clone()).collect(),
            records,
            seen_by: self.seen_by.clone(),
            down_unseen_by_other_side: self.down_unseen_by_other_side.clone(),
        }
    }
}
