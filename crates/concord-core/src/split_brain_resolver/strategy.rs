//! The downing strategies: which members one side of a partition downs, decided from that
//! side's view alone.
//!
//! Source: Akka documentation "Split Brain Resolver" (strategies, "Indirectly connected
//! nodes", "Down all when unstable") and the decisions of Akka's `DowningStrategy`, which
//! these functions reproduce rule for rule (the tests name each case). Every side evaluates
//! the same rules on its own view; the rules are built so that the two sides of a clean
//! partition take complementary decisions.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::member::Member;

use super::rules::SbrRules;
pub use super::view::SbrView;

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
        /// An oldest member alone on its side, facing at least two members, downs itself.
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

    /// The role that counts, if any.
    pub fn role(&self) -> Option<&str> {
        match self {
            DowningStrategy::KeepMajority { role }
            | DowningStrategy::StaticQuorum { role, .. }
            | DowningStrategy::KeepOldest { role, .. }
            | DowningStrategy::LeaseMajority { role, .. } => role.as_deref(),
            DowningStrategy::DownAll => None,
        }
    }
}

/// The outcome of a strategy (Akka's `DowningStrategy.Decision`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Keep this side, down the unreachable members.
    DownUnreachable,
    /// Down this side (including self); the other side survives.
    DownReachable,
    /// Down every member.
    DownAll,
    /// Down the indirectly connected members, plus what the strategy decides for the
    /// rest when the observations between the indirectly connected are left out.
    DownIndirectlyConnected,
    /// lease-majority: acquire the lease (after `delay_ms`), then down the unreachable
    /// members; without the lease, [`Decision::DownReachable`].
    AcquireLeaseAndDownUnreachable {
        /// Delay before asking, ms: `acquire-lease-delay-for-minority` on a minority side.
        delay_ms: u64,
    },
    /// lease-majority with indirectly connected members: acquire the lease at once, then
    /// as [`Decision::DownIndirectlyConnected`]; without it,
    /// [`Decision::ReverseDownIndirectlyConnected`].
    AcquireLeaseAndDownIndirectlyConnected,
    /// Down this side and the indirectly connected members (the lease was refused).
    ReverseDownIndirectlyConnected,
    /// Concord: down only as many of the indirectly connected members as leave no
    /// unreachability record between the kept ones ([`SbrView::indirectly_connected_to_down`]),
    /// plus what the strategy decides for the rest — taken instead of
    /// [`Decision::DownIndirectlyConnected`] where the indirectly connected, all downed and
    /// cut off together, could keep themselves (see [`decide`]).
    DownSomeIndirectlyConnected,
    /// Concord: down this side — this node and the members nobody observes unreachable,
    /// and no other — taken where Concord's rules 2, 3, 6 or 7 find that the side Akka's decision
    /// keeps may not be the only side kept. It keeps nobody this node can reach and downs
    /// nobody it cannot, so it is as safe as the down-all it replaces — the members this
    /// node cannot reach decide for themselves, as they would had this side crashed — and
    /// it leaves them running where a down-all's gossip would down them too
    /// (docs/SPLIT_BRAIN_RESOLVER.md, "What the stricter rules cost"). Until stop 28 it
    /// also downed the unreachable indirectly connected members: its gossip then reached a
    /// member of this side it could not reach (paused) with the other side downed, and that
    /// member kept running alone beside the other side (simulator, sharding seed 3324).
    DownOwnSide,
}

impl Decision {
    /// True for the decisions about indirectly connected members.
    pub fn is_indirectly_connected(self) -> bool {
        matches!(
            self,
            Decision::DownIndirectlyConnected
                | Decision::AcquireLeaseAndDownIndirectlyConnected
                | Decision::ReverseDownIndirectlyConnected
                | Decision::DownSomeIndirectlyConnected
        )
    }

    /// True when the lease decides.
    pub fn needs_lease(self) -> bool {
        matches!(
            self,
            Decision::AcquireLeaseAndDownUnreachable { .. }
                | Decision::AcquireLeaseAndDownIndirectlyConnected
        )
    }

    /// The decision taken when the lease is refused.
    pub fn reversed(self) -> Decision {
        match self {
            Decision::AcquireLeaseAndDownUnreachable { .. } => Decision::DownReachable,
            Decision::AcquireLeaseAndDownIndirectlyConnected => {
                Decision::ReverseDownIndirectlyConnected
            }
            other => other,
        }
    }
}

/// The error case of Akka's `DowningStrategy`: with the observations between the
/// indirectly connected members left out, the strategy still finds indirectly connected
/// members. Akka then downs all; so does the resolver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoubleDecision;

