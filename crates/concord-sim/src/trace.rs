//! Tracing a simulated run by hand (`CONCORD_SIM_TRACE` in the simulator's tests): every
//! node's membership view, the unreachability records it holds and its latest resolver
//! decision, one line per node.

use concord_core::ReachabilityStatus;

use crate::sim::Simulation;

/// Prints one line per node to stderr: time (ms), host, its view, the records that are not
/// Reachable (`observer>subject`) and its latest resolver decision.
pub fn print_views(sim: &Simulation) {
    for (a, n) in sim.nodes.iter() {
        let g = n.core().latest_gossip();
        let recs: Vec<String> = g
            .overview
            .reachability
            .records()
            .filter(|r| r.2 != ReachabilityStatus::Reachable)
            .map(|(o, s, _)| format!("{}>{}", o.address.host, s.address.host))
            .collect();
        let decision = n.core().recent_sbr_decisions().last().map(|d| {
            format!(
                "{} {:?} {:?}",
                d.at_ms,
                d.decision,
                d.nodes
                    .iter()
                    .map(|x| x.address.host.as_str())
                    .collect::<Vec<_>>()
            )
        });
        eprintln!(
            "{:>8} {} {} {recs:?} last decision {decision:?}",
            sim.now,
            a.host,
            n.membership_line()
        );
    }
}
