//! The services' removal margin (as the singleton's `removal-margin`, Akka's
//! `down-removal-margin`): the leader leaves the paths of a host it saw Down or gone as
//! they are for `removal_margin_ms`, so that a host cut off or paused learns it is Down and
//! stops its instances before another node starts them. See
//! [`ServicesSettings::removal_margin_ms`](super::ServicesSettings::removal_margin_ms).

use std::collections::BTreeSet;

use super::machine::ServicesMachine;
use super::{PartitionPath, ServicesState};
use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;

impl ServicesMachine {
    /// Whether `n` is dead in this node's view: Down, or not a member.
    fn is_dead(&self, n: &UniqueAddress) -> bool {
        self.view.as_ref().is_some_and(|v| {
            v.members
                .get(n)
                .is_none_or(|m| m.status == MemberStatus::Down)
        })
    }

    /// Whether `n` hosts an instance or is in a pending change.
    fn hosts_or_pending(&self, n: &UniqueAddress) -> bool {
        !self.state.table.instances_on(n).is_empty()
            || self
                .state
                .pending
                .iter()
                .any(|c| c.to == *n || c.from.as_ref() == Some(n))
    }

    /// Records when this node first saw each member Down or gone (for the removal margin;
    /// call with the new view in place): members of `old` that died, and members Down in
    /// the new view that it never saw die (it joined after). Records are forgotten when the
    /// node is alive in the new view, and once the margin has passed and the node is
    /// neither a member nor a host.
    pub(super) fn note_written_off(&mut self, now_ms: u64, old: Option<&MembershipView>) {
        let margin = self.settings.removal_margin_ms;
        if margin == 0 {
            self.written_off.clear();
            return;
        }
        let mut dead: Vec<UniqueAddress> = old
            .map(|o| {
                o.members
                    .keys()
                    .filter(|n| self.is_dead(n))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if let Some(v) = self.view.as_ref() {
            dead.extend(
                v.members
                    .iter()
                    .filter(|(_, m)| m.status == MemberStatus::Down)
                    .map(|(n, _)| n.clone()),
            );
        }
        for n in dead {
            self.written_off.entry(n).or_insert(now_ms);
        }
        let keep: Vec<UniqueAddress> = self
            .written_off
            .iter()
            .filter(|(n, at)| {
                // A node alive in this view (a host this node had not heard of yet) has no
                // record: when it dies, its margin starts then.
                self.is_dead(n)
                    && (at.saturating_add(margin) > now_ms
                        || self
                            .view
                            .as_ref()
                            .is_some_and(|v| v.members.contains_key(*n))
                        || self.hosts_or_pending(n))
            })
            .map(|(n, _)| n.clone())
            .collect();
        self.written_off.retain(|n, _| keep.contains(n));
    }

    /// The paths the leader must leave as they are: those with an instance on, or a
    /// pending change from or to, a node this node first saw dead (Down or gone) less than
    /// `removal-margin` ago — the time that node has to learn it is Down and stop its
    /// instances. A dead host this node has no record of (it never knew it alive, e.g. a
    /// new leader that joined after) is recorded now, so a new leader waits the margin too.
    pub(super) fn frozen_by_removal_margin(&mut self, now_ms: u64) -> BTreeSet<PartitionPath> {
        let margin = self.settings.removal_margin_ms;
        if margin == 0 {
            return BTreeSet::new();
        }
        let hosts: BTreeSet<UniqueAddress> = self
            .state
            .table
            .iter()
            .flat_map(|(_, nodes)| nodes.iter())
            .chain(
                self.state
                    .pending
                    .iter()
                    .flat_map(|c| std::iter::once(&c.to).chain(c.from.as_ref())),
            )
            .cloned()
            .collect();
        for n in hosts {
            if self.is_dead(&n) {
                self.written_off.entry(n).or_insert(now_ms);
            }
        }
        let waiting: BTreeSet<&UniqueAddress> = self
            .written_off
            .iter()
            .filter(|(_, at)| at.saturating_add(margin) > now_ms)
            .map(|(n, _)| n)
            .collect();
        if waiting.is_empty() {
            return BTreeSet::new();
        }
        let mut frozen: BTreeSet<PartitionPath> = self
            .state
            .table
            .iter()
            .filter(|(_, nodes)| nodes.iter().any(|n| waiting.contains(n)))
            .map(|(p, _)| p.clone())
            .collect();
        frozen.extend(
            self.state
                .pending
                .iter()
                .filter(|c| {
                    waiting.contains(&c.to) || c.from.as_ref().is_some_and(|f| waiting.contains(f))
                })
                .map(|c| c.path.clone()),
        );
        frozen
    }

    /// Puts the `frozen` paths of `next` (the leader's next state) back as they are now:
    /// their table entries and pending changes. Whether `next` still differs from the
    /// current state (when it does not, there is nothing to write).
    pub(super) fn hold_frozen_paths(
        &self,
        next: &mut ServicesState,
        frozen: &BTreeSet<PartitionPath>,
    ) -> bool {
        if frozen.is_empty() {
            return true;
        }
        for path in frozen {
            match self.state.table.instances(path) {
                Some(nodes) => next.table.insert(path.clone(), nodes.to_vec()),
                None => next.table.remove(path),
            };
        }
        next.pending.retain(|c| !frozen.contains(&c.path));
        next.pending.extend(
            self.state
                .pending
                .iter()
                .filter(|c| frozen.contains(&c.path))
                .cloned(),
        );
        let same_pending = next.pending.len() == self.state.pending.len()
            && next.pending.iter().all(|c| self.state.pending.contains(c));
        next.table != self.state.table || !same_pending
    }
}
