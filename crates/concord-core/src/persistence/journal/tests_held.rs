//! Requests held while a log's replicas cannot answer yet (a new cluster's replicas wait
//! for their handoffs), or while the promises a recovery got lack a write of the committed
//! prefix: they are sent again until the replicas answer, or fail at their deadline.

use super::*;
use crate::kv::storage::Table;
use crate::persistence::journal::give_up::MAX_GIVE_UP;

pub(super) fn with_timeout(net: &mut Net, ms: u64) {
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
    let Err(JournalError::Unavailable(why)) = &answer.result else {
        panic!("{answer:?}");
    };
    // The error names why the replicas could not answer, and they counted it.
    assert!(
        why.contains(UnableReason::Synchronising.describe()),
        "{why}"
    );
    let synchronising: u64 = net
        .machines
        .iter()
        .map(|m| m.stats().unable_answers[UnableReason::Synchronising.code() as usize])
        .sum();
    assert!(synchronising > 0);
    assert!(
        net.machines[0].stats().held > 1,
        "sent again until the deadline"
    );
    assert_eq!(net.machines[0].in_flight(), 0, "nothing left held");
}

pub(super) fn write(first_seq: u64, tag: &str) -> Entry {
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
    three_writes_to(net, &log, 1_000);
    log
}

/// Node 0 recovers `log` (empty; within `ms`) and writes three writes to it (requests 1
/// to 4), then the network runs 1 s more.
pub(super) fn three_writes_to(net: &mut Net, log: &str, ms: u64) {
    writes_to(net, log, 3, ms, 1_000);
}

/// Node 0 recovers `log` (answered within `recover_ms`) and writes slots 1 to `count` to
/// it (each answered within `append_ms`), then the network runs 1 s more.
pub(super) fn writes_to(net: &mut Net, log: &str, count: u64, recover_ms: u64, append_ms: u64) {
    net.machines[0].recover(net.now, 1, log.to_owned(), 1, 10);
    assert!(matches!(
        net.answer(0, 1, recover_ms).result,
        Ok(JournalOutput::Recovered { highest: 0, .. })
    ));
    for seq in 1..=count {
        net.machines[0].append(net.now, 1 + seq, log.to_owned(), write(seq, "w"), false);
        let answer = net.answer(0, 1 + seq, append_ms);
        assert_eq!(answer.result, Ok(JournalOutput::Appended), "{answer:?}");
    }
    net.run_until(net.now + 1_000);
}

/// Node `at` recovers `log` (request `r`), and `ms` later it has not answered.
pub(super) fn recovery_held(net: &mut Net, at: usize, r: u64, log: &str, ms: u64) {
    net.machines[at].recover(net.now, r, log.to_owned(), 1, 10);
    net.drain(at);
    net.run_until(net.now + ms);
    assert!(
        net.events.iter().all(|(_, e)| e.request != r),
        "answered while it should be held: {:?}",
        net.events
    );
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
    // No page that stops at 1 of 3.
    recovery_held(&mut net, 1, 10, &log, 900);
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
    recovery_held(&mut net, 1, 10, &log, 500);
    // The write arrives (the rest of a handoff).
    net.disks[holder]
        .put(Table::Journal, &k, &kept)
        .expect("written");
    assert_recovered_whole(net.answer(1, 10, 2_000).result, 3);
}

/// Asserts that `result` is a recovery of the whole chain `1..=highest`, one write per
/// number.
fn assert_recovered_whole(result: Result<JournalOutput, JournalError>, highest: u64) {
    match result {
        Ok(JournalOutput::Recovered {
            page, highest: h, ..
        }) => {
            assert_eq!(h, highest);
            let seqs: Vec<u64> = page.iter().map(|e| e.first_seq).collect();
            assert_eq!(seqs, (1..=highest).collect::<Vec<_>>());
        }
        other => panic!("{other:?}"),
    }
}

/// Node 0, `log`'s writer, sees another replica of it removed; the others do not yet (its
/// view leads a ring change). Returns the replica removed.
fn writer_view_leads(net: &mut Net, log: &str) -> usize {
    let replicas = net.machines[0].replicas(log);
    let removed = (1..NODES as usize)
        .find(|i| replicas.contains(&ua(*i, net.uids[*i])))
        .expect("another replica");
    view_without(net, removed, &[0]);
    removed
}

/// Gives the machines `to` a view of the cluster without node `removed` (their ring changes;
/// the others keep theirs).
pub(super) fn view_without(net: &mut Net, removed: usize, to: &[usize]) {
    let members: Vec<usize> = (0..NODES as usize).filter(|i| *i != removed).collect();
    view_of(net, &members, to);
}

