//! A node restarted before its first handoff ended: its wait is on disk
//! ([`super::super::owed`]), so it does not answer from its empty copy although no ring of
//! its own is on disk and none of the replicas that held the segment is in its ring.

use super::held::{
    answer_to, recovery_held, three_writes_to, view_of, with_timeout, write, writes_to,
};
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
    let log = log_replicated_on_node_4(&net);
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

/// A log whose replica list, in the ring of nodes 0–4 as they are now, holds node 4.
fn log_replicated_on_node_4(net: &Net) -> String {
    let settings = &net.machines[4].settings;
    let five = Ring::new((0..5).map(|i| ua(i, net.uids[i])), settings.virtual_nodes);
    let four = ua(4, net.uids[4]);
    (0..)
        .map(log_name)
        .find(|l| {
            five.preference_list(acceptor::segment_of_log(l), settings.n)
                .contains(&&four)
        })
        .expect("a log on node 4")
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

/// A replica restarted with its disk says what it holds ([`super::super::holding`]): the
/// replicas that hand its segments back send only the writes made while it was away, and
/// the log it then recovers holds every write.
#[test]
fn a_replica_restarted_with_its_disk_is_sent_only_what_it_lacks() {
    let mut net = Net::new(36, 0.0);
    with_timeout(&mut net, 5_000);
    net.run_until(net.now + 3_000);
    let settings = net.machines[4].settings.clone();
    let log = log_replicated_on_node_4(&net);
    // 20 writes while node 4 is a replica.
    net.machines[0].recover(net.now, 1, log.clone(), 1, 10);
    assert!(matches!(
        net.answer(0, 1, 3_000).result,
        Ok(JournalOutput::Recovered { highest: 0, .. })
    ));
    let mut request = 1;
    let mut append = |net: &mut Net, seq: u64| {
        request += 1;
        net.machines[0].append(net.now, request, log.clone(), write(seq, "w"), false);
        let answer = net.answer(0, request, 3_000);
        assert_eq!(answer.result, Ok(JournalOutput::Appended), "{answer:?}");
    };
    for seq in 1..=20 {
        append(&mut net, seq);
    }
    net.run_until(net.now + 1_000);
    // Node 4 leaves the ring; 3 more writes; it comes back, restarted on its disk.
    let four = [0usize, 1, 2, 3];
    view_of(&mut net, &four, &four);
    net.run_until(net.now + 3_000);
    for seq in 21..=23 {
        append(&mut net, seq);
    }
    net.run_until(net.now + 1_000);
    net.uids[4] += 100;
    net.machines[4] =
        JournalMachine::new(settings, ua(4, net.uids[4]), net.disks[4].clone(), net.now);
    let skipped_before: u64 = net
        .machines
        .iter()
        .map(|m| m.stats().handoff_records_skipped)
        .sum();
    view_of(&mut net, &[0, 1, 2, 3, 4], &[0, 1, 2, 3, 4]);
    net.run_until(net.now + 5_000);
    assert!(!net.machines[4]
        .pending()
        .contains_key(&acceptor::segment_of_log(&log)));
    let skipped: u64 = net
        .machines
        .iter()
        .map(|m| m.stats().handoff_records_skipped)
        .sum::<u64>()
        - skipped_before;
    // Each of the log's other replicas left out node 4's 20 writes and their marks.
    assert!(skipped >= 20, "{skipped} records left out");
    // What node 4 holds now is the whole log: it answers a recovery with a replica that
    // never saw the last writes cut off.
    net.machines[4].recover(net.now, 90, log.clone(), 1, 100);
    let answer = net.answer(4, 90, 3_000);
    assert!(
        matches!(
            answer.result,
            Ok(JournalOutput::Recovered { highest: 23, .. })
        ),
        "{answer:?}"
    );
    assert_slots_on_disk(&net, 4, &log, 23);
}

/// A replica that leaves the ring hands its copies to the segments' replicas before it
/// goes (`Handoffs::send_misplaced`); they tell it what they hold once they no longer wait
/// there ([`super::super::holding`]), so it sends only what they lack: here nothing of the
/// log's 20 writes (the two replicas that stay held them, and the new one took them from
/// those two). It is done handing over, and every replica holds every write.
#[test]
fn a_leaving_replica_sends_only_what_the_replicas_lack() {
    let mut net = Net::new(37, 0.0);
    let log = twenty_writes_to_a_log_on_node_4(&mut net);
    let sent_before = net.machines[4].stats().handoff_records_sent;
    let skipped_before = net.machines[4].stats().handoff_records_skipped;
    // Node 4 leaves: every node, itself included, sees the ring without it.
    view_of(&mut net, &[0, 1, 2, 3], &[0, 1, 2, 3, 4]);
    net.run_until(net.now + 8_000);
    assert!(net.machines[4].handed_over(), "node 4 still hands over");
    let stats = net.machines[4].stats();
    let (sent, skipped) = (
        stats.handoff_records_sent - sent_before,
        stats.handoff_records_skipped - skipped_before,
    );
    // Each of the log's three replicas was told what it lacks: none of the 20 entries.
    assert!(skipped >= 3 * 20, "{skipped} left out, {sent} sent");
    let replicas = net.machines[0].replicas(&log);
    assert!(!replicas.iter().any(|r| r.address.port == 2554));
    for r in &replicas {
        assert_slots_on_disk(&net, usize::from(r.address.port - 2550), &log, 20);
    }
}

/// A log replicated on node 4 (`log_replicated_on_node_4`), recovered by node 0, which
/// then writes slots 1 to 20 to it.
pub(super) fn twenty_writes_to_a_log_on_node_4(net: &mut Net) -> String {
    with_timeout(net, 5_000);
    net.run_until(net.now + 3_000);
    let log = log_replicated_on_node_4(net);
    writes_to(net, &log, 20, 3_000, 3_000);
    log
}

/// Node `i`'s disk holds `log`'s entries at slots 1 to `last`.
pub(super) fn assert_slots_on_disk(net: &Net, i: usize, log: &str, last: u64) {
    let mut disk = net.disks[i].clone();
    for seq in 1..=last {
        let k = acceptor::key(log, acceptor::KIND_ENTRY, seq);
        assert!(
            disk.get(crate::kv::storage::Table::Journal, &k)
                .unwrap()
                .is_some(),
            "slot {seq} on node {i}"
        );
    }
}

/// A replica new to a segment needs the copies of a majority of its previous replicas,
/// which hold the same records: it tells its holding to one of them at a time
/// (`JournalMachine::ask_handoffs`), so the first sends the log whole and the second only
/// what the new replica still lacks by then — not a second copy of all of it.
#[test]
fn a_new_replica_takes_one_copy_whole_and_from_the_next_only_what_it_lacks() {
    let mut net = Net::new(38, 0.0);
    let log = twenty_writes_to_a_log_on_node_4(&mut net);
    let index = |r: &UniqueAddress| usize::from(r.address.port - 2550);
    let old = net.machines[0].replicas(&log);
    let totals = |net: &Net, nodes: &[usize]| {
        nodes.iter().fold((0, 0), |(sent, skipped), &i| {
            let s = net.machines[i].stats();
            (
                sent + s.handoff_records_sent,
                skipped + s.handoff_records_skipped,
            )
        })
    };
    // Node 4 leaves: every node, itself included, sees the ring without it.
    view_of(&mut net, &[0, 1, 2, 3], &[0, 1, 2, 3, 4]);
    let new = net.machines[0].replicas(&log);
    let staying: Vec<usize> = new.iter().filter(|r| old.contains(r)).map(index).collect();
    let added = new
        .iter()
        .find(|r| !old.contains(r))
        .map(index)
        .expect("a replica new to the log");
    assert_eq!(staying.len(), 2);
    let before = totals(&net, &staying);
    net.run_until(net.now + 8_000);
    assert!(!net.machines[added]
        .pending()
        .contains_key(&acceptor::segment_of_log(&log)));
    assert_slots_on_disk(&net, added, &log, 20);
    let after = totals(&net, &staying);
    let (sent, skipped) = (after.0 - before.0, after.1 - before.1);
    // One whole copy (the 20 entries, their 20 marks, the log's state record) and, from
    // the second replica, the state record alone: it left out the 40 others.
    assert!(skipped >= 40, "{skipped} left out, {sent} sent");
    assert!(sent <= 42, "{sent} sent, {skipped} left out");
}
