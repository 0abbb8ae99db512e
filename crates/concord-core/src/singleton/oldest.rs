//! [`OldestChangedBuffer`]: who is the oldest candidate for the singleton, as Akka's
//! `OldestChangedBuffer` counts it.
//!
//! Candidates are the members (with the role) that have an up-number — Up, shutting down,
//! and Down until they are removed: a downed oldest may still run the instance, so it stays
//! oldest until it is gone. Another member leaves the candidates for good as soon as it is
//! seen Leaving (Akka waits for Exiting; starting the hand-over one leader action earlier
//! is safe because the new instance still starts only after the old one has stopped) or
//! removed; this node leaves them when its own coordinated shutdown reaches
//! `cluster-exiting` ([`OldestChangedBuffer::self_exiting`]). Age is the up-number, ties by
//! address ([`crate::member::Member::age_cmp`]).

use crate::address::UniqueAddress;
use crate::member::{MemberStatus, UP_NUMBER_UNSET};
use crate::membership_view::MembershipView;

/// The candidates for the singleton, oldest first.
#[derive(Clone, Debug)]
pub struct OldestChangedBuffer {
    self_node: UniqueAddress,
    role: Option<String>,
    by_age: Vec<(u32, UniqueAddress)>,
    self_exited: bool,
    /// Other members seen Leaving or Exiting: never candidates again (bounded by the
    /// membership: entries of members no longer in it are dropped).
    departed: std::collections::BTreeSet<UniqueAddress>,
}

impl OldestChangedBuffer {
    /// An empty buffer for `self_node`, counting members with `role`.
    pub fn new(self_node: UniqueAddress, role: Option<String>) -> Self {
        OldestChangedBuffer {
            self_node,
            role,
            by_age: Vec::new(),
            self_exited: false,
            departed: std::collections::BTreeSet::new(),
        }
    }

    /// The oldest candidate.
    pub fn oldest(&self) -> Option<&UniqueAddress> {
        self.by_age.first().map(|(_, u)| u)
    }

    /// Candidates, oldest first.
    pub fn candidates(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.by_age.iter().map(|(_, u)| u)
    }

    /// True once this node left the candidates.
    pub fn self_exited(&self) -> bool {
        self.self_exited
    }

    /// Recomputes the candidates from `view`; returns the new oldest if it changed.
    pub fn update(&mut self, view: &MembershipView) -> Option<Option<UniqueAddress>> {
        let before = self.oldest().cloned();
        self.departed.retain(|d| view.members.contains_key(d));
        for m in view.members.values() {
            if m.unique_address != self.self_node
                && matches!(m.status, MemberStatus::Leaving | MemberStatus::Exiting)
            {
                self.departed.insert(m.unique_address.clone());
            }
        }
        let mut by_age: Vec<(u32, UniqueAddress)> = view
            .members
            .values()
            .filter(|m| self.role.as_deref().is_none_or(|r| m.has_role(r)))
            .filter(|m| m.up_number != UP_NUMBER_UNSET)
            .filter(|m| !self.departed.contains(&m.unique_address))
            .filter(|m| match m.status {
                MemberStatus::Up
                | MemberStatus::PreparingForShutdown
                | MemberStatus::ReadyForShutdown
                | MemberStatus::Down => true,
                // This node stays a candidate until its `cluster-exiting` phase.
                MemberStatus::Leaving | MemberStatus::Exiting => m.unique_address == self.self_node,
                MemberStatus::Joining | MemberStatus::WeaklyUp | MemberStatus::Removed => false,
            })
            .filter(|m| !(self.self_exited && m.unique_address == self.self_node))
            .map(|m| (m.up_number, m.unique_address.clone()))
            .collect();
        by_age.sort();
        self.by_age = by_age;
        let after = self.oldest().cloned();
        (after != before).then_some(after)
    }

    /// This node stops being a candidate; returns the new oldest if it changed.
    pub fn self_exiting(&mut self) -> Option<Option<UniqueAddress>> {
        let before = self.oldest().cloned();
        self.self_exited = true;
        let me = self.self_node.clone();
        self.by_age.retain(|(_, u)| *u != me);
        let after = self.oldest().cloned();
        (after != before).then_some(after)
    }
}
