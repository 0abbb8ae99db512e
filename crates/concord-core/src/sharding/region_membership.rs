//! What a `ShardRegion` remembers of the membership beyond the current view (Pekko
//! `ShardRegion.scala` keeps the members it routes to; spec `cluster-sharding-concepts.md`,
//! *Crash*): whether this node hosts shards, whether it has been a member (so that a view
//! without it means it was removed), and which members were removed lately and when (their
//! messages for entities still in flight are accepted for `handoff-timeout`; their shards
//! move once `removal-margin` has passed).

use std::collections::BTreeMap;

use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;

use super::settings::ShardingSettings;

/// The region's memory of the membership.
#[derive(Debug, Default)]
pub(super) struct RegionMembership {
    /// This node hosts shards (not proxy-only, has the role).
    pub(super) hosting: bool,
    /// This node has been a member (so a view without it means it was removed).
    was_member: bool,
    /// The machine was told to stop hosting entities.
    pub(super) stopped_hosting: bool,
    /// Members removed in the last `handoff-timeout`, with when (ms): their messages for
    /// entities still in flight are accepted.
    removed: BTreeMap<UniqueAddress, u64>,
}

impl RegionMembership {
    /// The membership changes from `old` to `new` (before the machine keeps `new`):
    /// remembers removed members for `handoff-timeout` or `removal-margin`, whichever is
    /// longer, and whether this node hosts.
    pub(super) fn view_changed(
        &mut self,
        settings: &ShardingSettings,
        old: &MembershipView,
        new: &MembershipView,
        now_ms: u64,
    ) {
        for gone in old.members.keys() {
            if !new.members.contains_key(gone) {
                self.removed.insert(gone.clone(), now_ms);
            }
        }
        let keep = settings.handoff_timeout_ms.max(settings.removal_margin_ms);
        self.removed
            .retain(|_, at| at.saturating_add(keep) > now_ms);
        self.was_member |= new.self_member().is_some();
        self.hosting = !settings.proxy_only
            && new
                .self_member()
                .is_some_and(|m| settings.role.as_deref().is_none_or(|r| m.has_role(r)));
    }

    /// True if `node` was removed less than `handoff_timeout_ms` ago.
    pub(super) fn recently_removed(
        &self,
        node: &UniqueAddress,
        handoff_timeout_ms: u64,
        now_ms: u64,
    ) -> bool {
        self.removed
            .get(node)
            .is_some_and(|at| at.saturating_add(handoff_timeout_ms) > now_ms)
    }

    /// True once `node` has been out of the membership for at least `removal-margin`: a
    /// crashed or downed node has had the time to notice and stop what it ran.
    pub(super) fn gone_for_good(
        &self,
        view: &MembershipView,
        removal_margin_ms: u64,
        node: &UniqueAddress,
        now_ms: u64,
    ) -> bool {
        !view.members.contains_key(node)
            && self
                .removed
                .get(node)
                .is_none_or(|at| at.saturating_add(removal_margin_ms) <= now_ms)
    }

    /// True once this node is Down or removed (in `view`): nothing starts here any more.
    pub(super) fn self_down(&self, view: &MembershipView) -> bool {
        view.self_member()
            .is_some_and(|m| matches!(m.status, MemberStatus::Down | MemberStatus::Removed))
            || (self.was_member && view.self_member().is_none())
    }
}
