//! Requests held while a log's replicas cannot answer yet (a new cluster's replicas wait
//! for their handoffs), or while the promises a recovery got lack a write of the committed
//! prefix: they are sent again until the replicas answer, or fail at their deadline.

use super::*;
use crate::kv::storage::Table;

fn with_timeout(net: &mut Net, ms: u64) {
    for m in &mut net.machines {
        m.settings.request_timeout_ms = ms;
    }
}

#[test]
fn a_new_cluster_holds_requests_until_its_replicas_caught_up() {
    let mut net = Net::new(11, 0.0);
    with_timeout(&mut net, 5_000);
    assert!(net.machines[0].pending_segments() > 0, "a new node waits");
    let log = log_name(1);
    net.machines[0].recover(net.now, 1, log.clone(), 1, 10);
    let answer = net.answer(0, 1, 5_000);
    assert!(
        matches!(
            answer.result,
            Ok(JournalOutput::Recovered { highest: 0, .. })
        ),
        "{answer:?}"
    );
    assert!(
        net.machines[0].stats().held > 0,
        "the first rounds were held"
    );
    assert_eq!(net.machines[0].in_flight(), 0);
    let write = Entry {
        first_seq: 1,
        ballot: Ballot::ZERO,
        timestamp_ms: 0,
        events: vec![b"a".to_vec()],
    };
    net.machines[0].append(net.now, 2, log, write, false);
    assert_eq!(net.answer(0, 2, 1_000).result, Ok(JournalOutput::Appended));
}

#[test]
fn a_held_request_fails_at_its_deadline_if_the_replicas_never_catch_up() {
    let mut net = Net::new(12, 0.0);
    with_timeout(&mut net, 1_000);
    // The other nodes cannot reach one another: their handoffs never end.
    for i in 1..NODES as usize {
        for j in i + 1..NODES as usize {
            net.cut.insert((i, j));
        }
    }
    let me = net.machines[0].self_node.clone();
    let l = (0..1000)
        .find(|l| !net.machines[0].replicas(&log_name(*l)).contains(&me))
        .expect("a log node 0 does not replicate");
    net.machines[0].recover(net.now, 1, log_name(l), 1, 10);
    net.drain(0);
    net.run_until(900);
    assert!(net.events.is_empty(), "held, not failed at once");
    let answer = net.answer(0, 1, 600);
    assert!(
        matches!(answer.result, Err(JournalError::Unavailable(_))),
        "{answer:?}"
    );
    assert!(
        net.machines[0].stats().held > 1,
        "sent again until the deadline"
    );
    assert_eq!(net.machines[0].in_flight(), 0, "nothing left held");
}

fn write(first_seq: u64, tag: &str) -> Entry {
    Entry {
        first_seq,
        ballot: Ballot::ZERO,
        timestamp_ms: 0,
        events: vec![tag.as_bytes().to_vec()],
    }
}

/// A log of three writes through node 0 in a cluster whose handoffs ended, learned by every
/// replica; returns the log's name.
fn three_writes(net: &mut Net) -> String {
    net.run_until(net.now + 3_000);
    assert_eq!(net.machines[0].pending_segments(), 0, "handoffs ended");
    let log = log_name(2);
    net.machines[0].recover(net.now, 1, log.clone(), 1, 10);
    assert!(matches!(
        net.answer(0, 1, 1_000).result,
        Ok(JournalOutput::Recovered { highest: 0, .. })
    ));
    for seq in 1..=3 {
        net.machines[0].append(net.now, 1 + seq, log.clone(), write(seq, "w"), false);
        let answer = net.answer(0, 1 + seq, 1_000);
        assert_eq!(answer.result, Ok(JournalOutput::Appended), "{answer:?}");
    }
    net.run_until(net.now + 1_000);
    log
}

/// Removes the write at `slot` of `log` from every disk but those in `keep`.
fn lose_write(net: &mut Net, log: &str, slot: u64, keep: &[usize]) {
    let k = acceptor::key(log, acceptor::KIND_ENTRY, slot);
    for (i, disk) in net.disks.iter_mut().enumerate() {
        if !keep.contains(&i) {
            disk.remove(Table::Journal, &k).expect("removed");
        }
    }
}

#[test]
fn a_recovery_whose_promises_lack_a_chosen_write_is_held_not_answered_short() {
    let mut net = Net::new(13, 0.0);
    with_timeout(&mut net, 1_000);
    let log = three_writes(&mut net);
    // No replica holds slot 2 any more, though every one says it is chosen (a handoff's
    // log state that arrived before its writes looks the same).
    lose_write(&mut net, &log, 2, &[]);
    net.machines[1].recover(net.now, 10, log.clone(), 1, 10);
    net.drain(1);
    net.run_until(net.now + 900);
    assert!(
        net.events.iter().all(|(_, e)| e.request != 10),
        "no page that stops at 1 of 3: {:?}",
        net.events
    );
    assert!(net.machines[1].stats().gaps > 0);
    let answer = net.answer(1, 10, 600);
    assert!(
        matches!(answer.result, Err(JournalError::Unavailable(_))),
        "{answer:?}"
    );
    assert_eq!(net.machines[1].in_flight(), 0, "nothing left held");
}

#[test]
fn a_held_recovery_answers_once_a_replica_holds_the_write_again() {
    let mut net = Net::new(14, 0.0);
    with_timeout(&mut net, 5_000);
    let log = three_writes(&mut net);
    let replicas = net.machines[1].replicas(&log);
    let k = acceptor::key(&log, acceptor::KIND_ENTRY, 2);
    let holder = (0..NODES as usize)
        .find(|i| replicas.contains(&ua(*i, net.uids[*i])))
        .expect("a replica");
    let kept = net.disks[holder]
        .get(Table::Journal, &k)
        .expect("read")
        .expect("held");
    lose_write(&mut net, &log, 2, &[]);
    net.machines[1].recover(net.now, 10, log.clone(), 1, 10);
    net.drain(1);
    net.run_until(net.now + 500);
    assert!(net.events.iter().all(|(_, e)| e.request != 10), "held");
    // The write arrives (the rest of a handoff).
    net.disks[holder]
        .put(Table::Journal, &k, &kept)
        .expect("written");
    match net.answer(1, 10, 2_000).result {
        Ok(JournalOutput::Recovered { page, highest }) => {
            assert_eq!(highest, 3);
            let seqs: Vec<u64> = page.iter().map(|e| e.first_seq).collect();
            assert_eq!(seqs, vec![1, 2, 3]);
        }
        other => panic!("{other:?}"),
    }
}
