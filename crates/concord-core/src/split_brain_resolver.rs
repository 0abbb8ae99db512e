//! [`SplitBrainResolver`]: automatic downing of unreachable members so that exactly one side
//! of a partition keeps running.
//!
//! Spec: cluster-membership-service.md, "Leader" (split brain) and "User Actions" (downing
//! provider); cluster-specification.md, "Membership Lifecycle" (why auto-down without a
//! strategy creates islands). Model: Akka's Split Brain Resolver. A node cannot tell a crash
//! from a partition, so every side takes the same kind of decision from its own view, and
//! the strategies are built so that the decisions of the two sides are complementary:
//!
//! - **keep-majority**: the side with more than half of the counted members survives; on a
//!   tie the side with the lowest address survives.
//! - **static-quorum**: a side with at least `quorum-size` members survives; if the cluster
//!   grew beyond `quorum-size * 2 - 1`, everyone is downed.
//! - **keep-oldest**: the side with the oldest member survives; with `down-if-alone`, an
//!   oldest member cut off from all others downs itself instead.
//! - **down-all**: every member is downed.
//! - **lease-majority**: the side that acquires a lease survives; the minority waits
//!   `acquire-lease-delay-for-minority` before trying, so the majority usually wins.
//!
//! Counted members are those that are not Joining, WeaklyUp, Down or Exiting (the other
//! side may not know about new members). Decisions wait until the set of unreachable
//! members has been stable for `stable-after`; if it keeps changing for longer than
//! `stable-after + down-all-when-unstable`, everyone is downed. Members that are reported
//! unreachable while themselves reporting others (or having seen the current state) are
//! *indirectly connected* and are downed in addition to the decision. Only the leader of
//! each side acts.

use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::member::{Member, MemberStatus};
use crate::membership_state::MembershipState;
use crate::reachability::ReachabilityStatus;

/// The configured strategy (`split-brain-resolver.active-strategy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DowningStrategy {
    /// `keep-majority`, optionally counting only members with `role`.
    KeepMajority {
        /// Only members with this role count.
        role: Option<String>,
    },
    /// `static-quorum`.
    StaticQuorum {
        /// Minimum members for a side to survive.
        quorum_size: usize,
        /// Only members with this role count.
        role: Option<String>,
    },
    /// `keep-oldest`.
    KeepOldest {
        /// Oldest cut off from all others downs itself.
        down_if_alone: bool,
        /// Only members with this role count.
        role: Option<String>,
    },
    /// `down-all`.
    DownAll,
    /// `lease-majority`.
    LeaseMajority {
        /// Only members with this role count.
        role: Option<String>,
        /// Delay before the minority side tries to acquire the lease, ms (default 2000).
        acquire_lease_delay_for_minority_ms: u64,
        /// The holder releases the lease this long after the members it downed were
        /// removed, ms (`release-after`, default 40000): long enough that the other side,
        /// which asks `acquire-lease-delay-for-minority` later, is refused.
        release_after_ms: u64,
    },
}

impl DowningStrategy {
    /// The strategy's name in configuration.
    pub fn name(&self) -> &'static str {
        match self {
            DowningStrategy::KeepMajority { .. } => "keep-majority",
            DowningStrategy::StaticQuorum { .. } => "static-quorum",
            DowningStrategy::KeepOldest { .. } => "keep-oldest",
            DowningStrategy::DownAll => "down-all",
            DowningStrategy::LeaseMajority { .. } => "lease-majority",
        }
    }

    fn role(&self) -> Option<&str> {
        match self {
            DowningStrategy::KeepMajority { role }
            | DowningStrategy::StaticQuorum { role, .. }
            | DowningStrategy::KeepOldest { role, .. }
            | DowningStrategy::LeaseMajority { role, .. } => role.as_deref(),
            DowningStrategy::DownAll => None,
        }
    }
}

/// Split Brain Resolver settings (units: ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SbrSettings {
    /// The strategy.
    pub strategy: DowningStrategy,
    /// Unreachability must be stable this long before deciding (default 20 s).
    pub stable_after_ms: u64,
    /// Down all when unstable for `stable_after + this`; `None` = off. Default: 3/4 of
    /// stable-after, at least 4 s.
    pub down_all_when_unstable_ms: Option<u64>,
}

impl SbrSettings {
    /// Akka's derived default for `down-all-when-unstable = on`.
    pub fn derived_down_all_when_unstable_ms(stable_after_ms: u64) -> u64 {
        (stable_after_ms * 3 / 4).max(4000)
    }
}

