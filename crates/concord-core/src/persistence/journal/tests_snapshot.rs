//! Recoveries from the newest snapshot in one round (`JournalMachine::recover_from_snapshot`):
//! the promises carry each replica's snapshot and pages that start after it.

use super::*;

fn write(first: u64, tags: &[&str]) -> Entry {
    Entry {
        first_seq: first,
        ballot: Ballot::ZERO,
        timestamp_ms: 0,
        events: tags.iter().map(|t| t.as_bytes().to_vec()).collect(),
    }
}

fn snap(seq: u64) -> StoredSnapshot {
    StoredSnapshot {
        seq_nr: seq,
        timestamp_ms: 1,
        payload: vec![seq as u8],
    }
}

/// Node 0 writes 1 (a), 2..=3 (b, c), 4 (d) to `log`.
fn four_events(net: &mut Net, log: &str) {
    net.machines[0].recover(net.now, 1, log.to_owned(), 1, 10);
    let r = net.answer(0, 1, 5_000).result;
    assert!(
        matches!(r, Ok(JournalOutput::Recovered { highest: 0, .. })),
        "{r:?}"
    );
    for (r, w) in [
        (2, write(1, &["a"])),
        (3, write(2, &["b", "c"])),
        (4, write(4, &["d"])),
    ] {
        net.machines[0].append(net.now, r, log.to_owned(), w, false);
        assert_eq!(net.answer(0, r, 1_000).result, Ok(JournalOutput::Appended));
    }
}

fn recovered(e: JournalEvent) -> (Vec<Entry>, u64, Option<StoredSnapshot>) {
    match e.result {
        Ok(JournalOutput::Recovered {
            page,
            highest,
            snapshot,
        }) => (page, highest, snapshot),
        other => panic!("{other:?}"),
    }
}

fn first_seqs(page: &[Entry]) -> Vec<u64> {
    page.iter().map(|e| e.first_seq).collect()
}

#[test]
fn a_recovery_from_the_newest_snapshot_reads_only_the_writes_after_it() {
    let mut net = Net::new(21, 0.0);
    let log = log_name(2);
    four_events(&mut net, &log);

    // No snapshot yet: the whole log, from 1.
    net.machines[2].recover_from_snapshot(net.now, 10, log.clone(), 10);
    let (page, highest, snapshot) = recovered(net.answer(2, 10, 1_000));
    assert_eq!(
        (first_seqs(&page), highest, snapshot),
        (vec![1, 2, 4], 4, None)
    );

    // A snapshot at 3 saved on a majority: the page starts at 4.
    net.machines[1].save_snapshot(net.now, 11, log.clone(), snap(3));
    assert_eq!(net.answer(1, 11, 1_000).result, Ok(JournalOutput::Done));
    net.machines[3].recover_from_snapshot(net.now, 12, log.clone(), 10);
    let (page, highest, snapshot) = recovered(net.answer(3, 12, 1_000));
    assert_eq!(
        (first_seqs(&page), highest, snapshot),
        (vec![4], 4, Some(snap(3)))
    );

    // A snapshot at the highest number: nothing to replay.
    net.machines[1].save_snapshot(net.now, 13, log.clone(), snap(4));
    assert_eq!(net.answer(1, 13, 1_000).result, Ok(JournalOutput::Done));
    net.machines[4].recover_from_snapshot(net.now, 14, log.clone(), 10);
    let (page, highest, snapshot) = recovered(net.answer(4, 14, 1_000));
    assert_eq!((page, highest, snapshot), (vec![], 4, Some(snap(4))));

    // The one who recovered is the writer: it appends 5 at once.
    net.machines[4].append(net.now, 15, log.clone(), write(5, &["e"]), false);
    assert_eq!(net.answer(4, 15, 1_000).result, Ok(JournalOutput::Appended));
}

#[test]
fn a_large_snapshot_cuts_the_page_its_promise_carries() {
    let mut net = Net::new(23, 0.0);
    let log = log_name(1);
    four_events(&mut net, &log);
    for (r, seq) in [(5, 5), (6, 6)] {
        let w = Entry {
            first_seq: seq,
            ballot: Ballot::ZERO,
            timestamp_ms: 0,
            events: vec![vec![seq as u8; 200_000]],
        };
        net.machines[0].append(net.now, r, log.clone(), w, false);
        assert_eq!(net.answer(0, r, 1_000).result, Ok(JournalOutput::Appended));
    }
    let big = StoredSnapshot {
        seq_nr: 1,
        timestamp_ms: 1,
        payload: vec![7; MAX_SNAPSHOT_BYTES],
    };
    net.machines[1].save_snapshot(net.now, 10, log.clone(), big.clone());
    assert_eq!(net.answer(1, 10, 1_000).result, Ok(JournalOutput::Done));
    // Each promise: the snapshot (768 KiB) and the writes that fit in the 256 KiB left —
    // 2..=3, 4 and 5, not 6 — though 10 events were asked for.
    net.machines[2].recover_from_snapshot(net.now, 11, log.clone(), 10);
    let (page, highest, snapshot) = recovered(net.answer(2, 11, 1_000));
    assert_eq!(
        (first_seqs(&page), highest, snapshot),
        (vec![2, 4, 5], 6, Some(big))
    );
}

