use super::super::acceptor::{accept, held_segments, log_state, merge_record, segment_records};
use super::super::deletion::delete_to;
use super::*;
use crate::kv::ring::SEGMENTS;
use crate::kv::storage::MemoryStorage;
use crate::kv::storage::Table;

const B1: Ballot = Ballot { round: 1, node: 1 };
const B2: Ballot = Ballot { round: 2, node: 2 };

fn write(first: u64, n: usize, tag: &str) -> Entry {
    Entry {
        first_seq: first,
        ballot: Ballot::ZERO,
        timestamp_ms: 7,
        events: (0..n).map(|i| format!("{tag}-{i}").into_bytes()).collect(),
    }
}

fn all_segments() -> Vec<bool> {
    segment_set(&(0..SEGMENTS).collect::<Vec<_>>())
}

fn query(entity_type: &str, after: (u64, u64), limit: u32) -> StreamQuery {
    StreamQuery {
        entity_type: entity_type.into(),
        slices: 0..=1023,
        after,
        horizon_ms: 1_000_000,
        limit,
    }
}

fn read(st: &mut MemoryStorage, q: &StreamQuery) -> (Vec<StreamEvent>, bool) {
    read_stream(st, &all_segments(), q).unwrap()
}

/// Accepts `w` on `log` at `b` and learns it at `at`.
fn chosen(st: &mut MemoryStorage, log: &str, w: Entry, b: Ballot, at: u64) {
    accept(st, 1, log, b, 0, false, std::slice::from_ref(&w)).unwrap();
    assert_eq!(learn(st, log, at, &[(w.first_seq, b)]).unwrap(), 1);
}

#[test]
fn only_a_write_held_at_the_learned_ballot_is_indexed_and_only_once() {
    let mut st = MemoryStorage::new();
    accept(&mut st, 1, "ecart|a", B1, 0, false, &[write(1, 2, "a")]).unwrap();
    // Another writer's value at this slot (ballot 2) is not the one held here.
    assert_eq!(
        learn(&mut st, "ecart|a", 10, &[(1, B2)]).unwrap(),
        0,
        "held at another ballot"
    );
    assert_eq!(
        learn(&mut st, "ecart|a", 10, &[(5, B1)]).unwrap(),
        0,
        "no write"
    );
    assert_eq!(read(&mut st, &query("cart", (0, 0), 100)).0, vec![]);
    assert_eq!(learn(&mut st, "ecart|a", 10, &[(1, B1)]).unwrap(), 1);
    assert_eq!(
        learn(&mut st, "ecart|a", 99, &[(1, B1)]).unwrap(),
        0,
        "a second learn does not index it again"
    );
    let (events, full) = read(&mut st, &query("cart", (0, 0), 100));
    assert!(!full);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].persistence_id, "cart|a");
    assert_eq!((events[0].seq_nr, events[1].seq_nr), (1, 2));
    assert_eq!(events[1].payload, b"a-1");
    assert_eq!(events[0].at_ms, 10);
    assert_eq!(events[0].ordering, tie("ecart|a", 1));
    assert_eq!(events[1].ordering, tie("ecart|a", 1) + 1);
    assert_eq!(events[0].timestamp_ms, 7);
    // Durable-state logs are not events.
    accept(&mut st, 1, "scart|b", B1, 0, true, &[write(1, 1, "b")]).unwrap();
    assert_eq!(learn(&mut st, "scart|b", 10, &[(1, B1)]).unwrap(), 0);
}

