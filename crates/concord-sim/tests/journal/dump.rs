//! What the journal test prints when a seed fails: every node's records
//! (`CONCORD_SIM_TRACE`) and the waits of handoffs that do not finish.

use concord_core::persistence::journal::Entry;
use concord_sim::Simulation;

use super::{Disks, Journal};

/// Every node's journal records (for `CONCORD_SIM_TRACE`).
pub fn records(sim: &Simulation, disks: &Disks) {
    use concord_core::kv::Table;
    for (a, d) in disks.borrow().iter() {
        let running = sim.nodes.get(a).is_some_and(|n| n.is_running());
        eprintln!(
            "{} running={running} ring={:?}",
            a.host,
            sim.machine::<Journal>(a).map(|j| j
                .machine
                .ring()
                .members()
                .iter()
                .map(|m| (m.address.host.clone(), m.uid))
                .collect::<Vec<_>>())
        );
        for (k, v) in d.records(Table::Journal) {
            let log = String::from_utf8_lossy(&k[2..k.len() - 10]).into_owned();
            let kind = k[k.len() - 9];
            let seq = u64::from_be_bytes(k[k.len() - 8..].try_into().unwrap());
            let detail = if kind == 1 {
                let e = Entry::decode(seq, &v).unwrap();
                format!(
                    "{}..={} b={}.{}",
                    e.first_seq,
                    e.last_seq(),
                    e.ballot.round,
                    e.ballot.node
                )
            } else {
                format!("{v:?}")
            };
            eprintln!("   {log} kind={kind} seq={seq} {detail}");
        }
    }
}

/// Each running node's standing and replica lists for the first segments, and its first
/// waits.
pub fn waits(sim: &Simulation) {
    for (a, _) in sim.running() {
        let j = &sim.machine::<Journal>(a).unwrap().machine;
        let standings: Vec<_> = (0..4).map(|s| j.standing(s)).collect();
        let lists: Vec<Vec<String>> = (0..2)
            .map(|s| {
                j.ring()
                    .preference_list(s, 3)
                    .iter()
                    .map(|m| m.address.host.clone())
                    .collect()
            })
            .collect();
        eprintln!("{} standing {standings:?} lists {lists:?}", a.host);
        for (seg, p) in j.pending().iter().take(2) {
            eprintln!(
                "{} pending {seg}: from {:?} previous {:?} received {:?} first {}",
                a.host,
                p.from
                    .iter()
                    .map(|f| f.address.host.clone())
                    .collect::<Vec<_>>(),
                p.previous
                    .iter()
                    .map(|f| f.host.clone())
                    .collect::<Vec<_>>(),
                p.received
                    .iter()
                    .map(|(f, standing)| (f.host.clone(), *standing))
                    .collect::<Vec<_>>(),
                p.first_ring
            );
        }
        eprintln!(
            "{} pending {} outgoing {}",
            a.host,
            j.pending_segments(),
            j.outgoing_handoffs()
        );
    }
}
