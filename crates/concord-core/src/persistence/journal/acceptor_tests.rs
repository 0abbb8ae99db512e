use super::*;
use crate::kv::storage::MemoryStorage;
use crate::persistence::journal::deletion::delete_to;

fn entry(first: u64, n: usize, round: u64) -> Entry {
    Entry {
        first_seq: first,
        ballot: Ballot { round, node: 1 },
        timestamp_ms: 5,
        events: (0..n).map(|i| vec![i as u8; 3]).collect(),
    }
}

#[test]
fn promises_only_rise_and_accepts_below_the_promise_are_refused() {
    let mut st = MemoryStorage::new();
    let b1 = Ballot { round: 1, node: 1 };
    let b2 = Ballot { round: 2, node: 1 };
    assert!(matches!(
        prepare(&mut st, 1, "elog", b2, 1, 10, false).unwrap(),
        JournalMessage::Promise { .. }
    ));
    assert!(
        matches!(prepare(&mut st, 2, "elog", b1, 1, 10, false).unwrap(), JournalMessage::Nack { promised, .. } if promised == b2)
    );
    assert!(matches!(
        accept(&mut st, 3, "elog", b1, 0, false, &[entry(1, 2, 0)]).unwrap(),
        JournalMessage::Nack { .. }
    ));
    assert!(matches!(
        accept(&mut st, 4, "elog", b2, 0, false, &[entry(1, 2, 0)]).unwrap(),
        JournalMessage::Accepted { .. }
    ));
    let JournalMessage::ReadReply {
        page, covered_to, ..
    } = read(&mut st, 5, "elog", 1, 10).unwrap()
    else {
        panic!()
    };
    assert_eq!(page.len(), 1);
    assert_eq!(page[0].ballot, b2, "stored at the accept's ballot");
    assert_eq!(covered_to, u64::MAX);
    assert_eq!(log_state(&mut st, "elog").unwrap().promised, b2);
}

#[test]
fn pages_stop_at_the_event_limit_and_say_how_far_they_cover() {
    let mut st = MemoryStorage::new();
    let b = Ballot { round: 1, node: 1 };
    let writes: Vec<Entry> = (0..10).map(|i| entry(1 + 3 * i, 3, 1)).collect();
    accept(&mut st, 1, "elog", b, 27, false, &writes).unwrap();
    let JournalMessage::ReadReply {
        page, covered_to, ..
    } = read(&mut st, 2, "elog", 4, 7).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        page.iter().map(|e| e.first_seq).collect::<Vec<_>>(),
        vec![4, 7]
    );
    assert_eq!(covered_to, 7);
    // The promise sends the tail (slots above committed 27) besides the page.
    let JournalMessage::Promise {
        tail, committed, ..
    } = prepare(
        &mut st,
        3,
        "elog",
        Ballot { round: 2, node: 1 },
        1,
        3,
        false,
    )
    .unwrap()
    else {
        panic!()
    };
    assert_eq!(committed, 27);
    assert_eq!(
        tail.iter().map(|e| e.first_seq).collect::<Vec<_>>(),
        vec![28]
    );
    // Deleting keeps the tail.
    delete_to(&mut st, "elog", 100).unwrap();
    let JournalMessage::ReadReply { page, .. } = read(&mut st, 4, "elog", 1, 100).unwrap() else {
        panic!()
    };
    assert_eq!(
        page.iter().map(|e| e.first_seq).collect::<Vec<_>>(),
        vec![28]
    );
}

#[test]
fn merges_keep_the_higher_ballot_promise_and_snapshot() {
    let mut a = MemoryStorage::new();
    let mut b = MemoryStorage::new();
    accept(
        &mut a,
        1,
        "elog",
        Ballot { round: 3, node: 1 },
        0,
        false,
        &[entry(1, 1, 0)],
    )
    .unwrap();
    accept(
        &mut b,
        1,
        "elog",
        Ballot { round: 5, node: 2 },
        0,
        false,
        &[entry(1, 2, 0)],
    )
    .unwrap();
    save_snapshot(
        &mut a,
        "elog",
        &StoredSnapshot {
            seq_nr: 9,
            timestamp_ms: 1,
            payload: vec![1],
        },
    )
    .unwrap();
    let seg = segment_of_log("elog");
    for (k, v) in segment_records(&mut a, seg, None, 100).unwrap() {
        assert!(merge_record(&mut b, &k, &v).unwrap());
    }
    assert_eq!(held_segments(&mut b).unwrap(), vec![seg]);
    let JournalMessage::ReadReply { page, .. } = read(&mut b, 2, "elog", 1, 10).unwrap() else {
        panic!()
    };
    assert_eq!(page[0].events.len(), 2, "the higher ballot's entry stays");
    assert_eq!(log_state(&mut b, "elog").unwrap().promised.round, 5);
    assert_eq!(load_snapshot(&mut b, "elog").unwrap().unwrap().seq_nr, 9);
    assert!(!merge_record(&mut b, b"garbage", b"x").unwrap());
}