#[test]
fn the_stream_is_in_offset_order_across_segments_and_resumes_after_any_offset() {
    let mut st = MemoryStorage::new();
    let mut expected = Vec::new();
    for i in 0..40u64 {
        let log = format!("eorder|{i}");
        let n = 1 + (i % 3) as usize;
        // Stream times go down and up, and repeat: the order is (time, ordering).
        let at = 100 + (i * 7) % 13;
        chosen(&mut st, &log, write(1, n, &i.to_string()), B1, at);
        for k in 0..n {
            expected.push((at, tie(&log, 1) + k as u64, format!("order|{i}")));
        }
        chosen(&mut st, &format!("eother|{i}"), write(1, 1, "x"), B1, at);
    }
    expected.sort();
    let (all, full) = read(&mut st, &query("order", (0, 0), 10_000));
    assert!(!full);
    let got: Vec<_> = all
        .iter()
        .map(|e| (e.at_ms, e.ordering, e.persistence_id.clone()))
        .collect();
    assert_eq!(got, expected);
    // Paging from every offset, mid-write too, gives the rest exactly.
    for (i, e) in all.iter().enumerate() {
        let (rest, _) = read(&mut st, &query("order", e.offset(), 10_000));
        assert_eq!(rest, all[i + 1..].to_vec());
    }
    // Pages of 5 add up to the whole, cut pages say so.
    let (mut paged, mut after) = (Vec::new(), (0, 0));
    loop {
        let (page, full) = read(&mut st, &query("order", after, 5));
        assert!(page.len() <= 5);
        let Some(last) = page.last() else { break };
        after = last.offset();
        assert_eq!(full, page.len() == 5 && paged.len() + 5 < all.len());
        paged.extend(page);
    }
    assert_eq!(paged, all);
    // The horizon and the slices filter.
    let mut q = query("order", (0, 0), 10_000);
    q.horizon_ms = 105;
    let (early, _) = read(&mut st, &q);
    assert!(!early.is_empty() && early.iter().all(|e| e.at_ms <= 105));
    assert_eq!(early.len(), all.iter().filter(|e| e.at_ms <= 105).count());
    let slice = PersistenceId::parse("order|3").unwrap().slice();
    q.horizon_ms = u64::MAX - 1;
    q.slices = slice..=slice;
    let (one, _) = read(&mut st, &q);
    assert!(one.iter().any(|e| e.persistence_id == "order|3"));
    assert!(one
        .iter()
        .all(|e| PersistenceId::parse(&e.persistence_id).unwrap().slice() == slice));
}

#[test]
fn an_accept_that_says_earlier_writes_are_chosen_indexes_them_if_the_learn_was_lost() {
    let mut st = MemoryStorage::new();
    accept(&mut st, 1, "eacc|1", B1, 0, false, &[write(1, 1, "a")]).unwrap();
    accept(&mut st, 2, "eacc|1", B1, 1, false, &[write(2, 1, "b")]).unwrap();
    assert_eq!(learn_committed(&mut st, "eacc|1", B1, 0, 1, 50).unwrap(), 1);
    // Slot 2 is not said chosen yet; a different ballot's writes are not indexed.
    assert_eq!(learn_committed(&mut st, "eacc|1", B2, 1, 2, 50).unwrap(), 0);
    let (events, _) = read(&mut st, &query("acc", (0, 0), 10));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].at_ms, 50);
}

#[test]
fn deleting_events_removes_them_from_the_stream() {
    let mut st = MemoryStorage::new();
    chosen(&mut st, "edel|1", write(1, 2, "a"), B1, 10);
    accept(&mut st, 2, "edel|1", B1, 2, false, &[write(3, 1, "b")]).unwrap();
    learn(&mut st, "edel|1", 11, &[(3, B1)]).unwrap();
    delete_to(&mut st, "edel|1", 2).unwrap();
    let (events, _) = read(&mut st, &query("del", (0, 0), 10));
    assert_eq!(events.iter().map(|e| e.seq_nr).collect::<Vec<_>>(), vec![3]);
    assert_eq!(
        st.len(Table::JournalIndex),
        1,
        "the deleted write's record is gone"
    );
}

#[test]
fn index_records_move_with_their_segment_and_bad_ones_are_refused() {
    let mut a = MemoryStorage::new();
    let mut b = MemoryStorage::new();
    chosen(&mut a, "emove|1", write(1, 2, "m"), B1, 10);
    let seg = segment_of_log("emove|1");
    for (k, v) in segment_records(&mut a, seg, None, 100).unwrap() {
        assert!(merge_record(&mut b, &k, &v).unwrap(), "{k:?}");
    }
    assert_eq!(held_segments(&mut b).unwrap(), vec![seg]);
    assert_eq!(
        read(&mut a, &query("move", (0, 0), 10)),
        read(&mut b, &query("move", (0, 0), 10))
    );
    // Learned again on the new replica: the mark came along, no second index record.
    assert_eq!(learn(&mut b, "emove|1", 99, &[(1, B1)]).unwrap(), 0);
    // A mark that does not parse is refused; a mark of a write held at another ballot
    // indexes nothing.
    let (k, v) = a
        .records(Table::Journal)
        .into_iter()
        .find(|(k, _)| k[k.len() - 9] == super::super::acceptor::KIND_INDEXED)
        .unwrap();
    assert!(!merge_record(&mut b, &k, b"garbage").unwrap());
    let mut c = MemoryStorage::new();
    accept(&mut c, 1, "emove|1", B2, 0, false, &[write(1, 2, "other")]).unwrap();
    assert!(merge_record(&mut c, &k, &v).unwrap());
    assert_eq!(c.len(Table::JournalIndex), 0);
    // Only a segment answered for is read.
    let none = segment_set(&[]);
    assert!(read_stream(&mut a, &none, &query("move", (0, 0), 10))
        .unwrap()
        .0
        .is_empty());
}

