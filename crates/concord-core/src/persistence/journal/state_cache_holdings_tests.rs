use proptest::prelude::*;

use super::*;
use crate::kv::storage::MemoryStorage;
use crate::persistence::journal::acceptor::{handoff_page_skipping, merge_record};
use crate::persistence::journal::entry::Ballot;
use crate::persistence::journal::holding::summarize;
use crate::persistence::journal::test_history::{
    apply, change as op, dump, learned_write, logs, Op,
};

/// Hands `segment` over to `to` page by page (`max` records each) with `page`; the
/// records sent and left out.
fn hand_over(
    to: &mut MemoryStorage,
    max: usize,
    mut page: impl FnMut(Option<&[u8]>, usize) -> HandoffPage,
) -> (usize, u64) {
    let (mut after, mut sent, mut skipped) = (None::<Vec<u8>>, 0, 0);
    for _ in 0..10_000 {
        let p = page(after.as_deref(), max);
        for (k, v) in &p.records {
            assert!(merge_record(to, k, v).unwrap());
        }
        sent += p.records.len();
        skipped += p.skipped;
        after = p.resume;
        if p.last {
            return (sent, skipped);
        }
    }
    panic!("the pages end");
}

proptest! {
    /// A holding kept in memory is, after every write and removal, the one read afresh.
    #[test]
    fn a_kept_holding_is_the_one_read_from_the_disk_after_every_change(
        before in proptest::collection::vec(op(), 0..20),
        after in proptest::collection::vec(op(), 0..40),
    ) {
        let (segment, logs) = logs();
        let disk = MemoryStorage::new();
        let mut c = StateCache::new(disk.clone(), 100);
        for o in &before {
            apply(&mut c, &logs, std::slice::from_ref(o));
        }
        let first = c.holding(segment).unwrap();
        prop_assert_eq!(&first, &summarize(&mut disk.clone(), segment).unwrap());
        prop_assert!(c.live.keeps(segment));
        for o in &after {
            apply(&mut c, &logs, std::slice::from_ref(o));
            c.commit().unwrap();
            prop_assert!(c.live.keeps(segment));
            let kept = c.live.holding(segment);
            prop_assert_eq!(kept, summarize(&mut disk.clone(), segment).unwrap(), "after {:?}", o);
        }
    }

    /// Pages of only what the receiver lacks leave it the copy a full handoff would, send
    /// what reading every record would send, and count the same records left out.
    #[test]
    fn pages_of_what_a_replica_lacks_leave_the_copy_of_pages_that_read_everything(
        common in proptest::collection::vec(op(), 0..30),
        sender in proptest::collection::vec(op(), 0..30),
        receiver in proptest::collection::vec(op(), 0..15),
        read_at in 0..30usize,
        max in 1..6usize,
    ) {
        let (segment, logs) = logs();
        let disk = MemoryStorage::new();
        let mut from = StateCache::new(disk.clone(), 100);
        for (i, o) in common.iter().chain(&sender).enumerate() {
            if i == read_at {
                from.holding(segment).unwrap();
            }
            apply(&mut from, &logs, std::slice::from_ref(o));
        }
        from.commit().unwrap();
        let build = || {
            let mut st = MemoryStorage::new();
            for o in common.iter().chain(&receiver) {
                apply(&mut st, &logs, std::slice::from_ref(o));
            }
            st
        };
        let (mut by_reading, mut by_lack) = (build(), build());
        let theirs = summarize(&mut by_lack.clone(), segment).unwrap().unwrap();
        let mut plain = disk.clone();
        let reading = hand_over(&mut by_reading, max, |after, max| {
            handoff_page_skipping(&mut plain, segment, after, max, 1 << 20, &theirs).unwrap()
        });
        let lacking = hand_over(&mut by_lack, max, |after, max| {
            from.handoff_page_lacking(segment, after, max, 1 << 20, &theirs).unwrap().0
        });
        prop_assert!(from.live.keeps(segment));
        prop_assert_eq!(dump(&mut by_reading), dump(&mut by_lack));
        prop_assert_eq!(reading, lacking);
    }
}