/// keep-majority's comparison: more members on this side keep it; on a tie the side with
/// the lowest address (of `lowest`) is kept.
fn majority_decision(this_side: usize, other_side: usize, lowest_unreachable: bool) -> Decision {
    match this_side.cmp(&other_side) {
        Ordering::Equal if lowest_unreachable => Decision::DownReachable,
        Ordering::Equal | Ordering::Greater => Decision::DownUnreachable,
        Ordering::Less => Decision::DownReachable,
    }
}

/// keep-oldest's rule. `down_if_alone` applies only when the oldest is alone on its side
/// and the other side has at least two members (with two members in total, the oldest is
/// kept: the other side is no better).
fn oldest_decision(
    oldest_here: bool,
    this_side: usize,
    other_side: usize,
    down_if_alone: bool,
) -> Decision {
    if oldest_here {
        if down_if_alone && this_side == 1 && other_side >= 2 {
            Decision::DownReachable
        } else {
            Decision::DownUnreachable
        }
    } else if down_if_alone && other_side == 1 && this_side >= 2 {
        Decision::DownUnreachable
    } else {
        Decision::DownReachable
    }
}

fn keep_majority(view: &SbrView, role: Option<&str>) -> Decision {
    let ms = view.counted(role, false, false);
    let Some(lowest) = ms.first() else {
        return Decision::DownAll; // no member has the role
    };
    let first = majority_decision(
        view.count(role, false, false, true),
        view.count(role, false, false, false),
        view.is_unreachable(lowest),
    );
    if first != Decision::DownUnreachable {
        return first;
    }
    // A membership change may have happened during the partition: count as few as
    // possible here (no Leaving: it may be Exiting over there) and as many as possible
    // there (Joining and WeaklyUp may be Up over there). A different conclusion means the
    // other side may also keep itself: down all. Concord adds to the other side the
    // members this side downed without the other side seeing it (they still count there).
    let second = |unseen: &[&Member]| {
        let ms = view.counted(role, false, true);
        let lowest_unreachable = match (ms.first(), unseen.iter().min_by_key(|m| &m.unique_address))
        {
            (None, None) => return Decision::DownAll,
            (Some(l), Some(u)) if u.unique_address < l.unique_address => true,
            (Some(l), _) => view.is_unreachable(l),
            (None, Some(_)) => true,
        };
        majority_decision(
            view.count(role, false, true, true),
            view.count(role, true, false, false) + unseen.len(),
            lowest_unreachable,
        )
    };
    guarded(second, &view.down_unseen(role))
}

/// The membership-change guard's outcome: `second` (the second evaluation, given the members
/// downed here that the other side has not seen downed) must keep this side too; if not,
/// down all (Akka). Where only those unseen members (Concord's rule 3) turn Akka's keep into
/// a loss, down this node's own side ([`Decision::DownOwnSide`]): it keeps nobody here, so
/// it is as safe as the down-all, and leaves the other side running.
fn guarded(second: impl Fn(&[&Member]) -> Decision, unseen: &[&Member]) -> Decision {
    match second(unseen) {
        Decision::DownUnreachable => Decision::DownUnreachable,
        _ if !unseen.is_empty() && second(&[]) == Decision::DownUnreachable => {
            Decision::DownOwnSide
        }
        _ => Decision::DownAll,
    }
}

fn keep_oldest(view: &SbrView, role: Option<&str>, down_if_alone: bool) -> Decision {
    let oldest = |ms: &[&Member]| ms.iter().copied().min_by(|a, b| a.age_cmp(b)).cloned();
    let ms = view.counted(role, false, false);
    let Some(oldest_member) = oldest(&ms) else {
        return Decision::DownAll; // no member has the role
    };
    let first = oldest_decision(
        !view.is_unreachable(&oldest_member),
        view.count(role, false, false, true),
        view.count(role, false, false, false),
        down_if_alone,
    );
    if first != Decision::DownUnreachable {
        return first;
    }
    // Membership change during the partition: the oldest may be Exiting over there (so
    // Leaving members are left out), and with down-if-alone, Joining members may be Up
    // over there and change who is alone. Concord adds the members downed here that the
    // other side has not seen downed: over there they still count, and may be the oldest
    // (simulator seed 5870).
    let second = |unseen: &[&Member]| {
        let mut ms = view.counted(role, false, true);
        ms.extend(unseen.iter().copied());
        let Some(oldest_member) = oldest(&ms) else {
            return Decision::DownAll;
        };
        let oldest_here = !view.is_unreachable(&oldest_member)
            && !unseen
                .iter()
                .any(|m| m.unique_address == oldest_member.unique_address);
        oldest_decision(
            oldest_here,
            view.count(role, down_if_alone, true, true),
            view.count(role, down_if_alone, true, false) + unseen.len(),
            down_if_alone,
        )
    };
    guarded(second, &view.down_unseen(role))
}

