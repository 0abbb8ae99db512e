//! When a proposer's answers leave: a won round whose answers are all on their replicas'
//! disks is answered at once, one that counted this node's own answer of the turn not yet
//! committed waits for that commit.

use super::held::write;
use super::*;

/// A log node 0 replicates, recovered by node 0 (a writer at a standing ballot), and every
/// machine then committing only when told (as the runtime does, once per turn).
fn writer_on_node_0(net: &mut Net) -> (String, Vec<usize>) {
    net.run_until(net.now + 3_000);
    let me = net.machines[0].self_node.clone();
    let log = (0..1000)
        .map(log_name)
        .find(|l| net.machines[0].replicas(l).contains(&me))
        .expect("a log node 0 replicates");
    net.machines[0].recover(net.now, 1, log.clone(), 1, 10);
    assert!(matches!(
        net.answer(0, 1, 1_000).result,
        Ok(JournalOutput::Recovered { highest: 0, .. })
    ));
    net.run_until(net.now + 1_000);
    for m in &mut net.machines {
        m.settings.auto_commit = false;
    }
    let others = net.machines[0]
        .replicas(&log)
        .iter()
        .filter(|r| **r != me)
        .map(|r| (r.address.port - 2550) as usize)
        .collect();
    (log, others)
}

/// Node 0 appends seq 1 (request 2): returns the accept it sends to `to`.
fn append_accept_to(net: &mut Net, log: &str, to: usize) -> JournalMessage {
    net.machines[0].append(net.now, 2, log.to_owned(), write(1, "a"), false);
    let mut accept = None;
    while let Some(t) = net.machines[0].poll_transmit() {
        if t.to.port == 2550 + to as u16 {
            accept = Some(t.message);
        }
    }
    assert!(
        net.machines[0].poll_event().is_none(),
        "one of three answered"
    );
    accept.expect("an accept leaves before the commit")
}

/// Replica `at` takes `msg` from node 0 and commits: its answer.
fn answer_of(net: &mut Net, at: usize, msg: JournalMessage) -> JournalMessage {
    let from = net.machines[0].self_node.clone();
    net.machines[at].handle_message(net.now, &from, msg);
    assert!(
        net.machines[at].poll_transmit().is_none(),
        "an acceptor's answer waits for its commit"
    );
    net.machines[at].commit();
    net.machines[at]
        .poll_transmit()
        .expect("the answer after the commit")
        .message
}

#[test]
fn an_append_whose_majority_is_on_disk_is_answered_before_the_turn_commits() {
    let mut net = Net::new(21, 0.0);
    let (log, others) = writer_on_node_0(&mut net);
    let accept = append_accept_to(&mut net, &log, others[0]);
    // Node 0's turn ends: its own accept is on disk.
    net.machines[0].commit();
    let accepted = answer_of(&mut net, others[0], accept);
    let from = net.machines[others[0]].self_node.clone();
    let before = net.machines[0].stats().answered_before_commit;
    net.machines[0].handle_message(net.now, &from, accepted);
    // Node 0 learned the write (its learn record waits for the next commit), and the
    // append is answered without that commit.
    let event = net.machines[0].poll_event().expect("answered at once");
    assert_eq!(event.request, 2);
    assert_eq!(event.result, Ok(JournalOutput::Appended));
    assert_eq!(net.machines[0].stats().answered_before_commit, before + 1);
}

#[test]
fn an_append_that_counted_its_own_uncommitted_accept_waits_for_the_commit() {
    let mut net = Net::new(22, 0.0);
    let (log, others) = writer_on_node_0(&mut net);
    let accept = append_accept_to(&mut net, &log, others[0]);
    // The other replica answers within the turn that wrote node 0's own accept (the
    // runtime cannot deliver it so soon; a machine must not rely on that).
    let accepted = answer_of(&mut net, others[0], accept);
    let from = net.machines[others[0]].self_node.clone();
    net.machines[0].handle_message(net.now, &from, accepted);
    assert!(
        net.machines[0].poll_event().is_none(),
        "its own accept is not on disk yet"
    );
    net.machines[0].commit();
    let event = net.machines[0]
        .poll_event()
        .expect("answered at the commit");
    assert_eq!(event.result, Ok(JournalOutput::Appended));
}

#[test]
fn an_answer_released_early_stands_when_the_turns_commit_fails() {
    let mut net = Net::new(23, 0.0);
    let (log, others) = writer_on_node_0(&mut net);
    let accept = append_accept_to(&mut net, &log, others[0]);
    net.machines[0].commit();
    let accepted = answer_of(&mut net, others[0], accept);
    let from = net.machines[others[0]].self_node.clone();
    net.machines[0].handle_message(net.now, &from, accepted);
    let event = net.machines[0].poll_event().expect("answered at once");
    assert_eq!(event.result, Ok(JournalOutput::Appended));
    // The commit of the learn fails: nothing is withdrawn, and a recovery elsewhere finds
    // the write (two replicas hold it).
    net.disks[0].fail_next_commits(1);
    net.machines[0].commit();
    assert!(net.machines[0].poll_event().is_none());
    for m in &mut net.machines {
        m.settings.auto_commit = true;
    }
    let other = others[1];
    net.machines[other].recover(net.now, 9, log.clone(), 1, 10);
    let answer = net.answer(other, 9, 2_000);
    match answer.result {
        Ok(JournalOutput::Recovered { page, highest, .. }) => {
            assert_eq!(highest, 1);
            assert_eq!(page.len(), 1);
            assert_eq!(page[0].events, vec![b"a".to_vec()]);
        }
        other => panic!("{other:?}"),
    }
}
