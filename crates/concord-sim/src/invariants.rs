//! Invariants checked during and after a simulated run.
//!
//! - one leader per converged view (nodes with the same converged state agree);
//! - no member status ever moves backwards in any node's view (per incarnation: a restarted
//!   node starts a new view and may join a side that never saw what its predecessor saw);
//! - after heal and quiet, every running node converges to the same membership, all Up;
//! - with keep-majority, never two disjoint running clusters after heal;
//! - no node stays Joining/WeaklyUp forever when convergence is possible;
//! - at every step, no split brain: never two running nodes, cut off from each other, that
//!   each consider themselves alive and the other Down or removed (each kept its side);
//! - a member that has been connected both ways to every other member (all running, none
//!   paused) for [`HEALTHY_WINDOW_MS`] is never downed by a resolver decision, except by
//!   the down-all rules (down-all, down-all-when-unstable, the membership-change guard, a
//!   double decision), Concord's stricter rules (down own side) and a refused lease;
//! - a run that ends with no node running must have had a resolver decision that explains
//!   it (never a vacuous pass).

use std::collections::{BTreeMap, BTreeSet};

use concord_core::split_brain_resolver::{Decision, DecisionCause, DowningStrategy};
use concord_core::{Address, MemberStatus, UniqueAddress};

use crate::sim::Simulation;

/// How long a member must have been connected to every other member, both ways, with
/// nobody paused, to count as healthy: detection, stable-after and a margin, ms.
pub const HEALTHY_WINDOW_MS: u64 = 10_000;

/// Tracks what each node incarnation has seen so far, to check monotonicity, and the
/// network's history, to judge resolver decisions.
#[derive(Default)]
pub struct Checker {
    /// (observer incarnation, member) → the status it saw last.
    max_status: BTreeMap<(UniqueAddress, UniqueAddress), MemberStatus>,
    /// (from, to) → the last step at which messages from `from` did not reach `to`, ms.
    last_cut: BTreeMap<(Address, Address), u64>,
    /// Address → the last step at which its node was paused or not running, ms.
    last_unavailable: BTreeMap<Address, u64>,
    /// Incarnation → resolver decisions already judged.
    decisions_judged: BTreeMap<UniqueAddress, u64>,
    /// Resolver decisions seen in the whole run.
    decisions_seen: u64,
    /// Resolver decisions counted by kind.
    pub counts: DecisionCounts,
}

/// Resolver decisions carried out in a run (every node's, each counted once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionCounts {
    /// Decisions that downed someone.
    pub decisions: u64,
    /// Of those, down-all decisions (down-all-when-unstable, the membership-change guard, a
    /// double decision, or the down-all strategy).
    pub down_all: u64,
    /// The down-alls by cause: the leader's stable decision (the down-all strategy, the
    /// membership-change guard), down-all-when-unstable, a double decision.
    pub down_all_by_cause: [u64; 3],
    /// Of those, the decisions Concord's stricter rules take instead of Akka's
    /// ([`Decision::DownOwnSide`], a down-all until stop 27).
    pub down_own_side: u64,
    /// Members downed by all the decisions (a member downed twice counts twice).
    pub members_downed: u64,
}

impl Checker {
    /// Checks the invariants that must hold at every step.
    pub fn check_step(&mut self, sim: &Simulation) -> Result<(), String> {
        self.observe_network(sim);
        self.check_no_split_brain(sim)?;
        self.check_decisions(sim)?;
        self.check_views(sim)
    }

    fn observe_network(&mut self, sim: &Simulation) {
        let now = sim.now;
        for (a, n) in &sim.nodes {
            // A node that appeared just now (a new address) was not available before.
            let new = !self.last_unavailable.contains_key(a) && now > 0;
            if new || !n.is_running() || n.paused_until.is_some_and(|t| t > now) {
                self.last_unavailable.insert(a.clone(), now);
            }
            for b in sim.nodes.keys() {
                if a != b && !sim.partitions.connected(a, b) {
                    self.last_cut.insert((a.clone(), b.clone()), now);
                }
            }
        }
    }

    fn available_since(&self, a: &Address, since: u64) -> bool {
        self.last_unavailable.get(a).is_none_or(|t| *t < since)
    }

