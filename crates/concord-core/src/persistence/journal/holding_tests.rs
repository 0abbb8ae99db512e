use proptest::prelude::*;

use super::*;
use crate::kv::storage::MemoryStorage;
use crate::persistence::journal::acceptor::{
    accept_and_learn, handoff_page, handoff_page_skipping, merge_record,
};
use crate::persistence::journal::test_history::{apply, dump, logs, write as op};

/// Hands `segment` of `from` over to `to`, skipping by `holding` if given (pages of
/// `max` records); the records sent.
fn hand_over(
    from: &mut MemoryStorage,
    to: &mut MemoryStorage,
    segment: u16,
    holding: Option<&SegmentHolding>,
    max: usize,
) -> usize {
    let mut after: Option<Vec<u8>> = None;
    let mut sent = 0;
    for _ in 0..10_000 {
        let (records, resume, last) = match holding {
            Some(h) => {
                let p = handoff_page_skipping(from, segment, after.as_deref(), max, 1 << 20, h)
                    .unwrap();
                (p.records, p.resume, p.last)
            }
            None => {
                let (records, last) =
                    handoff_page(from, segment, after.as_deref(), max, 1 << 20).unwrap();
                let resume = records.last().map(|(k, _)| k.clone()).or(after.clone());
                (records, resume, last)
            }
        };
        for (k, v) in &records {
            assert!(merge_record(to, k, v).unwrap());
        }
        sent += records.len();
        after = resume;
        if last {
            return sent;
        }
    }
    panic!("the pages end");
}

proptest! {
    /// A replica that skipped what its holding covers ends with exactly the records a full
    /// handoff would have left it — entries, snapshots, marks and the stream index.
    #[test]
    fn a_handoff_that_skips_the_holding_leaves_the_same_copy_as_a_full_one(
        common in proptest::collection::vec(op(), 0..30),
        sender in proptest::collection::vec(op(), 0..30),
        receiver in proptest::collection::vec(op(), 0..15),
        max in 1..6usize,
    ) {
        let (segment, logs) = logs();
        let mut from = MemoryStorage::new();
        apply(&mut from, &logs, &common);
        apply(&mut from, &logs, &sender);
        let build = || {
            let mut st = MemoryStorage::new();
            apply(&mut st, &logs, &common);
            apply(&mut st, &logs, &receiver);
            st
        };
        let (mut full, mut skipping) = (build(), build());
        let holding = summarize(&mut skipping, segment).unwrap().unwrap();
        prop_assert!(holding.is_valid());
        let sent_all = hand_over(&mut from, &mut full, segment, None, max);
        let sent = hand_over(&mut from, &mut skipping, segment, Some(&holding), max);
        prop_assert!(sent <= sent_all);
        prop_assert_eq!(dump(&mut full), dump(&mut skipping));
    }
}

#[test]
fn a_restarted_replica_is_sent_only_the_writes_made_while_it_was_away() {
    let (segment, logs) = logs();
    let b = Ballot { round: 1, node: 7 };
    let write = |first: u64| Entry {
        first_seq: first,
        ballot: b,
        timestamp_ms: 5,
        events: vec![vec![1; 100]],
    };
    let (mut a, mut restarted) = (MemoryStorage::new(), MemoryStorage::new());
    for seq in 1..=100 {
        for st in [&mut a, &mut restarted] {
            accept_and_learn(st, 1, &logs[0], b, seq - 1, false, &[write(seq)], Some(seq)).unwrap();
        }
    }
    for seq in 101..=110 {
        accept_and_learn(
            &mut a,
            1,
            &logs[0],
            b,
            seq - 1,
            false,
            &[write(seq)],
            Some(seq),
        )
        .unwrap();
    }
    let holding = summarize(&mut restarted, segment).unwrap().unwrap();
    assert_eq!(holding.logs.len(), 1);
    assert_eq!(
        holding.logs[0].entries,
        [EntryRun {
            first: 1,
            count: 100,
            ballot: b
        }]
    );
    // 10 entries, their 10 marks, and the log's state record.
    assert_eq!(
        hand_over(&mut a, &mut restarted, segment, Some(&holding), 256),
        21
    );
    assert_eq!(dump(&mut a), dump(&mut restarted));
    // A higher ballot at a slot held is sent: it replaces the entry held.
    let higher = Ballot { round: 2, node: 8 };
    accept_and_learn(
        &mut a,
        1,
        &logs[0],
        higher,
        0,
        false,
        &[Entry {
            ballot: higher,
            ..write(50)
        }],
        None,
    )
    .unwrap();
    let p = handoff_page_skipping(&mut a, segment, None, 256, 1 << 20, &holding).unwrap();
    assert!(
        p.records
            .iter()
            .any(|(k, _)| super::super::acceptor::is_entry_key(k)
                && k.ends_with(&50u64.to_be_bytes()))
    );
}

#[test]
fn malformed_holdings_are_refused_and_a_large_copy_goes_whole() {
    let run = |first, count| SlotRun { first, count };
    let log = |name: &str, marks: Vec<SlotRun>| LogHolding {
        log: name.into(),
        marks,
        ..LogHolding::default()
    };
    let h = |logs| SegmentHolding { segment: 1, logs };
    assert!(h(vec![log("a", vec![run(1, 2), run(3, 1)]), log("b", vec![])]).is_valid());
    assert!(
        !h(vec![log("b", vec![]), log("a", vec![])]).is_valid(),
        "logs out of order"
    );
    assert!(
        !h(vec![log("a", vec![run(1, 2), run(2, 1)])]).is_valid(),
        "overlap"
    );
    assert!(!h(vec![log("a", vec![run(1, 0)])]).is_valid(), "empty run");
    assert!(
        !h(vec![log("a", vec![run(u64::MAX, 2)])]).is_valid(),
        "overflow"
    );
    // A copy of more than MAX_RUNS runs (every other slot) is summarized as none.
    let (segment, logs) = logs();
    let mut st = MemoryStorage::new();
    let b = Ballot { round: 1, node: 7 };
    for k in 0..=(MAX_RUNS as u64) {
        let w = Entry {
            first_seq: 1 + 2 * k,
            ballot: b,
            timestamp_ms: 5,
            events: vec![vec![1]],
        };
        accept_and_learn(&mut st, 1, &logs[1], b, 0, false, &[w], None).unwrap();
    }
    assert_eq!(summarize(&mut st, segment).unwrap(), None);
    // Garbage never covers anything and never panics.
    let holding = h(vec![log("a", vec![run(1, 2)])]);
    assert!(!holding.covers(b"", b""));
    let mark = [0, 1, b'a', 0, 3, 0, 0, 0, 0, 0, 0, 0, 1];
    assert!(holding.covers(&mark, b""), "a mark held");
    let entry = [0, 1, b'a', 0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
    assert!(
        !holding.covers(&entry, b"garbage"),
        "an entry that does not parse"
    );
}
