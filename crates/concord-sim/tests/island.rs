//! Island clusters in the simulator (issue 24): the first seed node is crashed and
//! restarted while a partition cuts it off from the rest of its cluster. With its
//! membership record it never forms a cluster of its own and, once the partition heals,
//! there is one cluster of three — across seeds, with the simulator's invariants checked
//! at every step. Without a record it forms an island (Akka's first-seed rule).

use std::collections::BTreeSet;

use concord_core::{Address, ClusterIdentity, MembershipRecord};
use concord_sim::network::{NetworkConfig, Partitions};
use concord_sim::schedule::sim_settings;
use concord_sim::Simulation;

/// Forms a, b, c; crashes a; restarts it cut off from b and c, joining the seeds [a, b]
/// with `record`. Returns the simulation, the addresses and the original identity.
fn restart_first_seed_in_a_partition(
    seed: u64,
    record: bool,
) -> (Simulation, Vec<Address>, ClusterIdentity) {
    let mut sim = Simulation::new(seed, sim_settings(), NetworkConfig::default());
    let addrs = sim.form_cluster(3, 30_000).expect("forms");
    let a = addrs[0].clone();
    let original = sim
        .node(&addrs[1])
        .core()
        .cluster_identity()
        .expect("an identity");
    sim.crash(&a);
    sim.run_for(1_000);
    let others: BTreeSet<Address> = addrs[1..].iter().cloned().collect();
    sim.partitions = Partitions::split(&[others, [a.clone()].into()]);
    sim.start_node(a.clone());
    let seeds = vec![a.clone(), addrs[1].clone()];
    let rec = record.then_some(MembershipRecord {
        cluster: Some(original.id),
    });
    sim.with_node(&a, |c, now| {
        c.set_membership_record(rec);
        c.join_seed_nodes(now, &seeds)
    })
    .expect("joins the seed nodes");
    (sim, addrs, original)
}

#[test]
fn a_first_seed_restarted_inside_a_partition_with_its_record_joins_the_original_after_the_heal() {
    for seed in 0..20 {
        let (mut sim, addrs, original) = restart_first_seed_in_a_partition(seed, true);
        let a = addrs[0].clone();
        let timeout = sim.node(&a).core().settings().seed_node_timeout_ms;
        sim.run_for(10 * timeout);
        assert!(
            !sim.node(&a).core().is_initialized(),
            "seed {seed}: the restarted first seed formed an island"
        );
        sim.partitions = Partitions::default();
        sim.run_until_cond(60_000, 100, |s| {
            s.running().count() == 3 && s.node(&a).core().is_initialized() && s.all_up_converged()
        })
        .unwrap_or_else(|| panic!("seed {seed}: no single cluster of three after the heal"));
        for x in &addrs {
            assert_eq!(
                sim.node(x).core().cluster_identity(),
                Some(original),
                "seed {seed}: {x} is in the original cluster"
            );
        }
    }
}

#[test]
fn without_a_record_the_restarted_first_seed_forms_an_island_that_reports_the_original() {
    let (mut sim, addrs, original) = restart_first_seed_in_a_partition(1, false);
    let a = addrs[0].clone();
    sim.run_until_cond(10_000, 100, |s| s.node(&a).core().is_initialized())
        .expect("forms an island by Akka's first-seed rule");
    sim.partitions = Partitions::default();
    // The original cluster's members joined through explicit joins (no seed nodes), so
    // only the island probes: it finds the original and reports it, without yielding.
    sim.run_until_cond(30_000, 100, |s| {
        s.node(&a)
            .core()
            .other_clusters()
            .any(|o| o.identity == original && !o.this_cluster_yields)
    })
    .expect("the island reports the original cluster");
    assert!(sim.node(&a).core().shutdown_reason().is_none());
}
