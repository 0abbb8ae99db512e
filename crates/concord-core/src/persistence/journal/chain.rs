//! Reading a log out of a quorum's answers: the chain of chosen writes.
//!
//! A log is a chain of slots: slot `s` holds a write of events `s ..= last`, the next
//! slot is `last + 1`. A writer proposes a slot only once the one before it is chosen, so
//! the chosen slots form one chain from 1. For a chosen slot, the value of the highest
//! ballot among any majority's answers *that cover the slot* is the chosen value (Paxos'
//! invariant: an acceptor accepting above the choosing ballot accepts the chosen value).

use super::entry::Entry;

/// One acceptor's answer: its entries from `from` (complete up to `covered_to`), its
/// committed prefix and, beyond it, every entry it holds (the tail).
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Entries from the request's `from` (or from `page_from` if later), ascending,
    /// complete up to `covered_to`.
    pub page: Vec<Entry>,
    /// The page's own first slot, when later than the request's `from` (a promise whose
    /// page starts after the acceptor's snapshot); 0 otherwise.
    pub page_from: u64,
    /// See `page`.
    pub covered_to: u64,
    /// The acceptor's committed prefix (reads: 0).
    pub committed: u64,
    /// Every entry above `committed` (prepares only).
    pub tail: Vec<Entry>,
    /// True for a promise (its tail is complete above `committed`).
    pub promise: bool,
}

impl Answer {
    fn covers(&self, from: u64, slot: u64) -> bool {
        (slot >= from.max(self.page_from) && slot <= self.covered_to)
            || (self.promise && slot > self.committed)
    }

    fn at(&self, slot: u64) -> Option<&Entry> {
        fn find(v: &[Entry], slot: u64) -> Option<&Entry> {
            v.binary_search_by_key(&slot, |e| e.first_seq)
                .ok()
                .map(|i| &v[i])
        }
        find(&self.page, slot).or_else(|| find(&self.tail, slot))
    }
}

/// The value of `slot` among `answers`: the highest ballot's entry, if every answer covers
/// the slot (`Err(())` if one does not: the caller must read further).
fn value_at(answers: &[Answer], from: u64, slot: u64) -> Result<Option<&Entry>, ()> {
    let mut best: Option<&Entry> = None;
    for a in answers {
        if !a.covers(from, slot) {
            return Err(());
        }
        if let Some(e) = a.at(slot) {
            if best.is_none_or(|b| e.ballot > b.ballot) {
                best = Some(e);
            }
        }
    }
    Ok(best)
}

/// The chain from `slot` through slots `< until` (`u64::MAX`: no bound), at most
/// `max_events` events (at least one write), and whether it stopped for want of
/// coverage.
pub fn walk(
    answers: &[Answer],
    from: u64,
    mut slot: u64,
    until: u64,
    max_events: usize,
) -> (Vec<Entry>, bool) {
    let (mut out, mut events) = (Vec::new(), 0usize);
    while slot < until && slot >= 1 {
        if !out.is_empty() && events >= max_events {
            return (out, false);
        }
        match value_at(answers, from, slot) {
            Err(()) => return (out, true),
            Ok(None) => return (out, false),
            Ok(Some(e)) => {
                events += e.events.len();
                let next = e.last_seq().checked_add(1);
                out.push(e.clone());
                match next {
                    Some(n) => slot = n,
                    None => return (out, false),
                }
            }
        }
    }
    (out, false)
}

/// What a recovering writer learns from a majority of promises.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The highest committed prefix any promise reported.
    pub committed: u64,
    /// The uncertain writes after it, in chain order: the writer proposes them again.
    pub tail: Vec<Entry>,
    /// The log's highest sequence number once the tail is chosen.
    pub highest: u64,
}

/// The committed prefix and the tail to propose again (see [`Recovered`]).
pub fn recovered(answers: &[Answer]) -> Recovered {
    let committed = answers.iter().map(|a| a.committed).max().unwrap_or(0);
    let start = committed.saturating_add(1);
    // Above `committed` every promise covers every slot: the walk never stops short.
    let (tail, _) = walk(answers, start, start, u64::MAX, usize::MAX);
    let highest = tail.last().map_or(committed, Entry::last_seq);
    Recovered {
        committed,
        tail,
        highest,
    }
}

