//! [`OldestChangedBuffer`]: who is the oldest candidate for the singleton, as Akka's
//! `OldestChangedBuffer` counts it.
//!
//! Candidates are the members (with the role) that have an up-number — Up, Leaving,
//! shutting down, and Down until they are removed: a downed oldest may still run the
//! instance, so it stays oldest until it is gone. Another member leaves the candidates
//! when it is Exiting or removed; this node leaves them when its own coordinated shutdown
//! reaches `cluster-exiting` ([`OldestChangedBuffer::self_exiting`]). Age is the
//! up-number, ties by address ([`crate::member::Member::age_cmp`]).

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
}

impl OldestChangedBuffer {
    /// An empty buffer for `self_node`, counting members with `role`.
    pub fn new(self_node: UniqueAddress, role: Option<String>) -> Self {
        OldestChangedBuffer {
            self_node,
            role,
            by_age: Vec::new(),
            self_exited: false,
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
        let mut by_age: Vec<(u32, UniqueAddress)> = view
            .members
            .values()
            .filter(|m| self.role.as_deref().is_none_or(|r| m.has_role(r)))
            .filter(|m| m.up_number != UP_NUMBER_UNSET)
            .filter(|m| match m.status {
                MemberStatus::Up
                | MemberStatus::Leaving
                | MemberStatus::PreparingForShutdown
                | MemberStatus::ReadyForShutdown
                | MemberStatus::Down => true,
                MemberStatus::Exiting => m.unique_address == self.self_node,
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