/// The strategy's decision for `view`.
///
/// Concord's stricter rules on top of Akka's, for a [`Decision::DownIndirectlyConnected`]
/// (docs/SPLIT_BRAIN_RESOLVER.md, rules 2 and 6). Let *kept* be the members the decision
/// leaves running that this node can reach.
///
/// - None kept (the decision downs this node's whole side and the indirectly connected):
///   Akka's decision stands. This side keeps nobody, so whatever the members it cannot
///   reach decide, at most they keep running — as if this side had crashed.
/// - The side kept must be one the strategy keeps by its own observations: evaluated with
///   only what this node itself cannot hear (when it is kept; when it is downed itself as
///   indirectly connected, with only what each kept member cannot hear: its own links are
///   the broken ones). Without it, what the decision leaves running may be a minority while
///   the other side keeps itself too: observations that crossed the partition before it
///   settled make both sides look indirectly connected (found by the simulator, seeds 181,
///   220, 1855 and 6927).
/// - When it keeps this node: the strategy would keep this side too were the members it
///   downs as indirectly connected on the other side of a clean partition together (the
///   members unreachable otherwise left out). They learn of their downing only by gossip:
///   cut off from this node the moment the decision is taken, with the links between them
///   healed, they decide for themselves — and a majority of them keeps itself (found by the
///   sharding simulation, seed 904: of three members, the two that could not hear each
///   other were downed as the partition `0 | 2, 4` began, and `2, 4` kept themselves and
///   downed `0`). Where downing all of them fails this, downing only as few as break every
///   record between the kept ones ([`Decision::DownSomeIndirectlyConnected`]) is tried.
/// - When it downs this node as indirectly connected: the same must hold for the kept
///   members against the others it downs as indirectly connected (this node carries out
///   its own downing, so it is not among them; it stays counted on the kept members' side,
///   as the cut-off members would count it). Where that fails, downing as few as break
///   every record is tried if it keeps this node and this node's own observations keep
///   its side. Without this, two such decisions, each by a
///   node on its own side of a partition, each downing itself and keeping one member whose
///   own observations made its side the majority, kept two lone members (Distributed Data
///   simulation, seed 1801: node 2 kept 3, node 0 kept 1).
///
/// Otherwise the decision is to down this node's own side ([`Decision::DownOwnSide`];
/// until stop 27, down all): it keeps nobody here either.
pub fn decide(strategy: &DowningStrategy, view: &SbrView) -> Decision {
    let akka = akka_decision(strategy, view);
    if akka != Decision::DownIndirectlyConnected {
        return akka;
    }
    let Ok(downed) = nodes_to_down(strategy, view, akka) else {
        return akka; // a double decision: the resolver's `act` handles it (rule 7)
    };
    let kept: Vec<UniqueAddress> = view
        .downable()
        .into_iter()
        .filter(|n| !downed.contains(n) && !view.unreachable.contains(n))
        .collect();
    if kept.is_empty() {
        return akka;
    }
    let keeps_by_own_observations = |k: &UniqueAddress| {
        akka_decision(strategy, &view.observations_of(k)) == Decision::DownUnreachable
    };
    let self_kept = kept.contains(&view.self_node);
    if self_kept && !keeps_by_own_observations(&view.self_node)
        || !self_kept && !kept.iter().all(keeps_by_own_observations)
    {
        return Decision::DownOwnSide;
    }
    let keeps_against = |cut: &BTreeSet<UniqueAddress>| {
        !cut.contains(&view.self_node)
            && akka_decision(strategy, &view.with_cut_off(cut)) == Decision::DownUnreachable
    };
    let indirect = view.indirectly_connected();
    let holds = if self_kept {
        keeps_against(&indirect)
    } else {
        // This node downs itself as indirectly connected and carries that out itself, so
        // the others it downs are the ones that may be cut off and keep themselves; it
        // stays counted on the kept members' side, as the cut-off members would count it.
        let mut cut = indirect;
        cut.remove(&view.self_node);
        let hypothetical = view.with_cut_off(&cut);
        kept.iter()
            .all(|k| akka_decision(strategy, &hypothetical.seen_by(k)) == Decision::DownUnreachable)
    };
    if holds {
        return Decision::DownIndirectlyConnected;
    }
    // Downing fewer of them keeps this node: its own observations must keep its side too.
    let some = view.indirectly_connected_to_down();
    if keeps_against(&some) && (self_kept || keeps_by_own_observations(&view.self_node)) {
        Decision::DownSomeIndirectlyConnected
    } else {
        Decision::DownOwnSide
    }
}

/// The strategy's decision for `view` by `rules`: [`decide`], or Akka's rules alone.
pub fn decide_with(rules: SbrRules, strategy: &DowningStrategy, view: &SbrView) -> Decision {
    match rules {
        SbrRules::Concord => decide(strategy, view),
        SbrRules::Akka => akka_decision(strategy, view),
    }
}

