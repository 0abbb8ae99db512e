use super::*;

#[test]
fn a_segment_past_the_budget_is_read_but_not_kept() {
    let mut st = crate::kv::storage::MemoryStorage::new();
    let log = "et|1";
    let segment = super::super::acceptor::segment_of_log(log);
    st.put(
        crate::kv::storage::Table::Journal,
        &key(log, KIND_INDEXED, 3),
        b"m",
    )
    .unwrap();
    let mut tight = LiveHoldings::new(10);
    let (read, found) = tight.read(&mut st, segment).unwrap();
    assert_eq!(read, 1);
    let Read::NotKept(h) = found else {
        panic!("{found:?}")
    };
    assert_eq!(h.logs[0].marks, [SlotRun { first: 3, count: 1 }]);
    assert!(!tight.keeps(segment));
    let mut roomy = LiveHoldings::default();
    assert_eq!(roomy.read(&mut st, segment).unwrap(), (1, Read::Kept));
    assert_eq!(roomy.holding(segment), Some(h));
    // A slot at u64::MAX is not kept (its run's end would overflow).
    roomy.noted(segment, &key(log, KIND_INDEXED, u64::MAX), Some(b"m"));
    assert!(!roomy.keeps(segment));
}
