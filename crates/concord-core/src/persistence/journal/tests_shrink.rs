//! A segment's replica list that **shrinks**: members leave and no new node takes their
//! place (N = 3 on three nodes, then two, then one). A write two of three replicas chose is
//! on one of the two left; unless the two exchange their copies before the next one
//! leaves, the last replica would answer without it (docs/PERSISTENCE.md, "The limit to
//! state precisely"). The replicas that stay catch up from one another, and a replica
//! whose list shrinks again before it caught up waits until a replica of the earlier list
//! is back.

use super::held::three_writes_to;
use super::*;

/// A ring of nodes 0, 1 and 2 (3 and 4 destroyed and given up), its handoffs ended; node 0
/// writes three writes of a log while node 2 is cut off, so only nodes 0 and 1 hold them.
/// Returns the log's name.
fn writes_on_two_of_three(net: &mut Net) -> String {
    for g in [3usize, 4] {
        net.destroy(g);
    }
    net.publish_view();
    // Segments that had two replicas on nodes 3 and 4 would wait for them: given up.
    let lost = [3usize, 4].map(|g| ua(g, net.uids[g]).address).to_vec();
    net.machines[0].give_up(lost).expect("given up");
    net.drain(0);
    net.run_until(net.now + 5_000);
    for i in 0..3 {
        assert_eq!(net.machines[i].pending_segments(), 0, "node {i} caught up");
    }
    net.cut.insert((0, 2));
    net.cut.insert((1, 2));
    let log = log_name(7);
    three_writes_to(net, &log, 2_000);
    log
}

/// Node `i` recovers `log` (request `r`): the highest sequence number it answers, or
/// `None` if it could not answer within `ms`.
fn recovered(net: &mut Net, i: usize, r: u64, log: &str, ms: u64) -> Option<u64> {
    net.machines[i].recover(net.now, r, log.to_owned(), 1, 10);
    match net.answer(i, r, ms).result {
        Ok(JournalOutput::Recovered { highest, .. }) => Some(highest),
        Err(JournalError::Unavailable(_)) => None,
        other => panic!("{other:?}"),
    }
}

#[test]
fn replicas_left_by_a_shrinking_list_catch_up_before_the_next_leaves() {
    let mut net = Net::new(41, 0.0);
    let log = writes_on_two_of_three(&mut net);
    // Node 0 leaves; nodes 1 and 2 are the log's replicas now, and 2 hears from 1 again.
    net.destroy(0);
    net.cut.remove(&(1, 2));
    net.publish_view();
    net.run_until(net.now + 5_000);
    for i in [1, 2] {
        assert_eq!(net.machines[i].pending_segments(), 0, "node {i} caught up");
    }
    // Node 1 leaves too: node 2 alone holds the log and answers at once, with every
    // write; then a new node 3 joins it.
    net.destroy(1);
    net.publish_view();
    net.run_until(net.now + 1_000);
    assert_eq!(recovered(&mut net, 2, 9, &log, 1_000), Some(3));
    back(&mut net, 3);
    net.run_until(net.now + 5_000);
    for i in [2, 3] {
        assert_eq!(recovered(&mut net, i, 10 + i as u64, &log, 3_000), Some(3));
    }
}

#[test]
fn a_replica_that_leaves_a_shrinking_list_hands_its_copy_to_those_left_before_it_goes() {
    let mut net = Net::new(45, 0.0);
    let log = writes_on_two_of_three(&mut net);
    // Nodes 0 and 1 leave gracefully, one right after the other, before 1 and 2 could
    // exchange anything (node 0 never reaches node 2); they keep running meanwhile.
    net.cut.remove(&(1, 2));
    net.left.insert(0);
    net.publish_view();
    net.left.insert(1);
    net.publish_view();
    assert!(
        !net.machines[1].handed_over(),
        "node 1 has copies to hand over"
    );
    net.run_until(net.now + 5_000);
    // Node 1 handed its copy of every segment to node 2, the only replica left, which
    // waits for nothing and answers with every write.
    assert!(net.machines[1].handed_over());
    // Node 0, cut off from node 2, could not (its exiting phase would end on its timeout).
    assert!(!net.machines[0].handed_over());
    assert_eq!(net.machines[2].pending_segments(), 0);
    assert_eq!(recovered(&mut net, 2, 9, &log, 1_000), Some(3));
    assert!(
        !net.machines[2].handed_over(),
        "a replica never counts as handed over"
    );
}