#[test]
fn a_learned_last_write_leaves_no_uncertain_tail() {
    let mut st = MemoryStorage::new();
    let b1 = Ballot { round: 1, node: 1 };
    let b2 = Ballot { round: 2, node: 2 };
    accept(&mut st, 1, "ecart|t", b1, 0, false, &[entry(1, 2, 0)]).unwrap();
    accept(&mut st, 2, "ecart|t", b1, 2, false, &[entry(3, 1, 0)]).unwrap();
    let tail_of =
        |st: &mut MemoryStorage, ballot| match prepare(st, 3, "ecart|t", ballot, 4, 10, false) {
            Ok(JournalMessage::Promise {
                committed, tail, ..
            }) => (committed, tail.len()),
            other => panic!("{other:?}"),
        };
    // Not learned yet: the last write is the uncertain tail a recovery proposes again.
    assert_eq!(tail_of(&mut st, b2), (2, 1));
    super::super::stream::learn(&mut st, "ecart|t", 10, &[(3, b1)]).unwrap();
    assert_eq!(
        tail_of(&mut st, Ballot { round: 3, node: 2 }),
        (3, 0),
        "learned: committed"
    );
}

#[test]
fn handoff_pages_are_bounded_by_bytes_and_a_page_cut_by_bytes_is_not_the_last() {
    let mut st = MemoryStorage::new();
    let b = Ballot { round: 1, node: 1 };
    let big = |first: u64, bytes: usize| Entry {
        first_seq: first,
        ballot: Ballot::ZERO,
        timestamp_ms: 5,
        events: vec![vec![first as u8; bytes]],
    };
    // Five writes of 300 kB, then one of 2 MB, in one log (one segment).
    for seq in 1..=5 {
        accept(&mut st, seq, "ebig|1", b, 0, false, &[big(seq, 300_000)]).unwrap();
    }
    accept(&mut st, 6, "ebig|1", b, 0, false, &[big(6, 2_000_000)]).unwrap();
    let seg = segment_of_log("ebig|1");
    let all = segment_records(&mut st, seg, None, 100).unwrap();
    let mut pages = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let (records, last) = handoff_page(&mut st, seg, after.as_deref(), 100, 1 << 20).unwrap();
        let bytes: usize = records.iter().map(|(k, v)| k.len() + v.len()).sum();
        assert!(!records.is_empty() || last);
        assert!(records.len() <= 1 || bytes <= 1 << 20, "{bytes} bytes");
        after = records.last().map(|(k, _)| k.clone());
        pages.push(records);
        if last {
            break;
        }
        assert!(pages.len() < 20, "the pages end");
    }
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    // The log's state (its first key) and three writes of 300 kB fit in 1 MiB; the 2 MB
    // write goes alone, cut by bytes, so an empty last page follows it.
    assert_eq!(sizes, [4, 2, 1, 0]);
    assert_eq!(pages.concat(), all, "every record once, in order");
    // Without a byte bound that matters, the record limit alone cuts.
    let (records, last) = handoff_page(&mut st, seg, None, 2, usize::MAX).unwrap();
    assert_eq!((records.len(), last), (2, false));
}

#[test]
fn a_promise_cuts_its_page_by_the_tail_it_carries() {
    let mut st = MemoryStorage::new();
    let b1 = Ballot { round: 1, node: 1 };
    let big = |first: u64| Entry {
        first_seq: first,
        ballot: Ballot::ZERO,
        timestamp_ms: 5,
        events: vec![vec![first as u8; 300_000]],
    };
    // Five writes of 300 kB; the replica knows 1..=2 chosen: 3..=5 are its uncertain tail.
    for seq in 1..=5 {
        accept(
            &mut st,
            seq,
            "etail|1",
            b1,
            seq.min(3) - 1,
            false,
            &[big(seq)],
        )
        .unwrap();
    }
    let b2 = Ballot { round: 2, node: 2 };
    let Ok(JournalMessage::Promise {
        page,
        covered_to,
        tail,
        committed,
        ..
    }) = prepare(&mut st, 9, "etail|1", b2, 1, 100, false)
    else {
        panic!("a promise")
    };
    assert_eq!(committed, 2);
    assert_eq!(tail.len(), 3, "the whole tail");
    // The page and the tail together stay within MAX_PAGE_BYTES but for one write.
    assert_eq!(page.len(), 1);
    assert_eq!(covered_to, 1, "complete up to the write it holds");
}