impl Default for SbrSettings {
    fn default() -> Self {
        SbrSettings {
            strategy: DowningStrategy::KeepMajority { role: None },
            stable_after_ms: 20_000,
            down_all_when_unstable_ms: Some(SbrSettings::derived_down_all_when_unstable_ms(20_000)),
        }
    }
}

/// The outcome of a strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep our side, down the unreachable members.
    DownUnreachable,
    /// Down our own side (including self); the other side survives.
    DownReachable,
    /// Down everyone.
    DownAll,
    /// Down only the indirectly connected members.
    DownIndirectlyConnected,
    /// Down our own side and the indirectly connected members.
    ReverseDownIndirectlyConnected,
}

/// What the resolver asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SbrAction {
    /// Mark these members Down.
    Down {
        /// The decision taken.
        decision: Decision,
        /// Members to down.
        nodes: BTreeSet<UniqueAddress>,
    },
    /// Try to acquire the lease after `delay_ms`, then call
    /// [`SplitBrainResolver::on_lease_result`].
    AcquireLease {
        /// Delay before trying, ms (0 for the majority side).
        delay_ms: u64,
    },
    /// Release the lease: the members downed by the decision it was acquired for are
    /// removed (Akka's `ReleaseLeaseCondition.WhenMembersRemoved`).
    ReleaseLease,
}

/// A side's view, as the strategies see it.
#[derive(Clone, Debug)]
pub struct SbrView {
    /// Counted members (not Joining, WeaklyUp, Down, Exiting).
    pub members: Vec<Member>,
    /// Counted or not, members (not Down) seen as unreachable.
    pub unreachable: BTreeSet<UniqueAddress>,
}

impl SbrView {
    fn with_role<'a>(&'a self, role: Option<&'a str>) -> Vec<&'a Member> {
        let v: Vec<&Member> = self
            .members
            .iter()
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .collect();
        if v.is_empty() {
            // No member has the role: fall back to all counted members.
            self.members.iter().collect()
        } else {
            v
        }
    }
}

/// Counted members: the ones that can take part in a quorum decision.
pub fn is_counted(m: &Member) -> bool {
    !matches!(
        m.status,
        MemberStatus::Joining
            | MemberStatus::WeaklyUp
            | MemberStatus::Down
            | MemberStatus::Exiting
            | MemberStatus::Removed
    )
}

/// True if this side holds a majority of the counted members (ties: the side with the
/// lowest address).
pub fn is_majority(view: &SbrView, role: Option<&str>) -> bool {
    let members = view.with_role(role);
    let reachable = members
        .iter()
        .filter(|m| !view.unreachable.contains(&m.unique_address))
        .count();
    let total = members.len();
    if reachable * 2 != total {
        reachable * 2 > total
    } else {
        members
            .iter()
            .map(|m| &m.unique_address)
            .min()
            .is_some_and(|lowest| !view.unreachable.contains(lowest))
    }
}

/// The strategy's decision for `view`. `None` only for lease-majority, whose outcome
/// depends on the lease.
pub fn decide(strategy: &DowningStrategy, view: &SbrView) -> Option<Decision> {
    let role = strategy.role();
    let members = view.with_role(role);
    let reachable: Vec<&&Member> = members
        .iter()
        .filter(|m| !view.unreachable.contains(&m.unique_address))
        .collect();
    let unreachable_count = members.len() - reachable.len();
    Some(match strategy {
        DowningStrategy::KeepMajority { .. } => {
            if is_majority(view, role) {
                Decision::DownUnreachable
            } else {
                Decision::DownReachable
            }
        }
        DowningStrategy::StaticQuorum { quorum_size, .. } => {
            if members.len() > quorum_size.saturating_mul(2).saturating_sub(1) {
                Decision::DownAll
            } else if reachable.len() >= *quorum_size {
                Decision::DownUnreachable
            } else {
                Decision::DownReachable
            }
        }
        DowningStrategy::KeepOldest { down_if_alone, .. } => {
            let Some(oldest) = members.iter().min_by(|a, b| a.age_cmp(b)) else {
                return Some(Decision::DownUnreachable);
            };
            let oldest_here = !view.unreachable.contains(&oldest.unique_address);
            if oldest_here {
                if *down_if_alone && reachable.len() == 1 && unreachable_count > 0 {
                    Decision::DownReachable
                } else {
                    Decision::DownUnreachable
                }
            } else if *down_if_alone && unreachable_count == 1 && !reachable.is_empty() {
                Decision::DownUnreachable
            } else {
                Decision::DownReachable
            }
        }
        DowningStrategy::DownAll => Decision::DownAll,
        DowningStrategy::LeaseMajority { .. } => return None,
    })
}