    /// Two running, unpaused nodes in different partition groups, each alive in its own
    /// view, each holding the other Down or removed, each with no decision pending (no
    /// unreachable member left that is not Down): both sides kept themselves.
    fn check_no_split_brain(&self, sim: &Simulation) -> Result<(), String> {
        let now = sim.now;
        let live: Vec<(&Address, &crate::sim::SimNode)> = sim
            .running()
            .filter(|(_, n)| n.core().is_initialized() && n.paused_until.is_none_or(|t| t <= now))
            .filter(|(_, n)| {
                n.core()
                    .latest_gossip()
                    .member(n.core().self_unique_address())
                    .is_some_and(|m| {
                        !matches!(m.status, MemberStatus::Down | MemberStatus::Exiting)
                    })
            })
            .collect();
        let excludes = |x: &crate::sim::SimNode, y: &crate::sim::SimNode| {
            let g = x.core().latest_gossip();
            let id = y.core().self_unique_address();
            g.tombstones.contains_key(id)
                || g.member(id).is_some_and(|m| m.status == MemberStatus::Down)
        };
        // A side has carried out its decisions when it sees no unreachable member that is
        // not Down or Exiting.
        let settled = |x: &crate::sim::SimNode| {
            let st = x.core().membership_state();
            st.unreachable_members()
                .iter()
                .all(|m| matches!(m.status, MemberStatus::Down | MemberStatus::Exiting))
        };
        for (i, (a, x)) in live.iter().enumerate() {
            for (b, y) in &live[i + 1..] {
                let cut_off = !sim.partitions.connected(a, b) && !sim.partitions.connected(b, a);
                if cut_off && excludes(x, y) && excludes(y, x) && settled(x) && settled(y) {
                    return Err(format!(
                        "at {now} ms: split brain: {a} and {b} are cut off from each other and each keeps running with the other downed\n  {}: {}\n  {}: {}",
                        a.host,
                        x.membership_line(),
                        b.host,
                        y.membership_line()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every new resolver decision: the members it downs were not healthy (unless a
    /// down-all rule or a refused lease decided).
    fn check_decisions(&mut self, sim: &Simulation) -> Result<(), String> {
        let now = sim.now;
        let since = now.saturating_sub(HEALTHY_WINDOW_MS);
        for (decider, n) in &sim.nodes {
            let id = n.core().self_unique_address().clone();
            let count = n.core().stats().sbr_decisions;
            let judged = self.decisions_judged.insert(id, count).unwrap_or(0);
            if count <= judged {
                continue;
            }
            self.decisions_seen += count - judged;
            self.counts.decisions += count - judged;
            let lease = matches!(
                n.core().settings().downing.as_ref().map(|d| &d.strategy),
                Some(DowningStrategy::LeaseMajority { .. })
            );
            let fresh: Vec<_> = n.core().recent_sbr_decisions().collect();
            let new = usize::try_from(count - judged)
                .unwrap_or(usize::MAX)
                .min(fresh.len());
            for record in &fresh[fresh.len() - new..] {
                match record.decision {
                    Decision::DownAll => {
                        self.counts.down_all += 1;
                        let i = match record.cause {
                            DecisionCause::Unstable => 1,
                            DecisionCause::DoubleDecision => 2,
                            DecisionCause::Stable | DecisionCause::Lease => 0,
                        };
                        self.counts.down_all_by_cause[i] += 1;
                    }
                    Decision::DownOwnSide => self.counts.down_own_side += 1,
                    _ => {}
                }
                self.counts.members_downed += u64::try_from(record.nodes.len()).unwrap_or(u64::MAX);
                // Down-all, and Concord's stricter rules in place of Akka's decision: they
                // keep nobody the decider can reach, healthy or not.
                let exempt = matches!(record.decision, Decision::DownAll | Decision::DownOwnSide)
                    || (lease
                        && matches!(
                            record.decision,
                            Decision::DownReachable | Decision::ReverseDownIndirectlyConnected
                        ));
                if exempt {
                    continue;
                }
                let members: BTreeSet<&UniqueAddress> = n
                    .core()
                    .latest_gossip()
                    .members
                    .keys()
                    .chain(record.nodes.iter())
                    .collect();
                for downed in &record.nodes {
                    if self.healthy(sim, downed, &members, since) {
                        return Err(format!(
                            "at {now} ms: {decider} decided {:?} at {} ms and downed {downed}, which was connected both ways to every other member for {HEALTHY_WINDOW_MS} ms",
                            record.decision, record.at_ms
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn healthy(
        &self,
        sim: &Simulation,
        m: &UniqueAddress,
        members: &BTreeSet<&UniqueAddress>,
        since: u64,
    ) -> bool {
        let current = |u: &UniqueAddress| {
            sim.nodes
                .get(&u.address)
                .is_some_and(|n| n.core().self_unique_address() == u)
        };
        current(m)
            && self.available_since(&m.address, since)
            && members.iter().filter(|o| **o != m).all(|o| {
                current(o)
                    && self.available_since(&o.address, since)
                    && [
                        (m.address.clone(), o.address.clone()),
                        (o.address.clone(), m.address.clone()),
                    ]
                    .iter()
                    .all(|pair| self.last_cut.get(pair).is_none_or(|t| *t < since))
            })
    }

    fn check_views(&mut self, sim: &Simulation) -> Result<(), String> {
        let mut leaders: BTreeMap<
            Vec<(UniqueAddress, MemberStatus)>,
            BTreeSet<Option<UniqueAddress>>,
        > = BTreeMap::new();
        for (a, n) in sim.running() {
            let g = n.core().latest_gossip();
            for m in g.members.values() {
                let key = (
                    n.core().self_unique_address().clone(),
                    m.unique_address.clone(),
                );
                // A status moves forward along the lifecycle, or wins a merge against the
                // one before (Akka's merge priority: ReadyForShutdown beats a concurrent
                // Leaving, Exiting or Down).
                let e = self.max_status.entry(key).or_insert(m.status);
                if m.status.precedence() < e.precedence()
                    && m.status.merge_priority() < e.merge_priority()
                {
                    return Err(format!(
                        "at {} ms: node {a} sees {} as {} after a later status ({})",
                        sim.now, m.unique_address, m.status, *e
                    ));
                }
                *e = m.status;
            }
            if n.core().is_initialized()
                && n.core().membership_state().convergence()
                && g.overview.reachability.is_all_reachable()
            {
                let view: Vec<(UniqueAddress, MemberStatus)> = g
                    .members
                    .values()
                    .map(|m| (m.unique_address.clone(), m.status))
                    .collect();
                leaders
                    .entry(view)
                    .or_default()
                    .insert(n.core().membership_state().leader().cloned());
            }
        }
        for (view, ls) in leaders {
            if ls.len() > 1 {
                return Err(format!(
                    "at {} ms: {} leaders for one converged view of {} members: {ls:?}",
                    sim.now,
                    ls.len(),
                    view.len()
                ));
            }
        }
        Ok(())
    }

    /// Checks the end state after heal and a quiet period.
    pub fn check_end(&self, sim: &Simulation) -> Result<(), String> {
        let running: Vec<(&Address, &crate::sim::SimNode)> = sim
            .running()
            .filter(|(_, n)| n.core().is_initialized())
            .collect();
        if running.is_empty() {
            return if self.decisions_seen > 0 {
                Ok(())
            } else {
                Err("no node is running at the end and no resolver decision explains it".into())
            };
        }
        let ids: BTreeSet<UniqueAddress> = running
            .iter()
            .map(|(_, n)| n.core().self_unique_address().clone())
            .collect();
        for (a, n) in &running {
            let g = n.core().latest_gossip();
            let members: BTreeSet<UniqueAddress> = g.members.keys().cloned().collect();
            if members != ids {
                return Err(format!(
                    "after heal: node {a} sees members {:?} but the running nodes are {:?} (two clusters or a stale member)",
                    members.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
                    ids.iter().map(|m| m.to_string()).collect::<Vec<_>>()
                ));
            }
            if let Some(m) = g.members.values().find(|m| m.status != MemberStatus::Up) {
                return Err(format!(
                    "after heal: node {a} sees {} still {}",
                    m.unique_address, m.status
                ));
            }
            if !n.core().membership_state().convergence() {
                return Err(format!("after heal: node {a} has no convergence"));
            }
        }
        Ok(())
    }
}