/// A recovery's page: see [`recovery_page`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryPage {
    /// The writes from `from`, in chain order.
    pub page: Vec<Entry>,
    /// The slot inside the committed prefix that none of the answers holds, after the page
    /// found a write before it: the chain is broken there (`None`: it is not).
    pub gap: Option<u64>,
}

/// The page from `from` (at most `max_events`) of a recovery: the chain through the
/// committed prefix, then the tail.
///
/// `from` 0 asks for the newest write only (a durable state's current value).
///
/// A slot of the committed prefix is chosen, so some replica of every majority holds it
/// while majorities intersect. When none of the answers holds one that follows a write the
/// page found, they do not meet the majority that chose it — a replica set changing, or a
/// handoff whose state record arrived before its writes — and the page would end short of
/// the highest sequence number: [`RecoveryPage::gap`] says so, and the caller must not
/// answer with it. (A page that finds nothing at `from` is not a gap: the writes before a
/// snapshot may be deleted.)
pub fn recovery_page(
    answers: &[Answer],
    r: &Recovered,
    from: u64,
    max_events: usize,
) -> RecoveryPage {
    if from == 0 {
        let page = r.tail.last().cloned().into_iter().collect();
        return RecoveryPage { page, gap: None };
    }
    if from > r.committed {
        let mut events = 0usize;
        let page = r
            .tail
            .iter()
            .skip_while(|e| e.first_seq < from)
            .take_while(|e| {
                let take = events < max_events.max(1);
                events += e.events.len();
                take
            })
            .cloned()
            .collect();
        return RecoveryPage { page, gap: None };
    }
    let (mut page, short) = walk(
        answers,
        from,
        from,
        r.committed.saturating_add(1),
        max_events,
    );
    let reached = page.last().map_or(from, |e| e.last_seq().saturating_add(1));
    let events: usize = page.iter().map(|e| e.events.len()).sum();
    if short || events >= max_events {
        return RecoveryPage { page, gap: None };
    }
    if reached <= r.committed {
        let gap = (!page.is_empty()).then_some(reached);
        return RecoveryPage { page, gap };
    }
    if reached == r.committed.saturating_add(1) {
        let mut n = events;
        for e in &r.tail {
            if n >= max_events {
                break;
            }
            n += e.events.len();
            page.push(e.clone());
        }
    }
    RecoveryPage { page, gap: None }
}

#[cfg(test)]
mod tests {
    use super::super::entry::Ballot;
    use super::*;

    fn e(first: u64, n: usize, round: u64, tag: u8) -> Entry {
        Entry {
            first_seq: first,
            ballot: Ballot { round, node: 0 },
            timestamp_ms: 0,
            events: vec![vec![tag]; n],
        }
    }

    fn promise(committed: u64, page: Vec<Entry>, covered_to: u64, tail: Vec<Entry>) -> Answer {
        Answer {
            page,
            page_from: 0,
            covered_to,
            committed,
            tail,
            promise: true,
        }
    }

    #[test]
    fn a_page_that_starts_after_a_snapshot_covers_only_from_its_start() {
        // Slots 1, 3, 5 (two events each) chosen; one replica's snapshot is at 4 (its page
        // starts at 5), another's at 2 (page from 3, cut after one write).
        let (w3, w5) = (e(3, 2, 1, 3), e(5, 2, 1, 5));
        let mut after_4 = promise(6, vec![w5.clone()], u64::MAX, vec![]);
        after_4.page_from = 5;
        let mut after_2 = promise(6, vec![w3.clone()], 3, vec![]);
        after_2.page_from = 3;
        let answers = vec![after_4.clone(), after_2.clone()];
        let r = recovered(&answers);
        assert_eq!(r.committed, 6);
        // From the newest snapshot (4): slot 5 is in the first page but not covered by the
        // second (cut at 3): the page stops short, no gap claimed — the caller reads on.
        let p = recovery_page(&answers, &r, 5, 100);
        assert_eq!(p, RecoveryPage::default());
        // A second page that reaches slot 5: the chain from 5.
        let mut after_2_full = promise(6, vec![w3.clone(), w5.clone()], u64::MAX, vec![]);
        after_2_full.page_from = 3;
        let answers = vec![after_4.clone(), after_2_full];
        let p = recovery_page(&answers, &recovered(&answers), 5, 100);
        assert_eq!(p.page, vec![w5.clone()]);
        assert_eq!(p.gap, None);
        // Slot 1 is before both pages: not covered, even though asked from 1.
        let (page, short) = walk(&[after_4], 1, 1, 7, 100);
        assert!(page.is_empty() && short);
    }