/// Members that are reported unreachable but are still in touch with the cluster: they
/// report others as unreachable themselves, or they have seen the current gossip — and
/// this node does not see them as unreachable itself.
pub fn indirectly_connected(state: &MembershipState) -> BTreeSet<UniqueAddress> {
    let reach = state.reachability_excluding_downed_observers();
    let g = &state.latest_gossip;
    let mut observers = BTreeSet::new();
    let mut subjects = BTreeSet::new();
    let mut out = BTreeSet::new();
    for (o, s, st) in reach.records() {
        if st == ReachabilityStatus::Unreachable && g.has_member(o) && g.has_member(s) {
            observers.insert(o.clone());
            subjects.insert(s.clone());
            if g.seen_by_node(s) && s != &state.self_unique_address {
                out.insert(o.clone());
                out.insert(s.clone());
            }
        }
    }
    out.extend(observers.intersection(&subjects).cloned());
    // A node this node itself sees as unreachable is not "indirectly connected" from here:
    // its reports may be stale records that crossed before the partition, and treating it
    // as connected would let both sides keep running.
    let own = reach.all_unreachable_from(&state.self_unique_address);
    out.retain(|n| !own.contains(n) && g.member(n).is_some_and(|m| m.status != MemberStatus::Down));
    out
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum LeaseState {
    Idle,
    Pending,
    Granted,
    Refused,
}

/// The resolver's state on one node. Feed it [`SplitBrainResolver::tick`] regularly.
#[derive(Clone, Debug)]
pub struct SplitBrainResolver {
    settings: SbrSettings,
    signature: Option<(BTreeSet<UniqueAddress>, BTreeSet<UniqueAddress>)>,
    stable_deadline_ms: u64,
    first_change_ms: Option<u64>,
    latest_change_ms: u64,
    lease: LeaseState,
    /// The lease is held (acquired for a decision and not released yet): a new decision
    /// uses it without asking again (Akka's `checkLease`).
    lease_held: bool,
    /// After a decision taken with the lease: these downed members must be removed first...
    release_lease_when_removed: Option<BTreeSet<UniqueAddress>>,
    /// ...then the lease is released at this time, ms.
    release_lease_at_ms: Option<u64>,
}

impl SplitBrainResolver {
    /// A resolver with `settings`.
    pub fn new(settings: SbrSettings) -> Self {
        SplitBrainResolver {
            settings,
            signature: None,
            stable_deadline_ms: 0,
            first_change_ms: None,
            latest_change_ms: 0,
            lease: LeaseState::Idle,
            lease_held: false,
            release_lease_when_removed: None,
            release_lease_at_ms: None,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &SbrSettings {
        &self.settings
    }

    /// The lease outcome requested by [`SbrAction::AcquireLease`].
    pub fn on_lease_result(&mut self, granted: bool) {
        if self.lease == LeaseState::Pending {
            self.lease = if granted {
                LeaseState::Granted
            } else {
                LeaseState::Refused
            };
            self.lease_held = granted;
        }
    }

    /// True while this node holds the lease (acquired for a decision, not yet released).
    pub fn holds_lease(&self) -> bool {
        self.lease_held
    }

    fn release_lease_due(&mut self, now_ms: u64, state: &MembershipState) -> bool {
        let g = &state.latest_gossip;
        if self
            .release_lease_when_removed
            .as_ref()
            .is_some_and(|downed| downed.iter().all(|n| !g.has_member(n)))
        {
            self.release_lease_when_removed = None;
            let after = match &self.settings.strategy {
                DowningStrategy::LeaseMajority {
                    release_after_ms, ..
                } => *release_after_ms,
                _ => 0,
            };
            self.release_lease_at_ms = Some(now_ms.saturating_add(after));
        }
        if self.release_lease_at_ms.is_some_and(|at| now_ms >= at) {
            self.release_lease_at_ms = None;
            self.lease_held = false;
            return true;
        }
        false
    }

    /// Observes `state` at `now_ms`; returns what to do, if anything. Only the leader acts,
    /// but every node tracks stability so a new leader decides on time.
    pub fn tick(&mut self, now_ms: u64, state: &MembershipState) -> Option<SbrAction> {
        if self.release_lease_due(now_ms, state) {
            return Some(SbrAction::ReleaseLease);
        }
        let g = &state.latest_gossip;
        let reach = state.reachability_excluding_downed_observers();
        let unreachable: BTreeSet<UniqueAddress> = reach
            .all_unreachable_or_terminated()
            .into_iter()
            .filter(|n| g.member(n).is_some_and(|m| m.status != MemberStatus::Down))
            .collect();
        let counted: BTreeSet<UniqueAddress> = g
            .members
            .values()
            .filter(|m| is_counted(m))
            .map(|m| m.unique_address.clone())
            .collect();
        let sig = (unreachable.clone(), counted);
        if unreachable.is_empty() {
            self.signature = Some(sig);
            self.first_change_ms = None;
            self.lease = LeaseState::Idle;
            return None;
        }
        if self.signature.as_ref() != Some(&sig) {
            self.signature = Some(sig);
            self.stable_deadline_ms = now_ms + self.settings.stable_after_ms;
            self.first_change_ms.get_or_insert(now_ms);
            self.latest_change_ms = now_ms;
            self.lease = LeaseState::Idle;
        }
        if !state.is_leader(&state.self_unique_address) {
            return None;
        }
        if let (Some(first), Some(extra)) = (
            self.first_change_ms,
            self.settings.down_all_when_unstable_ms,
        ) {
            if self.latest_change_ms.saturating_sub(first) > self.settings.stable_after_ms + extra {
                return self.finish(Decision::DownAll, state, &unreachable, &BTreeSet::new());
            }
        }
        if now_ms < self.stable_deadline_ms {
            return None;
        }
        let indirect = indirectly_connected(state);
        let direct: BTreeSet<UniqueAddress> = unreachable.difference(&indirect).cloned().collect();
        if !indirect.is_empty() && direct.is_empty() {
            return self.finish(
                Decision::DownIndirectlyConnected,
                state,
                &unreachable,
                &indirect,
            );
        }
        let all_unreachable: BTreeSet<UniqueAddress> =
            unreachable.union(&indirect).cloned().collect();
        let view = SbrView {
            members: g
                .members
                .values()
                .filter(|m| is_counted(m))
                .cloned()
                .collect(),
            unreachable: all_unreachable.clone(),
        };
        let decision = match decide(&self.settings.strategy, &view) {
            Some(d) => d,
            None if self.lease_held => Decision::DownUnreachable,
            None => match self.lease {
                LeaseState::Idle => {
                    self.lease = LeaseState::Pending;
                    let delay_ms = match &self.settings.strategy {
                        DowningStrategy::LeaseMajority {
                            role,
                            acquire_lease_delay_for_minority_ms,
                            ..
                        } => {
                            if is_majority(&view, role.as_deref()) {
                                0
                            } else {
                                *acquire_lease_delay_for_minority_ms
                            }
                        }
                        _ => 0,
                    };
                    return Some(SbrAction::AcquireLease { delay_ms });
                }
                LeaseState::Pending => return None,
                LeaseState::Granted => Decision::DownUnreachable,
                LeaseState::Refused => Decision::DownReachable,
            },
        };
        let decision = match (decision, indirect.is_empty()) {
            (Decision::DownReachable, false) => Decision::ReverseDownIndirectlyConnected,
            (d, _) => d,
        };
        self.finish(decision, state, &all_unreachable, &indirect)
    }

    fn finish(
        &mut self,
        decision: Decision,
        state: &MembershipState,
        unreachable: &BTreeSet<UniqueAddress>,
        indirect: &BTreeSet<UniqueAddress>,
    ) -> Option<SbrAction> {
        let g = &state.latest_gossip;
        let not_down =
            |n: &&UniqueAddress| g.member(n).is_some_and(|m| m.status != MemberStatus::Down);
        let nodes: BTreeSet<UniqueAddress> = match decision {
            Decision::DownUnreachable => unreachable.iter().filter(not_down).cloned().collect(),
            Decision::DownReachable => g
                .members
                .keys()
                .filter(|n| !unreachable.contains(*n))
                .filter(not_down)
                .cloned()
                .collect(),
            Decision::DownAll => g.members.keys().filter(not_down).cloned().collect(),
            Decision::DownIndirectlyConnected => {
                indirect.iter().filter(not_down).cloned().collect()
            }
            Decision::ReverseDownIndirectlyConnected => g
                .members
                .keys()
                .filter(|n| !unreachable.contains(*n) || indirect.contains(*n))
                .filter(not_down)
                .cloned()
                .collect(),
        };
        if self.lease_held && !nodes.is_empty() {
            // Keep the lease until the downed members are gone, then `release-after` more.
            let mut downed = self.release_lease_when_removed.take().unwrap_or_default();
            downed.extend(nodes.iter().cloned());
            self.release_lease_when_removed = Some(downed);
            self.release_lease_at_ms = None;
        }
        // Start over: the downed members change the view.
        self.signature = None;
        self.first_change_ms = None;
        self.lease = LeaseState::Idle;
        if nodes.is_empty() {
            None
        } else {
            Some(SbrAction::Down { decision, nodes })
        }
    }
}

#[cfg(test)]
mod tests;