#[test]
fn replicas_with_older_snapshots_page_from_theirs_and_the_newest_one_wins() {
    let mut net = Net::new(22, 0.0);
    let log = log_name(3);
    four_events(&mut net, &log);
    // Each replica of the log keeps another snapshot: 1, 3 and none.
    let replicas = net.machines[0].replicas(&log);
    assert_eq!(replicas.len(), 3);
    let idx = |u: &UniqueAddress| (u.address.port - 2550) as usize;
    let (r0, r1) = (idx(&replicas[0]), idx(&replicas[1]));
    acceptor::save_snapshot(&mut net.machines[r0].storage, &log, &snap(1)).unwrap();
    acceptor::save_snapshot(&mut net.machines[r1].storage, &log, &snap(3)).unwrap();
    let r2 = idx(&replicas[2]);
    let isolate = |net: &mut Net, x: usize| {
        net.cut.clear();
        for j in 0..NODES as usize {
            if j != x {
                net.cut.insert((x.min(j), x.max(j)));
            }
        }
    };
    // Without the replica that holds none: snapshot 3 wins, the page starts at 4 (r0's
    // own page starts at 2: it holds only snapshot 1).
    isolate(&mut net, r2);
    net.machines[r0].recover_from_snapshot(net.now, 20, log.clone(), 10);
    let (page, highest, snapshot) = recovered(net.answer(r0, 20, 1_000));
    assert_eq!(
        (first_seqs(&page), highest, snapshot),
        (vec![4], 4, Some(snap(3)))
    );
    // Pages of one event: r0's page (from 2) ends before 4, so the page from 4 cannot be
    // told yet — empty, the caller reads on; it never starts before 4 nor skips it.
    net.machines[r0].recover_from_snapshot(net.now, 21, log.clone(), 1);
    let (page, highest, snapshot) = recovered(net.answer(r0, 21, 1_000));
    assert_eq!((page, highest, snapshot), (vec![], 4, Some(snap(3))));
    // Without the replica that holds 3: snapshot 1, the page from 2.
    isolate(&mut net, r1);
    net.machines[r0].recover_from_snapshot(net.now, 22, log.clone(), 10);
    let (page, highest, snapshot) = recovered(net.answer(r0, 22, 1_000));
    assert_eq!(
        (first_seqs(&page), highest, snapshot),
        (vec![2, 4], 4, Some(snap(1)))
    );
}

#[test]
fn a_write_or_snapshot_larger_than_a_promise_can_carry_is_refused_and_nothing_is_sent() {
    let mut net = Net::new(24, 0.0);
    net.run_until(3_000);
    let log = log_name(5);
    four_events(&mut net, &log);
    net.run_until(net.now + 1_000);
    let big = Entry {
        first_seq: 5,
        ballot: Ballot::ZERO,
        timestamp_ms: 0,
        events: vec![vec![7; MAX_WRITE_BYTES + 1]],
    };
    net.machines[0].append(net.now, 10, log.clone(), big, false);
    let too_big = StoredSnapshot {
        seq_nr: 4,
        timestamp_ms: 1,
        payload: vec![7; MAX_SNAPSHOT_BYTES + 1],
    };
    net.machines[0].save_snapshot(net.now, 11, log.clone(), too_big);
    assert!(net.machines[0].poll_transmit().is_none(), "nothing sent");
    for r in [10, 11] {
        let e = net.machines[0].poll_event().expect("answered at once");
        assert_eq!(e.request, r);
        assert!(matches!(e.result, Err(JournalError::Rejected(_))), "{e:?}");
    }
    // The writer goes on: a write of the largest size taken, then a snapshot of it.
    let largest = Entry {
        first_seq: 5,
        ballot: Ballot::ZERO,
        timestamp_ms: 0,
        events: vec![vec![7; MAX_WRITE_BYTES]],
    };
    net.machines[0].append(net.now, 12, log.clone(), largest, false);
    assert_eq!(net.answer(0, 12, 1_000).result, Ok(JournalOutput::Appended));
    let snapshot = StoredSnapshot {
        seq_nr: 5,
        timestamp_ms: 1,
        payload: vec![7; MAX_SNAPSHOT_BYTES],
    };
    net.machines[0].save_snapshot(net.now, 13, log.clone(), snapshot);
    assert_eq!(net.answer(0, 13, 1_000).result, Ok(JournalOutput::Done));
}

/// Simulator seed 2501 (three nodes): a writer removed from the ring, its view not yet
/// changed, saved a snapshot counting its own answer and that of a replica whose view had
/// changed; the replicas of the new list did not hold it, and a recovery returned an older
/// one. A save's answer states the answering replica's list as an accept's does, and one
/// from another view is not counted.
#[test]
fn a_snapshot_save_answered_from_another_view_of_the_replicas_is_not_counted() {
    let mut net = Net::new(22, 0.0);
    let log = log_name(2);
    net.run_until(net.now + 3_000);
    four_events(&mut net, &log);
    let replicas = net.machines[0].replicas(&log);
    let removed = (1..NODES as usize)
        .find(|i| replicas.contains(&ua(*i, net.uids[*i])))
        .expect("another replica");
    // Node 0 still sees the old list; every other node sees `removed` gone.
    let others: Vec<usize> = (1..NODES as usize).collect();
    super::held::view_without(&mut net, removed, &others);
    net.machines[0].save_snapshot(net.now, 20, log.clone(), snap(4));
    let answer = net.answer(0, 20, 3_000);
    assert!(
        matches!(answer.result, Err(JournalError::Unavailable(_))),
        "not counted through another view: {answer:?}"
    );
    assert!(net.machines[0].stats().view_mismatches > 0);
    // Its view catches up: the save is counted.
    super::held::view_without(&mut net, removed, &[0]);
    net.machines[0].save_snapshot(net.now, 21, log.clone(), snap(4));
    assert_eq!(net.answer(0, 21, 3_000).result, Ok(JournalOutput::Done));
}
