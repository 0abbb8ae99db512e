//! [`SplitBrainResolver`]: automatic downing of unreachable members so that exactly one side
//! of a partition keeps running.
//!
//! Spec: cluster-membership-service.md, "Leader" (split brain) and "User Actions" (downing
//! provider); cluster-specification.md, "Membership Lifecycle" (why auto-down without a
//! strategy creates islands). Model and source of every rule: Akka's Split Brain Resolver
//! (documentation "Split Brain Resolver" and the decisions of its `DowningStrategy` and
//! `SplitBrainResolver`). A node cannot tell a crash from a partition, so every side takes
//! the same kind of decision from its own view, and the strategies ([`strategy`]) are built
//! so that the decisions of the two sides are complementary.
//!
//! Timing, as Akka's: a decision waits until the unreachable members and the Up members
//! have not changed for `stable-after`, and only the leader of each side decides. When
//! reachability keeps changing for longer than `stable-after + down-all-when-unstable`
//! (measured from the first change until now), every node downs all members. A decision
//! that needs the lease (lease-majority) waits for it; without it, the decision is reversed.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_state::MembershipState;

mod rules;
pub mod strategy;
mod view;

pub use rules::SbrRules;
pub use strategy::{
    decide, decide_with, nodes_to_down, Decision, DoubleDecision, DowningStrategy, SbrView,
};

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
    /// Concord's rules, or Akka's alone for comparison.
    pub rules: SbrRules,
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
            rules: SbrRules::Concord,
        }
    }
}

/// Why the resolver took a decision (logged, counted in the metrics and by the simulator).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecisionCause {
    /// The leader's decision once the view was stable for `stable-after` (Akka's
    /// `strategy.decide()`), including the down-all strategy and the keep-majority and
    /// keep-oldest membership-change guard.
    Stable,
    /// The lease's answer to a decision that needed it (granted: the decision; refused:
    /// its reverse).
    Lease,
    /// down-all-when-unstable: reachability kept changing for longer than
    /// `stable-after + down-all-when-unstable`, on any node (Akka's rule).
    Unstable,
    /// A decision about indirectly connected members found, with their observations left
    /// out, indirectly connected members again (Akka's error case of a second such
    /// decision): Akka downs all; Concord downs its own side and the indirectly connected
    /// ([`Decision::DownOwnSide`], docs/SPLIT_BRAIN_RESOLVER.md rule 7).
    DoubleDecision,
}

impl DecisionCause {
    /// The cause's name in logs and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            DecisionCause::Stable => "stable",
            DecisionCause::Lease => "lease",
            DecisionCause::Unstable => "unstable",
            DecisionCause::DoubleDecision => "double-decision",
        }
    }
}