#[test]
fn a_promise_from_another_view_of_the_replicas_counts_only_once_the_views_agree() {
    let mut net = Net::new(15, 0.0);
    with_timeout(&mut net, 5_000);
    let log = three_writes(&mut net);
    // Node 1 sees a replica of the log removed (its view leads); the others do not yet.
    let replicas = net.machines[1].replicas(&log);
    let removed = (0..NODES as usize)
        .find(|i| *i != 1 && replicas.contains(&ua(*i, net.uids[*i])))
        .expect("another replica");
    view_without(&mut net, removed, &[1]);
    assert_ne!(
        net.machines[1].replicas(&log),
        replicas,
        "node 1's list changed"
    );
    recovery_held(&mut net, 1, 10, &log, 1_000);
    assert!(net.machines[1].stats().view_mismatches > 0);
    // The others' views catch up: the held recovery answers, with every write.
    let others: Vec<usize> = (0..NODES as usize).filter(|i| *i != 1).collect();
    view_without(&mut net, removed, &others);
    assert_recovered_whole(net.answer(1, 10, 3_500).result, 3);
}

/// A read and a snapshot load state their replica's list too: answers from a replica that
/// sees another list are not counted (a reader whose view lags, or leads, could otherwise
/// read a majority that holds none of the last writes); the rounds are held until the
/// views agree.
#[test]
fn a_read_or_snapshot_load_from_another_view_of_the_replicas_counts_only_once_the_views_agree() {
    let mut net = Net::new(17, 0.0);
    with_timeout(&mut net, 5_000);
    let log = three_writes(&mut net);
    let saved = StoredSnapshot {
        seq_nr: 3,
        timestamp_ms: 1,
        payload: b"state".to_vec(),
    };
    net.machines[0].save_snapshot(net.now, 5, log.clone(), saved.clone());
    assert_eq!(net.answer(0, 5, 1_000).result, Ok(JournalOutput::Done));
    let replicas = net.machines[1].replicas(&log);
    let removed = (0..NODES as usize)
        .find(|i| *i != 1 && replicas.contains(&ua(*i, net.uids[*i])))
        .expect("another replica");
    view_without(&mut net, removed, &[1]);
    net.machines[1].read(net.now, 10, log.clone(), 1, u64::MAX, 10);
    net.machines[1].load_snapshot(net.now, 11, log.clone());
    net.drain(1);
    net.run_until(net.now + 1_000);
    assert!(
        net.events
            .iter()
            .all(|(_, e)| e.request != 10 && e.request != 11),
        "answered through another view: {:?}",
        net.events
    );
    assert!(net.machines[1].stats().view_mismatches > 0);
    let others: Vec<usize> = (0..NODES as usize).filter(|i| *i != 1).collect();
    view_without(&mut net, removed, &others);
    net.run_until(net.now + 3_500);
    let answer = |r: u64| {
        net.events
            .iter()
            .find(|(_, e)| e.request == r)
            .map(|(_, e)| e.result.clone())
    };
    match answer(10) {
        Some(Ok(JournalOutput::Read(page))) => {
            let seqs: Vec<u64> = page.iter().map(|e| e.first_seq).collect();
            assert_eq!(seqs, vec![1, 2, 3]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(answer(11), Some(Ok(JournalOutput::Snapshot(Some(saved)))));
}

/// An established writer's accept that a majority cannot take — here its replicas' views
/// differ from the writer's (a ring change spreading) — is not failed: it is held and sent
/// again, as it was, until the views agree, and the append is answered once chosen.
#[test]
fn an_accept_answered_from_another_view_of_the_replicas_is_held_until_the_views_agree() {
    let mut net = Net::new(16, 0.0);
    with_timeout(&mut net, 5_000);
    let log = three_writes(&mut net);
    let removed = writer_view_leads(&mut net, &log);
    net.machines[0].append(net.now, 20, log.clone(), write(4, "w"), false);
    net.drain(0);
    net.run_until(net.now + 1_000);
    assert!(
        answer_to(&mut net, 20).is_none(),
        "held while the views differ, not failed"
    );
    assert!(net.machines[0].stats().view_mismatches > 0);
    assert!(net.machines[0].stats().accepts_held > 0);
    // Views agree: the held append is chosen, and the writer writes on.
    let others: Vec<usize> = (1..NODES as usize).collect();
    view_without(&mut net, removed, &others);
    net.run_until(net.now + 3_500);
    assert_eq!(answer_to(&mut net, 20), Some(Ok(JournalOutput::Appended)));
    net.machines[0].append(net.now, 21, log.clone(), write(5, "w"), false);
    assert_eq!(net.answer(0, 21, 1_000).result, Ok(JournalOutput::Appended));
    // Another node recovers the log: every write once, in order.
    net.machines[2].recover(net.now, 22, log, 1, 10);
    assert_recovered_whole(net.answer(2, 22, 3_000).result, 5);
}

/// An established writer's append while two of its log's three replicas are restarted
/// (new incarnations: each waits for its segment's handoff and answers "synchronising")
/// is held and answered once they caught up; the write is chosen once, at its number.
#[test]
fn an_append_while_a_majority_of_replicas_synchronise_is_held_until_they_caught_up() {
    let mut net = Net::new(18, 0.0);
    with_timeout(&mut net, 5_000);
    let log = three_writes(&mut net);
    let replicas = net.machines[0].replicas(&log);
    let restarted: Vec<usize> = (1..NODES as usize)
        .filter(|i| replicas.contains(&ua(*i, net.uids[*i])))
        .take(2)
        .collect();
    assert_eq!(restarted.len(), 2, "two replicas other than node 0");
    for &i in &restarted {
        net.restart(i);
    }
    assert!(restarted
        .iter()
        .all(|&i| net.machines[i].pending_segments() > 0));
    net.machines[0].append(net.now, 30, log.clone(), write(4, "w"), false);
    let answer = net.answer(0, 30, 4_000);
    assert_eq!(answer.result, Ok(JournalOutput::Appended), "{answer:?}");
    let synchronising: u64 = restarted
        .iter()
        .map(|&i| {
            net.machines[i].stats().unable_answers[UnableReason::Synchronising.code() as usize]
        })
        .sum();
    assert!(
        synchronising > 0,
        "the first accept met replicas still synchronising"
    );
    assert!(net.machines[0].stats().accepts_held > 0);
    net.machines[restarted[0]].recover(net.now, 31, log, 1, 10);
    assert_recovered_whole(net.answer(restarted[0], 31, 3_000).result, 4);
}

/// A held accept whose log another writer took over meanwhile is refused when sent again:
/// the append fails as unavailable (an earlier round may have been taken by a minority, so
/// the write may be stored), not as a conflict, and the writer is forgotten.
#[test]
fn a_held_accept_refused_by_a_newer_writer_fails_as_unavailable() {
    let mut net = Net::new(19, 0.0);
    with_timeout(&mut net, 5_000);
    let log = three_writes(&mut net);
    // Node 0's accepts are not counted; node 3 recovers the log meanwhile, a newer writer
    // at a higher ballot.
    let removed = writer_view_leads(&mut net, &log);
    net.machines[0].append(net.now, 40, log.clone(), write(4, "old"), false);
    net.drain(0);
    net.run_until(net.now + 300);
    assert!(answer_to(&mut net, 40).is_none(), "held");
    assert!(net.machines[0].stats().accepts_held > 0);
    net.machines[3].recover(net.now, 41, log.clone(), 1, 10);
    net.drain(3);
    net.run_until(net.now + 2_000);
    let highest = match net.events.iter().find(|(_, e)| e.request == 41) {
        Some((
            _,
            JournalEvent {
                result: Ok(JournalOutput::Recovered { highest, .. }),
                ..
            },
        )) => *highest,
        other => panic!("{other:?}"),
    };
    // The views agree again: node 0's held accept meets the newer promise.
    let others: Vec<usize> = (1..NODES as usize).collect();
    view_without(&mut net, removed, &others);
    net.run_until(net.now + 3_000);
    match answer_to(&mut net, 40) {
        Some(Err(JournalError::Unavailable(why))) => {
            assert!(why.contains("may be stored"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    // Node 3 writes on; a recovery holds one history.
    net.machines[3].append(net.now, 42, log.clone(), write(highest + 1, "new"), false);
    assert_eq!(net.answer(3, 42, 1_000).result, Ok(JournalOutput::Appended));
    net.machines[2].recover(net.now, 43, log, 1, 10);
    assert_recovered_whole(net.answer(2, 43, 3_000).result, highest + 1);
}

/// The answer to request `r` among the events so far (they are drained).
pub(super) fn answer_to(net: &mut Net, r: u64) -> Option<Result<JournalOutput, JournalError>> {
    net.events
        .drain(..)
        .find(|(_, e)| e.request == r)
        .map(|(_, e)| e.result)
}

/// Shows nodes `to` a ring of `members` only (the others downed and removed).
pub(super) fn view_of(net: &mut Net, members: &[usize], to: &[usize]) {
    let mut g = Gossip::empty();
    for &i in members {
        let m = Member::joining(ua(i, net.uids[i]), BTreeSet::new(), "1")
            .with_up(i as u32 + 1)
            .with_status(MemberStatus::Up);
        g.members.insert(ua(i, net.uids[i]), m);
    }
    for &i in to {
        let me = ua(i, net.uids[i]);
        let view = MembershipView::of(&MembershipState::new(g.clone(), me), 1);
        net.machines[i].handle_membership(net.now, &view, MembershipChange::CurrentClusterState);
        net.drain(i);
    }
}

#[test]
fn a_restarted_replica_alone_in_its_ring_waits_for_the_replicas_its_disk_last_saw() {
    let mut net = Net::new(31, 0.0);
    with_timeout(&mut net, 5_000);
    let log = three_writes(&mut net);
    let replicas = net.machines[0].replicas(&log);
    let index = |a: &UniqueAddress| (a.address.port - 2550) as usize;
    let (r, q) = (index(&replicas[0]), index(&replicas[1]));
    // Every other node was downed; `r` restarts and forms a cluster alone.
    net.uids[r] += 100;
    let settings = net.machines[r].settings.clone();
    net.machines[r] =
        JournalMachine::new(settings, ua(r, net.uids[r]), net.disks[r].clone(), net.now);
    view_of(&mut net, &[r], &[r]);
    // Its disk may lack writes the others chose: it does not answer from it alone.
    recovery_held(&mut net, r, 40, &log, 2_000);
    // Another replica of its last ring comes back and hands its records over.
    view_of(&mut net, &[r, q], &[r, q]);
    net.run_until(net.now + 3_000);
    let answer = answer_to(&mut net, 40);
    assert!(
        matches!(
            answer,
            Some(Ok(JournalOutput::Recovered { highest: 3, .. }))
        ),
        "{answer:?}"
    );
}

#[test]
fn giving_up_replicas_lost_for_good_ends_the_waits_they_held_up() {
    let mut net = Net::new(13, 0.0);
    three_writes(&mut net);
    // Two nodes destroyed at once with their disks, and removed from the membership.
    for g in [3usize, 4] {
        net.destroy(g);
    }
    net.publish_view();
    net.run_until(net.now + 10_000);
    let survivors = [0usize, 1, 2];
    let mut waiting: BTreeMap<u16, usize> = BTreeMap::new();
    for &i in &survivors {
        for s in net.machines[i].pending().keys() {
            *waiting.entry(*s).or_default() += 1;
        }
    }
    // Segments that lost a majority of their replicas: a majority of the new ones waits.
    let stuck: BTreeSet<u16> = waiting
        .iter()
        .filter(|(_, n)| **n >= 2)
        .map(|(s, _)| *s)
        .collect();
    assert!(
        !stuck.is_empty(),
        "segments that lost a majority wait for it"
    );
    let lost: Vec<Address> = [3usize, 4]
        .iter()
        .map(|&g| ua(g, net.uids[g]).address)
        .collect();
    assert!(
        survivors.iter().any(|&i| net.machines[i]
            .waits()
            .iter()
            .any(|(_, awaited)| awaited.iter().any(|a| lost.contains(a)))),
        "the waits name the lost replicas"
    );
    // A log of a segment that waits: held, then failed.
    let l = (0..10_000)
        .find(|l| stuck.contains(&segment_of_log(&log_name(*l))))
        .expect("a log of a waiting segment");
    net.machines[0].recover(net.now, 20, log_name(l), 1, 10);
    assert!(matches!(
        net.answer(0, 20, 3_000).result,
        Err(JournalError::Unavailable(_))
    ));
    // Nothing, too many, or a member that is up: refused, nothing changed.
    let member = ua(1, net.uids[1]).address;
    for refused in [vec![], vec![member.clone(); MAX_GIVE_UP + 1], vec![member]] {
        assert!(matches!(
            net.machines[0].give_up(refused),
            Err(JournalError::Rejected(_))
        ));
    }
    assert!(survivors
        .iter()
        .all(|&i| net.machines[i].stats().segments_given_up == 0));
    let given = net.machines[0].give_up(lost).expect("given up");
    assert_eq!(given.told, 2, "the other members are told");
    net.drain(0);
    net.run_until(net.now + 5_000);
    for i in survivors {
        assert_eq!(
            net.machines[i].pending_segments(),
            0,
            "node {i} waits no more"
        );
    }
    let released: u64 = survivors
        .iter()
        .map(|&i| net.machines[i].stats().segments_given_up)
        .sum();
    assert!(released >= stuck.len() as u64);
    // The log takes writes again.
    net.machines[0].recover(net.now, 21, log_name(l), 1, 10);
    assert!(matches!(
        net.answer(0, 21, 3_000).result,
        Ok(JournalOutput::Recovered { .. })
    ));
    net.machines[0].append(net.now, 22, log_name(l), write(1, "after"), false);
    assert_eq!(net.answer(0, 22, 3_000).result, Ok(JournalOutput::Appended));
}
