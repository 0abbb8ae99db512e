//! Invariants checked during and after a simulated run.
//!
//! - one leader per converged view (nodes with the same converged state agree);
//! - no member status ever moves backwards in any node's view (per incarnation: a restarted
//!   node starts a new view and may join a side that never saw what its predecessor saw);
//! - after heal and quiet, every running node converges to the same membership, all Up;
//! - with keep-majority, never two disjoint running clusters after heal;
//! - no node stays Joining/WeaklyUp forever when convergence is possible.

use std::collections::{BTreeMap, BTreeSet};

use concord_core::{Address, MemberStatus, UniqueAddress};

use crate::sim::Simulation;

/// Tracks what each node incarnation has seen so far, to check monotonicity.
#[derive(Default)]
pub struct Checker {
    /// (observer incarnation, member) → highest status precedence seen.
    max_status: BTreeMap<(UniqueAddress, UniqueAddress), u8>,
}

impl Checker {
    /// Checks the invariants that must hold at every step.
    pub fn check_step(&mut self, sim: &Simulation) -> Result<(), String> {
        let mut leaders: BTreeMap<
            Vec<(UniqueAddress, MemberStatus)>,
            BTreeSet<Option<UniqueAddress>>,
        > = BTreeMap::new();
        for (a, n) in sim.running() {
            let g = n.core.latest_gossip();
            for m in g.members.values() {
                let key = (
                    n.core.self_unique_address().clone(),
                    m.unique_address.clone(),
                );
                let p = m.status.precedence();
                let e = self.max_status.entry(key).or_insert(p);
                if p < *e {
                    return Err(format!(
                        "at {} ms: node {a} sees {} as {} after a later status (precedence {} < {})",
                        sim.now, m.unique_address, m.status, p, *e
                    ));
                }
                *e = p;
            }
            if n.core.is_initialized()
                && n.core.membership_state().convergence()
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
                    .insert(n.core.membership_state().leader().cloned());
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
            .filter(|(_, n)| n.core.is_initialized())
            .collect();
        if running.is_empty() {
            return Ok(());
        }
        let ids: BTreeSet<UniqueAddress> = running
            .iter()
            .map(|(_, n)| n.core.self_unique_address().clone())
            .collect();
        for (a, n) in &running {
            let g = n.core.latest_gossip();
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
            if !n.core.membership_state().convergence() {
                return Err(format!("after heal: node {a} has no convergence"));
            }
        }
        Ok(())
    }
}