/// A restarted replica lacking 10 writes of 100: the page reads only those (and the log's
/// state record), not the 199 records it holds.
#[test]
fn a_page_reads_only_what_the_replica_lacks() {
    let (segment, logs) = logs();
    let b = Ballot { round: 1, node: 7 };
    let (a, mut restarted) = (MemoryStorage::new(), MemoryStorage::new());
    let mut c = StateCache::new(a.clone(), 100);
    for seq in 1..=110 {
        learned_write(&mut c, &logs[0], b, seq);
        if seq <= 100 {
            learned_write(&mut restarted, &logs[0], b, seq);
        }
    }
    c.commit().unwrap();
    c.holding(segment).unwrap();
    let theirs = summarize(&mut restarted, segment).unwrap().unwrap();
    let (page, read) = c
        .handoff_page_lacking(segment, None, 256, 1 << 20, &theirs)
        .unwrap();
    assert!(page.last);
    // 10 entries, 10 marks (slots 100 to 109: a write is marked once committed), and the
    // log's state record; left out unread: 100 entries and 99 marks.
    assert_eq!((page.records.len(), read, page.skipped), (21, 21, 199));
}

/// A segment with a record no holding lists exactly is not kept: its holding and pages
/// are read from the disk as before, and a failed commit forgets every kept holding.
#[test]
fn a_segment_not_kept_is_read_as_before_and_a_failed_commit_forgets_all() {
    let (segment, logs) = logs();
    let disk = MemoryStorage::new();
    let mut c = StateCache::new(disk.clone(), 100);
    apply(&mut c, &logs, &[Op::Snapshot { log: 0, seq: 3 }]);
    // An unknown kind (9) in the segment.
    let odd = super::super::super::acceptor::key(&logs[1], 9, 1);
    c.put(Table::Journal, &odd, b"?").unwrap();
    c.commit().unwrap();
    let h = c.holding(segment).unwrap().unwrap();
    assert!(!c.live.keeps(segment));
    assert_eq!(
        Some(h.clone()),
        summarize(&mut disk.clone(), segment).unwrap()
    );
    let (page, _) = c
        .handoff_page_lacking(segment, None, 256, 1 << 20, &h)
        .unwrap();
    assert!(page.last && page.records.iter().any(|(k, _)| *k == odd));
    // Without it, kept; a failed commit forgets it.
    c.remove(Table::Journal, &odd).unwrap();
    c.commit().unwrap();
    c.holding(segment).unwrap();
    assert!(c.live.keeps(segment));
    disk.fail_next_commits(1);
    apply(&mut c, &logs, &[Op::Snapshot { log: 0, seq: 4 }]);
    assert!(c.commit().is_err());
    assert!(!c.live.keeps(segment));
}

/// Warming reads every segment once, a budget at a time, and keeps what it read: the
/// holdings are then those on the disk, with no read when a ring change asks.
#[test]
fn warming_keeps_every_segment_a_budget_at_a_time() {
    let (segment, logs) = logs();
    let disk = MemoryStorage::new();
    let mut c = StateCache::new(disk.clone(), 100);
    for seq in 1..=30 {
        apply(
            &mut c,
            &logs,
            &[Op::Accept {
                log: (seq % 3) as usize,
                round: 1,
                first: seq,
                events: 1,
                committed: seq - 1,
                learn: true,
                compact: false,
            }],
        );
    }
    c.commit().unwrap();
    // Every segment costs at least one (its seek): 1,024 segments take 16 calls of 64.
    let mut calls = 0;
    while c.holdings_kept() < usize::from(crate::kv::ring::SEGMENTS) {
        let read = c.warm_holdings(64).unwrap();
        assert!(read >= 64 || c.holdings_kept() == 1024, "{read}");
        calls += 1;
        assert!(calls <= 16, "warmed in {calls} calls");
    }
    assert_eq!(c.warm_holdings(64).unwrap(), 0, "each segment once");
    let kept = c.live.holding(segment);
    assert_eq!(kept, summarize(&mut disk.clone(), segment).unwrap());
    assert_eq!(kept.map(|h| h.logs.len()), Some(3));
    // A failed commit forgets them; after the index's scan, empty segments cost no read.
    disk.fail_next_commits(1);
    apply(&mut c, &logs, &[Op::Snapshot { log: 0, seq: 2 }]);
    assert!(c.commit().is_err());
    assert_eq!(c.holdings_kept(), 0);
    c.held_segments_where(|_| true).unwrap();
    let (start, end) = crate::persistence::journal::acceptor::segment_bounds(segment);
    let records = disk
        .clone()
        .range(Table::Journal, &start, &end, usize::MAX)
        .unwrap()
        .len();
    assert!(records > 30);
    assert_eq!(
        c.warm_holdings(usize::MAX).unwrap(),
        records,
        "one segment read"
    );
    assert_eq!(c.holdings_kept(), 1024);
}
