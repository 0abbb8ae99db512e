//! Fencing and bounds, on a network without faults: a second writer's recovery fences the
//! first (its next write is a conflict; recovering again, it sees the winner's history),
//! a write that does not follow is a conflict, the newest snapshot wins, and a node's
//! requests in flight are bounded.

use super::*;

#[test]
fn a_second_writer_fences_the_first() {
    let mut net = Net::new(7, 0.0);
    let waiting: usize = net.machines.iter().map(|m| m.incomplete_segments()).sum();
    assert!(waiting > 0, "new nodes' copies are incomplete at first");
    net.run_until(2_000);
    assert_eq!(
        net.machines
            .iter()
            .map(|m| m.pending_segments() + m.outgoing_handoffs())
            .sum::<usize>(),
        0,
        "handoffs done"
    );
    let incomplete: Vec<usize> = net
        .machines
        .iter()
        .map(JournalMachine::incomplete_segments)
        .collect();
    assert_eq!(
        incomplete,
        vec![0; net.machines.len()],
        "every copy complete"
    );
    let log = log_name(0);
    let write = |first: u64, tag: &str| Entry {
        first_seq: first,
        ballot: Ballot::ZERO,
        timestamp_ms: 0,
        events: vec![tag.as_bytes().to_vec()],
    };
    let result = |net: &mut Net, i: usize, f: &dyn Fn(&mut JournalMachine<MemoryStorage>, u64)| {
        f(&mut net.machines[i], net.now);
        net.drain(i);
        net.run_until(net.now + 500);
        net.events.pop().expect("answered").1.result
    };
    // Node `i` appends one event, `tag`, at `first` (request `r`).
    let append = |net: &mut Net, i: usize, r: u64, first: u64, tag: &str| {
        let w = write(first, tag);
        result(net, i, &|m, now| {
            m.append(now, r, log.clone(), w.clone(), false)
        })
    };
    assert!(matches!(
        result(&mut net, 0, &|m, now| m.recover(now, 1, log.clone(), 1, 10)),
        Ok(JournalOutput::Recovered { highest: 0, .. })
    ));
    assert_eq!(append(&mut net, 0, 2, 1, "a"), Ok(JournalOutput::Appended));
    // A second incarnation elsewhere recovers: the first is fenced.
    assert!(matches!(
        result(&mut net, 3, &|m, now| m.recover(now, 3, log.clone(), 1, 10)),
        Ok(JournalOutput::Recovered { highest: 1, .. })
    ));
    assert!(matches!(
        append(&mut net, 0, 4, 2, "stale"),
        Err(JournalError::Conflict(_))
    ));
    assert_eq!(append(&mut net, 3, 5, 2, "b"), Ok(JournalOutput::Appended));
    // The fenced writer, recovering again, sees the winner's history.
    let Ok(JournalOutput::Recovered { page, highest, .. }) =
        result(&mut net, 0, &|m, now| m.recover(now, 6, log.clone(), 1, 10))
    else {
        panic!()
    };
    assert_eq!(highest, 2);
    assert_eq!(
        page.iter()
            .flat_map(|e| e.events.clone())
            .collect::<Vec<_>>(),
        vec![b"a".to_vec(), b"b".to_vec()]
    );
    // A write that does not follow is a conflict; snapshots come back newest first.
    assert!(matches!(
        append(&mut net, 0, 7, 5, "gap"),
        Err(JournalError::Conflict(_))
    ));
    let snap = |seq| StoredSnapshot {
        seq_nr: seq,
        timestamp_ms: 1,
        payload: vec![seq as u8],
    };
    assert_eq!(
        result(&mut net, 1, &|m, now| m.save_snapshot(
            now,
            8,
            log.clone(),
            snap(2)
        )),
        Ok(JournalOutput::Done)
    );
    assert_eq!(
        result(&mut net, 2, &|m, now| m.save_snapshot(
            now,
            9,
            log.clone(),
            snap(1)
        )),
        Ok(JournalOutput::Done)
    );
    assert_eq!(
        result(&mut net, 4, &|m, now| m.load_snapshot(now, 10, log.clone())),
        Ok(JournalOutput::Snapshot(Some(snap(2))))
    );
}

#[test]
fn requests_in_flight_are_bounded() {
    let mut net = Net::new(3, 0.0);
    net.run_until(2_000);
    // Node 0 cut off from everyone: its requests wait for answers that never come.
    for j in 1..NODES as usize {
        net.cut.insert((0, j));
    }
    net.machines[0].settings.max_in_flight = 2;
    for r in 1..=3 {
        net.machines[0].recover(net.now, r, log_name(r as usize), 1, 10);
        net.drain(0);
    }
    let refused: Vec<u64> = net
        .events
        .iter()
        .filter(|(_, e)| matches!(e.result, Err(JournalError::Unavailable(_))))
        .map(|(_, e)| e.request)
        .collect();
    assert_eq!(refused, vec![3], "the third is refused at once");
    assert_eq!(net.machines[0].in_flight(), 2);
}