/// The decision by Akka's rules alone.
fn akka_decision(strategy: &DowningStrategy, view: &SbrView) -> Decision {
    let role = strategy.role();
    let indirect = !view.indirectly_connected().is_empty();
    match strategy {
        DowningStrategy::StaticQuorum { quorum_size, .. } => {
            if view.counted(role, false, false).len()
                > quorum_size.saturating_mul(2).saturating_sub(1)
            {
                Decision::DownAll
            } else if indirect {
                Decision::DownIndirectlyConnected
            } else if view.count(role, false, false, true) >= *quorum_size {
                Decision::DownUnreachable
            } else {
                Decision::DownReachable
            }
        }
        _ if indirect => match strategy {
            DowningStrategy::DownAll => Decision::DownAll,
            DowningStrategy::LeaseMajority { .. } => {
                Decision::AcquireLeaseAndDownIndirectlyConnected
            }
            _ => Decision::DownIndirectlyConnected,
        },
        DowningStrategy::KeepMajority { .. } => keep_majority(view, role),
        DowningStrategy::KeepOldest { down_if_alone, .. } => {
            keep_oldest(view, role, *down_if_alone)
        }
        DowningStrategy::DownAll => Decision::DownAll,
        DowningStrategy::LeaseMajority {
            acquire_lease_delay_for_minority_ms,
            ..
        } => Decision::AcquireLeaseAndDownUnreachable {
            delay_ms: if is_minority(view, role) {
                *acquire_lease_delay_for_minority_ms
            } else {
                0
            },
        },
    }
}

/// lease-majority's hint: a minority side (or the side without the lowest address on a
/// tie) waits before asking for the lease. No member with the role: not a minority.
pub fn is_minority(view: &SbrView, role: Option<&str>) -> bool {
    let ms = view.counted(role, false, false);
    let Some(lowest) = ms.first() else {
        return false;
    };
    majority_decision(
        view.count(role, false, false, true),
        view.count(role, false, false, false),
        view.is_unreachable(lowest),
    ) == Decision::DownReachable
}

/// The members `decision` downs, from `view`. `Err` in the error case of a second
/// indirectly-connected decision (the caller downs all, as Akka does).
pub fn nodes_to_down(
    strategy: &DowningStrategy,
    view: &SbrView,
    decision: Decision,
) -> Result<BTreeSet<UniqueAddress>, DoubleDecision> {
    let downable = view.downable();
    Ok(match decision {
        Decision::DownUnreachable | Decision::AcquireLeaseAndDownUnreachable { .. } => {
            downable.intersection(&view.unreachable).cloned().collect()
        }
        Decision::DownReachable => downable.difference(&view.unreachable).cloned().collect(),
        Decision::DownAll => downable,
        Decision::DownIndirectlyConnected
        | Decision::AcquireLeaseAndDownIndirectlyConnected
        | Decision::DownSomeIndirectlyConnected => {
            let mut nodes = if decision == Decision::DownSomeIndirectlyConnected {
                view.indirectly_connected_to_down()
            } else {
                view.indirectly_connected()
            };
            nodes.extend(additional_nodes_when_indirectly_connected(
                strategy, view, &downable,
            )?);
            nodes.intersection(&downable).cloned().collect()
        }
        Decision::ReverseDownIndirectlyConnected => {
            let indirect = view.indirectly_connected();
            downable
                .iter()
                .filter(|n| indirect.contains(*n) || !view.unreachable.contains(*n))
                .cloned()
                .collect()
        }
        // Only what this node can reach: downing a member it cannot reach would tell a
        // third member, cut off from both, that the other side is gone.
        Decision::DownOwnSide => downable
            .iter()
            .filter(|n| **n == view.self_node || !view.unreachable.contains(*n))
            .cloned()
            .collect(),
    })
}

/// Besides the indirectly connected members: what the strategy decides for the rest (a
/// crash or a clean partition at the same time), deciding as if the indirectly connected
/// observations did not exist.
fn additional_nodes_when_indirectly_connected(
    strategy: &DowningStrategy,
    view: &SbrView,
    downable: &BTreeSet<UniqueAddress>,
) -> Result<BTreeSet<UniqueAddress>, DoubleDecision> {
    let indirect = view.indirectly_connected();
    if view.unreachable.iter().all(|n| indirect.contains(n)) {
        return Ok(BTreeSet::new());
    }
    let filtered = view.without_indirect_observations(downable);
    // Concord's rules change only indirectly-connected decisions, the error case here.
    let decision = akka_decision(strategy, &filtered);
    if decision.is_indirectly_connected() {
        return Err(DoubleDecision);
    }
    nodes_to_down(strategy, &filtered, decision)
}