/// What the resolver asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SbrAction {
    /// Mark these members Down (self, if among them, last: one gossip update carries all).
    Down {
        /// The decision taken.
        decision: Decision,
        /// Members to down.
        nodes: BTreeSet<UniqueAddress>,
        /// Why it was taken.
        cause: DecisionCause,
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

/// What must stay unchanged for `stable-after` before a decision.
type Signature = (
    BTreeSet<UniqueAddress>,
    BTreeSet<UniqueAddress>,
    BTreeSet<(UniqueAddress, UniqueAddress)>,
);

#[derive(Clone, Debug, PartialEq, Eq)]
enum LeaseState {
    Idle,
    /// Asked for the lease for this decision; ticks wait for the answer (as Akka's
    /// resolver ignores ticks while waiting).
    Pending(Decision),
    /// The answer for this decision: granted or not.
    Answered(Decision, bool),
}

/// The resolver's state on one node. Feed it [`SplitBrainResolver::tick`] regularly (every
/// leader-actions tick, 1 s by default).
#[derive(Clone, Debug)]
pub struct SplitBrainResolver {
    settings: SbrSettings,
    /// The unreachable members, the counted members and the unreachability records
    /// (observer, subject) at the last tick.
    signature: Option<Signature>,
    stable_deadline_ms: u64,
    /// When Akka's stable-after would end: the last change of the unreachable or counted
    /// members (not of the records) plus stable-after, ms.
    akka_stable_deadline_ms: u64,
    /// The first reachability change since the last time every unreachable member was
    /// healed, downed or removed, ms.
    unstable_since_ms: Option<u64>,
    lease: LeaseState,
    /// The lease is held (acquired for a decision and not released yet): a new decision
    /// uses it without asking again (Akka's `checkLease`).
    lease_held: bool,
    /// After a decision taken with the lease: these downed members must be removed first...
    release_lease_when_removed: Option<BTreeSet<UniqueAddress>>,
    /// ...then the lease is released at this time, ms.
    release_lease_at_ms: Option<u64>,
    /// This node has been Up (or WeaklyUp): only then is it responsible for decisions.
    self_added: bool,
    /// For each member Down in the current gossip: the members known to have seen a
    /// gossip in which it is Down (bounded by the membership).
    down_seen_by: BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>>,
    /// Members this node monitors whose heartbeats stopped but that are not unreachable
    /// yet (set by the membership machine before each tick).
    suspects: BTreeSet<UniqueAddress>,
    /// Rule 5 has restarted the down-all-when-unstable clock in this unstable period.
    suspect_wait_credited: bool,
}

impl SplitBrainResolver {
    /// A resolver with `settings`.
    pub fn new(settings: SbrSettings) -> Self {
        SplitBrainResolver {
            settings,
            signature: None,
            stable_deadline_ms: 0,
            akka_stable_deadline_ms: 0,
            unstable_since_ms: None,
            lease: LeaseState::Idle,
            lease_held: false,
            release_lease_when_removed: None,
            release_lease_at_ms: None,
            self_added: false,
            down_seen_by: BTreeMap::new(),
            suspects: BTreeSet::new(),
            suspect_wait_credited: false,
        }
    }

    /// The members this node monitors by heartbeat whose heartbeats have stopped but that
    /// its failure detector does not yet hold unreachable: a partition may have begun that
    /// it has not detected yet, and the records it would decide on may be stale. A decision
    /// that keeps this node's side is then taken only if it would keep it too were every
    /// suspect cut off already (judged on its own observations); otherwise the leader waits
    /// until the suspects are heard again or detected. (Found by the simulator, the key-value store's seed 692: a 2|2
    /// partition began one second before the leader of one side decided, on older records
    /// saying two members of the other side could not hear each other, to down them as
    /// indirectly connected and keep its own side — while the other side kept itself by
    /// the tie-breaker.) Stricter than Akka.
    pub fn set_suspects(&mut self, suspects: BTreeSet<UniqueAddress>) {
        self.suspects = suspects;
    }

    /// The settings.
    pub fn settings(&self) -> &SbrSettings {
        &self.settings
    }

    /// The lease outcome requested by [`SbrAction::AcquireLease`].
    pub fn on_lease_result(&mut self, granted: bool) {
        if let LeaseState::Pending(decision) = self.lease {
            self.lease = LeaseState::Answered(decision, granted);
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

    /// Observes `state` at `now_ms`; returns what to do, if anything.
    pub fn tick(&mut self, now_ms: u64, state: &MembershipState) -> Option<SbrAction> {
        if self.release_lease_due(now_ms, state) {
            return Some(SbrAction::ReleaseLease);
        }
        let mut view = SbrView::from_state(state);
        self.track_down_seen(state, &mut view);
        if self.settings.rules == SbrRules::Akka {
            view.down_unseen_by_other_side.clear();
        }
        let me = &state.self_unique_address;
        if state
            .latest_gossip
            .member(me)
            .is_some_and(|m| matches!(m.status, MemberStatus::Up | MemberStatus::WeaklyUp))
        {
            self.self_added = true;
        }
        let counted: BTreeSet<UniqueAddress> = view
            .counted(None, false, false)
            .into_iter()
            .map(|m| m.unique_address.clone())
            .collect();
        // Concord waits for the observations themselves (who observes whom) to be stable,
        // not only for the set of unreachable members as Akka does: a decision on records
        // that are still moving — a new partition this node has not detected yet, records
        // from the other side still crossing — is how two sides came to keep themselves in
        // the simulator (seed 1712). Only while some members are indirectly connected: the
        // records decide nothing else (a clean partition is decided on the unreachable set
        // alone), and waiting for them there delayed decisions past down-all-when-unstable.
        let akka = self.settings.rules == SbrRules::Akka;
        let records = if akka || view.indirectly_connected().is_empty() {
            BTreeSet::new()
        } else {
            view.records.clone()
        };
        let reachability_changed = self
            .signature
            .as_ref()
            .is_none_or(|(u, _, r)| u != &view.unreachable || r != &records);
        let sig = (view.unreachable.clone(), counted, records);
        if self
            .signature
            .as_ref()
            .is_none_or(|(u, c, _)| u != &sig.0 || c != &sig.1)
        {
            self.akka_stable_deadline_ms = now_ms.saturating_add(self.settings.stable_after_ms);
        }
        if self.signature.as_ref() != Some(&sig) {
            self.signature = Some(sig);
            self.stable_deadline_ms = now_ms.saturating_add(self.settings.stable_after_ms);
            if reachability_changed && !view.unreachable.is_empty() {
                self.unstable_since_ms.get_or_insert(now_ms);
            }
        }
        // Every unreachable member healed, downed, exiting or removed: stable again.
        if !view
            .counted(None, false, false)
            .iter()
            .any(|m| view.unreachable.contains(&m.unique_address))
        {
            self.unstable_since_ms = None;
            self.suspect_wait_credited = false;
        }
        match self.lease {
            LeaseState::Pending(_) => return None,
            LeaseState::Answered(decision, granted) => {
                self.lease = LeaseState::Idle;
                self.lease_held = granted;
                let decision = if granted {
                    decision
                } else {
                    self.release_lease_when_removed = None;
                    self.release_lease_at_ms = None;
                    decision.reversed()
                };
                return self.act(now_ms, &view, decision, granted, DecisionCause::Lease);
            }
            LeaseState::Idle => {}
        }
        // Down all when unstable: on every node, not only the leader, so it happens even
        // when the leader cannot decide. The time Concord's stricter stability (records
        // still moving, rule 1) held the decision back past Akka's stable-after does not
        // count against it, up to one more stable-after: a wait Akka does not make should
        // not turn into a down-all Akka does not take.
        if let (Some(first), Some(extra)) = (
            self.unstable_since_ms,
            self.settings.down_all_when_unstable_ms,
        ) {
            let held_back = self
                .stable_deadline_ms
                .saturating_sub(self.akka_stable_deadline_ms)
                .min(self.settings.stable_after_ms);
            let allowed = self
                .settings
                .stable_after_ms
                .saturating_add(extra)
                .saturating_add(held_back);
            if now_ms.saturating_sub(first) > allowed {
                return self.act(
                    now_ms,
                    &view,
                    Decision::DownAll,
                    false,
                    DecisionCause::Unstable,
                );
            }
        }
        let leader = state.is_leader(me);
        if !self.self_added
            || (!leader && (akka || self.suspects.is_empty()))
            || view.unreachable.is_empty()
            || now_ms < self.stable_deadline_ms
        {
            return None;
        }
        let decision = decide_with(self.settings.rules, &self.settings.strategy, &view);
        if !akka && !self.suspects.is_empty() && self.keeps(&view, decision) {
            // Were the suspects cut off from this node already, would its side still keep?
            // Asked of its own observations: the others' records may be what is stale.
            let mut suspected = view.own_observations();
            suspected
                .unreachable
                .extend(self.suspects.iter().filter(|s| *s != me).cloned());
            if !self.keeps(&suspected, decide(&self.settings.strategy, &suspected)) {
                // Rule 5 waits where Akka would decide now, and Akka's decision would
                // restart its down-all-when-unstable clock: once per unstable period, the
                // clock restarts here too (on every node that would wait, leader or not,
                // since every node runs down-all-when-unstable), so that the wait does not
                // become a down-all Akka does not take. Once only: suspects that never
                // settle still end in down-all.
                if !self.suspect_wait_credited {
                    self.suspect_wait_credited = true;
                    if let Some(first) = &mut self.unstable_since_ms {
                        *first = (*first).max(now_ms);
                    }
                }
                return None;
            }
        }
        if !leader {
            return None;
        }
        if decision.needs_lease() && !self.lease_held {
            self.lease = LeaseState::Pending(decision);
            let delay_ms = match decision {
                Decision::AcquireLeaseAndDownUnreachable { delay_ms } => delay_ms,
                _ => 0,
            };
            return Some(SbrAction::AcquireLease { delay_ms });
        }
        self.act(
            now_ms,
            &view,
            decision,
            self.lease_held && decision.needs_lease(),
            DecisionCause::Stable,
        )
    }

    /// Records who has seen each Down member's downing, and marks in `view` the Down
    /// members that an unreachable member may not know about: on its side of a partition
    /// they may still count (a decision this side took just before the partition).
    fn track_down_seen(&mut self, state: &MembershipState, view: &mut SbrView) {
        let g = &state.latest_gossip;
        self.down_seen_by
            .retain(|n, _| g.member(n).is_some_and(|m| m.status == MemberStatus::Down));
        for m in g
            .members
            .values()
            .filter(|m| m.status == MemberStatus::Down)
        {
            self.down_seen_by
                .entry(m.unique_address.clone())
                .or_default()
                .extend(g.overview.seen.iter().cloned());
        }
        let unreachable_members: Vec<&UniqueAddress> = view
            .counted(None, true, false)
            .into_iter()
            .map(|m| &m.unique_address)
            .filter(|n| view.unreachable.contains(*n))
            .collect();
        view.down_unseen_by_other_side = self
            .down_seen_by
            .iter()
            .filter(|(_, seen)| unreachable_members.iter().any(|u| !seen.contains(*u)))
            .map(|(n, _)| n.clone())
            .collect();
    }

    /// True if `decision` on `view` keeps this node (it is not among the members downed).
    fn keeps(&self, view: &SbrView, decision: Decision) -> bool {
        nodes_to_down(&self.settings.strategy, view, decision)
            .is_ok_and(|nodes| !nodes.contains(&view.self_node))
    }

    /// Carries out `decision`: the members to down. In the error case of a second
    /// indirectly-connected decision, all of them with Akka's rules, this node's side and
    /// the indirectly connected with Concord's (rule 7).
    fn act(
        &mut self,
        now_ms: u64,
        view: &SbrView,
        decision: Decision,
        with_lease: bool,
        cause: DecisionCause,
    ) -> Option<SbrAction> {
        let strategy = &self.settings.strategy;
        // A second indirectly-connected decision: Akka downs all. Concord downs its own side
        // and the indirectly connected instead (rule 7): it keeps nobody this node can
        // reach either, and leaves the members it cannot reach to decide for themselves.
        let fallback = match self.settings.rules {
            SbrRules::Concord => Decision::DownOwnSide,
            SbrRules::Akka => Decision::DownAll,
        };
        let (decision, nodes, cause) = match nodes_to_down(strategy, view, decision) {
            Ok(nodes) => (decision, nodes, cause),
            Err(DoubleDecision) => (
                fallback,
                nodes_to_down(strategy, view, fallback).unwrap_or_default(),
                DecisionCause::DoubleDecision,
            ),
        };
        if with_lease {
            if nodes.is_empty() {
                if self.release_lease_when_removed.is_none() {
                    let after = match strategy {
                        DowningStrategy::LeaseMajority {
                            release_after_ms, ..
                        } => *release_after_ms,
                        _ => 0,
                    };
                    self.release_lease_at_ms = Some(now_ms.saturating_add(after));
                }
            } else {
                // Keep the lease until the downed members are gone, then `release-after` more.
                let mut downed = self.release_lease_when_removed.take().unwrap_or_default();
                downed.extend(nodes.iter().cloned());
                self.release_lease_when_removed = Some(downed);
                self.release_lease_at_ms = None;
            }
        }
        if nodes.is_empty() {
            return None;
        }
        // Start over: the downed members change the view.
        self.stable_deadline_ms = now_ms.saturating_add(self.settings.stable_after_ms);
        self.unstable_since_ms = None;
        self.suspect_wait_credited = false;
        Some(SbrAction::Down {
            decision,
            nodes,
            cause,
        })
    }
}

#[cfg(test)]
mod scenarios;
#[cfg(test)]
mod tests;
