//! Misplaced copies ([`super::super::misplaced`]): the replicas tell a node that left
//! their list what they hold; a copy that went to a replica is not sent to it again at the
//! next ring change; a new incarnation of the replica gets it.

use super::held::view_of;
use super::restart::{assert_slots_on_disk, twenty_writes_to_a_log_on_node_4};
use super::*;

/// Node `i`'s handoffs of `segment` under way, to whom.
fn sending(net: &Net, i: usize, segment: u16) -> Vec<UniqueAddress> {
    net.machines[i]
        .handoffs
        .outgoing
        .keys()
        .filter(|(s, _)| *s == segment)
        .map(|(_, to)| to.clone())
        .collect()
}

/// Node 4 leaves and a replica new to the log (`c`) takes its copy; node 4 comes back, and
/// `c`'s copy is misplaced: it sends it to the log's three replicas once, and they tell it
/// what they hold (`Handoffs::departure_offers`), so it leaves out nearly all. Then node
/// `d` (no replica of the log) leaves: the log's list stays, and `c` sends nothing of it
/// (before, every ring change sent every misplaced copy whole again). Node 4 restarts: a
/// new incarnation, which is sent `c`'s copy.
#[test]
fn a_misplaced_copy_goes_to_each_replica_once_until_the_replica_restarts() {
    let mut net = Net::new(39, 0.0);
    let log = twenty_writes_to_a_log_on_node_4(&mut net);
    let segment = acceptor::segment_of_log(&log);
    let index = |r: &UniqueAddress| usize::from(r.address.port - 2550);
    let old = net.machines[0].replicas(&log);
    view_of(&mut net, &[0, 1, 2, 3], &[0, 1, 2, 3, 4]);
    let c = net.machines[0]
        .replicas(&log)
        .iter()
        .find(|r| !old.contains(r))
        .map(index)
        .expect("a replica new to the log");
    net.run_until(net.now + 8_000);
    assert_slots_on_disk(&net, c, &log, 20);
    // Node 4 is back: `c` hands its copy to the three replicas.
    let all = [0, 1, 2, 3, 4];
    view_of(&mut net, &all, &all);
    assert_eq!(net.machines[0].replicas(&log), old);
    let before = net.machines[c].stats().clone();
    net.run_until(net.now + 10_000);
    let after = net.machines[c].stats();
    let sent = after.handoff_misplaced_records_sent - before.handoff_misplaced_records_sent;
    let skipped = after.handoff_records_skipped - before.handoff_records_skipped;
    // They told it what they hold (it left their list): it left out the 20 entries and
    // 20 marks each of them held, and sent the log's state record (always sent). Before
    // they told it (until 2026-12-08, only a member that left the ring was told), it sent
    // 123 records: three whole copies.
    assert!(sent <= 6, "{sent} sent, {skipped} left out");
    assert!(skipped >= 3 * 40, "{sent} sent, {skipped} left out");
    assert!(sending(&net, c, segment).is_empty());
    for r in &old {
        assert!(
            net.machines[c]
                .handoffs
                .misplaced_delivered
                .contains_key(&(segment, r.clone())),
            "{r:?}"
        );
    }
    // Node `d` leaves; the log's replicas stay. `c` looks for its misplaced copies again
    // and sends this one nowhere.
    let d = (0..5)
        .find(|i| *i != c && !old.iter().any(|r| index(r) == *i))
        .expect("a node that is no replica of the log");
    let without_d: Vec<usize> = all.iter().copied().filter(|i| *i != d).collect();
    view_of(&mut net, &without_d, &all);
    assert_eq!(net.machines[0].replicas(&log), old);
    let until = net.now + 10_000;
    while net.now < until {
        net.run_until(net.now + 100);
        assert_eq!(sending(&net, c, segment), Vec::new());
    }
    // Node 4 restarts on its disk: a new incarnation, which `c` cannot know to hold its
    // copy. It is sent it.
    net.uids[4] += 100;
    let settings = net.machines[4].settings.clone();
    net.machines[4] =
        JournalMachine::new(settings, ua(4, net.uids[4]), net.disks[4].clone(), net.now);
    view_of(&mut net, &without_d, &all);
    let four = ua(4, net.uids[4]);
    let until = net.now + 10_000;
    let mut sent_to_four = false;
    while net.now < until && !sent_to_four {
        net.run_until(net.now + 100);
        sent_to_four = sending(&net, c, segment).contains(&four);
    }
    assert!(
        sent_to_four,
        "node 4's new incarnation was not sent the copy"
    );
}
