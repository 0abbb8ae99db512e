//! A node restarted before its first handoff ended: its wait is on disk
//! ([`super::super::owed`]), so it does not answer from its empty copy although no ring of
//! its own is on disk and none of the replicas that held the segment is in its ring.

use super::held::{answer_to, recovery_held, three_writes_to, view_of, with_timeout};
use super::*;

#[test]
fn a_new_replica_restarted_before_its_handoff_ended_waits_for_the_replicas_that_held_it() {
    let mut net = Net::new(35, 0.0);
    with_timeout(&mut net, 5_000);
    net.run_until(net.now + 3_000);
    // Node 4 is downed, and comes back as a brand-new node: a new incarnation, an empty
    // disk, no ring it was ever complete in.
    let four = [0usize, 1, 2, 3];
    view_of(&mut net, &four, &four);
    net.run_until(net.now + 3_000);
    net.uids[4] += 100;
    net.disks[4] = MemoryStorage::new();
    let settings = net.machines[4].settings.clone();
    let (vnodes, n) = (settings.virtual_nodes, settings.n);
    net.machines[4] =
        JournalMachine::new(settings, ua(4, net.uids[4]), net.disks[4].clone(), net.now);
    // A log whose list gains node 4 when it joins; three writes on the ring of four.
    let members = |ix: &[usize], net: &Net| -> Vec<UniqueAddress> {
        ix.iter().map(|&i| ua(i, net.uids[i])).collect()
    };
    let five = Ring::new(members(&[0, 1, 2, 3, 4], &net), vnodes);
    let joiner = ua(4, net.uids[4]);
    let log = (0..)
        .map(log_name)
        .find(|l| {
            five.preference_list(acceptor::segment_of_log(l), n)
                .contains(&&joiner)
        })
        .expect("a log on node 4");
    let segment = acceptor::segment_of_log(&log);
    three_writes_to(&mut net, &log, 3_000);
    let held: Vec<usize> = Ring::new(members(&four, &net), vnodes)
        .preference_list(segment, n)
        .iter()
        .map(|a| usize::from(a.address.port - 2550))
        .collect();
    // Node 4 joins, cut off from every other node: it waits, and its wait is on disk.
    for i in four {
        net.cut.insert((i, 4));
    }
    view_of(&mut net, &[0, 1, 2, 3, 4], &[0, 1, 2, 3, 4]);
    net.run_until(net.now + 1_000);
    assert!(net.machines[4].pending().contains_key(&segment));
    needs_on_disk_as_computed(&mut net);
    // Every other node is downed; node 4 restarts on its disk and forms a cluster alone.
    net.uids[4] += 100;
    let settings = net.machines[4].settings.clone();
    net.machines[4] =
        JournalMachine::new(settings, ua(4, net.uids[4]), net.disks[4].clone(), net.now);
    view_of(&mut net, &[4], &[4]);
    // Its copy is empty: it does not answer from it alone.
    recovery_held(&mut net, 4, 40, &log, 2_000);
    // The replicas that held the log come back and hand their records over.
    for i in four {
        net.cut.remove(&(i, 4));
    }
    let mut back = held.clone();
    back.push(4);
    view_of(&mut net, &back, &back);
    net.run_until(net.now + 5_000);
    let answer = answer_to(&mut net, 40);
    assert!(
        matches!(
            answer,
            Some(Ok(JournalOutput::Recovered { highest: 3, .. }))
        ),
        "{answer:?}"
    );
    needs_on_disk_as_computed(&mut net);
}

/// On every node, the needs on disk are those its handoffs compute (written segment by
/// segment as pages arrive, all of them at a ring change).
fn needs_on_disk_as_computed(net: &mut Net) {
    for (i, m) in net.machines.iter().enumerate() {
        let mut disk = net.disks[i].clone();
        let stored = owed::load(&mut disk).expect("readable");
        assert_eq!(stored, m.handoffs.owed_on_disk, "node {i}");
        assert_eq!(stored, m.handoffs.needs_on_disk(), "node {i}");
    }
}