#[test]
fn a_replica_that_caught_up_from_a_departed_one_stands_complete_when_its_list_shrinks_again() {
    let mut net = Net::new(46, 0.0);
    let log = writes_on_two_of_three(&mut net);
    // Node 0 leaves and hands its copy to node 2, which still hears nothing from node 1:
    // its own copy and node 0's meet every majority, but it waits for node 1's last page.
    net.cut.remove(&(0, 2));
    net.left.insert(0);
    net.publish_view();
    net.run_until(net.now + 3_000);
    assert!(net.machines[2].pending_segments() > 0);
    // Node 1 leaves too before node 2 heard from it (nothing reaches node 2 from it): the
    // wait ends with node 1's departure, and node 2's copy stands complete for the list
    // of one it is now.
    net.left.insert(1);
    net.publish_view();
    net.run_until(net.now + 3_000);
    assert_eq!(net.machines[2].pending_segments(), 0);
    assert_eq!(recovered(&mut net, 2, 9, &log, 1_000), Some(3));
}

/// Nodes 0 and 1 leave one right after the other, before 1 and 2 could exchange anything;
/// with `joiner`, a new node 3 joins node 2, and neither answers for the log without
/// writes 1–3. Then node 1 comes back with its disk.
fn shrunk_twice_then_one_back(seed: u64, joiner: bool) -> (Net, String) {
    let mut net = Net::new(seed, 0.0);
    let log = writes_on_two_of_three(&mut net);
    net.destroy(0);
    net.publish_view();
    net.destroy(1);
    net.publish_view();
    net.run_until(net.now + 1_000);
    assert_eq!(recovered(&mut net, 2, 9, &log, 1_500), None);
    if joiner {
        back(&mut net, 3);
        net.run_until(net.now + 3_000);
        for i in [2, 3] {
            assert_eq!(recovered(&mut net, i, 10 + i as u64, &log, 1_500), None);
        }
    }
    back(&mut net, 1);
    net.run_until(net.now + 5_000);
    (net, log)
}

#[test]
fn a_list_that_shrinks_again_before_its_replicas_caught_up_waits_for_a_replica_of_the_earlier_one()
{
    // Node 1's disk says it held what the earlier list chose; with node 2's copy that is
    // all of it.
    let (mut net, log) = shrunk_twice_then_one_back(42, false);
    for i in [1, 2] {
        assert_eq!(recovered(&mut net, i, 20 + i as u64, &log, 3_000), Some(3));
    }
}

#[test]
fn after_a_new_node_joined_meanwhile_the_wait_ends_once_the_first_replica_is_back() {
    // Node 1 restarted, so it cannot tell what the ring of nodes 2 and 3 chose while it
    // was away: no replica answers without writes 1–3, and they wait for node 0.
    let (mut net, log) = shrunk_twice_then_one_back(43, true);
    for i in [1, 2, 3] {
        let answer = recovered(&mut net, i, 20 + i as u64, &log, 3_000);
        assert!(
            answer.is_none() || answer == Some(3),
            "node {i}: {answer:?}"
        );
    }
    back(&mut net, 0);
    net.run_until(net.now + 5_000);
    for i in [0, 1, 2, 3] {
        assert_eq!(recovered(&mut net, i, 30 + i as u64, &log, 3_000), Some(3));
    }
}

#[test]
fn or_once_the_operator_gave_it_up() {
    let (mut net, log) = shrunk_twice_then_one_back(44, true);
    let lost = vec![ua(0, net.uids[0]).address];
    net.machines[2].give_up(lost).expect("given up");
    net.drain(2);
    net.run_until(net.now + 5_000);
    for i in [1, 2, 3] {
        assert_eq!(recovered(&mut net, i, 30 + i as u64, &log, 3_000), Some(3));
    }
}

/// Node `i` comes back (a new incarnation on its disk) and reaches every node up.
fn back(net: &mut Net, i: usize) {
    net.gone.remove(&i);
    for j in 0..NODES as usize {
        if j != i && !net.gone.contains(&j) {
            net.cut.remove(&(i.min(j), i.max(j)));
        }
    }
    net.restart(i);
}