#[test]
fn merged_pages_stop_at_the_first_cut_and_hold_each_offset_once() {
    let ev = |at: u64, o: u64| StreamEvent {
        at_ms: at,
        ordering: o,
        persistence_id: "t|1".into(),
        seq_nr: o,
        timestamp_ms: 0,
        payload: vec![],
    };
    let a = (vec![ev(1, 1), ev(2, 1), ev(3, 1)], true);
    let b = (vec![ev(1, 1), ev(2, 5), ev(4, 1), ev(5, 1)], false);
    let merged = merge_pages(vec![a, b], 100);
    assert_eq!(
        merged.iter().map(StreamEvent::offset).collect::<Vec<_>>(),
        vec![(1, 1), (2, 1), (2, 5), (3, 1)]
    );
    let merged = merge_pages(vec![(vec![ev(1, 1), ev(2, 2)], false)], 1);
    assert_eq!(merged.len(), 1);
}

proptest::proptest! {
    #[test]
    fn garbage_records_never_panic(k in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
                                   v in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)) {
        let mut st = MemoryStorage::new();
        let _ = merge_record(&mut st, &k, &v);
        let _ = read_stream(&mut st, &all_segments(), &query("t", (0, 0), 10));
    }
}

#[test]
fn learns_out_of_order_index_each_write_once_and_extend_the_committed_prefix() {
    let mut st = MemoryStorage::new();
    let log = "ecart|o";
    for (slot, tag) in [(1, "a"), (3, "b"), (5, "c")] {
        accept(&mut st, 1, log, B1, 0, false, &[write(slot, 2, tag)]).unwrap();
    }
    let state = |st: &mut MemoryStorage| {
        let s = log_state(st, log).unwrap();
        (s.committed, s.indexed, s.marked_to)
    };
    // The third write's learn overtakes the others: indexed out of order, and marked.
    assert_eq!(learn(&mut st, log, 10, &[(5, B1)]).unwrap(), 1);
    assert_eq!(state(&mut st), (6, 0, 5));
    assert_eq!(learn(&mut st, log, 11, &[(5, B1)]).unwrap(), 0, "once");
    assert_eq!(learn(&mut st, log, 12, &[(1, B1)]).unwrap(), 1);
    assert_eq!(state(&mut st), (6, 2, 5));
    // Slot 3 follows the indexed prefix but lies below an out-of-order mark: looked up.
    assert_eq!(learn(&mut st, log, 13, &[(3, B1), (5, B1)]).unwrap(), 1);
    assert_eq!(
        state(&mut st),
        (6, 6, 5),
        "slot 5's mark extends the prefix"
    );
    assert_eq!(
        learn(&mut st, log, 14, &[(1, B1), (3, B1), (5, B1)]).unwrap(),
        0
    );
    let (events, _) = read(&mut st, &query("cart", (0, 0), 100));
    let seqs: Vec<u64> = events.iter().map(|e| e.seq_nr).collect();
    assert_eq!(
        seqs,
        vec![5, 6, 1, 2, 3, 4],
        "each write once, at its learn's time"
    );
}

#[test]
fn an_earlier_versions_log_state_looks_for_every_mark() {
    let mut st = MemoryStorage::new();
    let log = "ecart|v";
    accept(&mut st, 1, log, B1, 0, false, &[write(1, 1, "a")]).unwrap();
    assert_eq!(learn(&mut st, log, 10, &[(1, B1)]).unwrap(), 1);
    // The state as the earlier version stored it: (promised, committed) only.
    let mut old = vec![super::super::entry::FORMAT];
    old.extend(postcard::to_stdvec(&(B1, 0u64)).unwrap());
    st.put(Table::Journal, &key(log, 0, 0), &old).unwrap();
    let s = log_state(&mut st, log).unwrap();
    assert_eq!(
        (s.promised, s.committed, s.indexed, s.marked_to),
        (B1, 0, 0, u64::MAX)
    );
    assert_eq!(
        learn(&mut st, log, 20, &[(1, B1)]).unwrap(),
        0,
        "its mark is found: not indexed twice"
    );
    assert_eq!(read(&mut st, &query("cart", (0, 0), 100)).0.len(), 1);
}