    #[test]
    fn the_highest_ballot_wins_a_slot_and_the_chain_follows_it() {
        // Slot 3 was accepted as a 2-event write at round 1 by one acceptor, and as a
        // 1-event write at round 2 by another: round 2's chain goes on at 4.
        let a = promise(
            2,
            vec![e(1, 2, 1, 1), e(3, 2, 1, 9)],
            u64::MAX,
            vec![e(3, 2, 1, 9)],
        );
        let b = promise(
            2,
            vec![e(1, 2, 1, 1), e(3, 1, 2, 7), e(4, 1, 2, 7)],
            u64::MAX,
            vec![e(3, 1, 2, 7), e(4, 1, 2, 7)],
        );
        let r = recovered(&[a.clone(), b.clone()]);
        assert_eq!(r.committed, 2);
        assert_eq!(
            r.tail.iter().map(|x| x.first_seq).collect::<Vec<_>>(),
            vec![3, 4]
        );
        assert_eq!(r.highest, 4);
        let page = recovery_page(&[a, b], &r, 1, 100).page;
        assert_eq!(
            page.iter().map(|x| x.first_seq).collect::<Vec<_>>(),
            vec![1, 3, 4]
        );
    }

    #[test]
    fn a_page_stops_where_an_answer_stops_covering() {
        let a = promise(10, vec![e(1, 1, 1, 0), e(2, 1, 1, 0)], 2, vec![]);
        let b = promise(
            10,
            (1..=10).map(|s| e(s, 1, 1, 0)).collect(),
            u64::MAX,
            vec![],
        );
        let r = recovered(&[a.clone(), b.clone()]);
        assert_eq!(r.highest, 10);
        let page = recovery_page(&[a, b], &r, 1, 100);
        assert_eq!(page.page.len(), 2, "only what both answers cover");
        assert_eq!(page.gap, None, "the caller reads on: not a gap");
    }

    #[test]
    fn an_empty_log_recovers_to_zero_and_a_page_after_the_committed_prefix_comes_from_the_tail() {
        assert_eq!(
            recovered(&[promise(0, vec![], u64::MAX, vec![])]).highest,
            0
        );
        let a = promise(4, vec![], u64::MAX, vec![e(5, 1, 1, 0)]);
        let r = recovered(std::slice::from_ref(&a));
        assert_eq!(r.highest, 5);
        assert_eq!(
            recovery_page(std::slice::from_ref(&a), &r, 5, 10)
                .page
                .len(),
            1
        );
        assert!(recovery_page(&[a], &r, 6, 10).page.is_empty());
    }

    #[test]
    fn a_committed_slot_no_answer_holds_is_a_gap_unless_the_page_found_nothing() {
        // Both answers say 1 ..= 10 is chosen, but neither holds slot 6 (a handoff's state
        // record arrived before its writes).
        let holes = |first: u64| -> Vec<Entry> {
            (first..=10)
                .filter(|s| *s != 6)
                .map(|s| e(s, 1, 1, 0))
                .collect()
        };
        let a = promise(10, holes(1), u64::MAX, vec![]);
        let b = promise(4, holes(1), u64::MAX, holes(5));
        let r = recovered(&[a.clone(), b.clone()]);
        let page = recovery_page(&[a.clone(), b.clone()], &r, 1, 100);
        assert_eq!(page.page.len(), 5);
        assert_eq!(page.gap, Some(6));
        // A page cut by its size is read on, not a gap.
        assert_eq!(recovery_page(&[a.clone(), b.clone()], &r, 1, 3).gap, None);
        // Nothing at `from` (deleted before a snapshot): not a gap.
        let c = promise(10, holes(7), u64::MAX, vec![]);
        let page = recovery_page(&[c.clone(), c], &r, 1, 100);
        assert!(page.page.is_empty());
        assert_eq!(page.gap, None);
    }
}
