//! [`StateCache`]'s holdings: what this replica holds of a segment, and handoff pages of
//! only what another replica lacks, from the holdings kept in memory ([`LiveHoldings`](super::super::live_holdings::LiveHoldings)).

use crate::kv::storage::{KvStorage, StorageError, Table};

use super::super::acceptor::{handoff_page_skipping, HandoffPage};
use super::super::holding::{self, SegmentHolding};
use super::super::live_holdings::{Lack, Read};
use super::StateCache;

impl<S: KvStorage> StateCache<S> {
    /// What this replica holds of `segment` ([`holding::summarize`]; `None`: beyond its
    /// limits). Empty without a read if the held index knows nothing is held there; from
    /// memory if the segment is kept ([`LiveHoldings`](super::super::live_holdings::LiveHoldings)); else read from the
    /// storage once, and kept from then on if it can be.
    ///
    /// # Errors
    /// The storage failed.
    pub fn holding(&mut self, segment: u16) -> Result<Option<SegmentHolding>, StorageError> {
        if !self.held.may_hold(segment) {
            return Ok(Some(SegmentHolding {
                segment,
                logs: Vec::new(),
            }));
        }
        if let Some(h) = self.live.holding(segment) {
            return Ok(Some(h));
        }
        if self.live.known_too_large(segment) {
            return Ok(None);
        }
        match self.live.read(&mut self.inner, segment)?.1 {
            Read::Kept => Ok(self.live.holding(segment)),
            Read::NotKept(h) => Ok(Some(h)),
            Read::TooLarge => Ok(None),
            Read::Inexact => holding::summarize(&mut self.inner, segment),
        }
    }

    /// Reads about `budget` records' worth of segments whose holdings are not kept yet
    /// ([`LiveHoldings::warm`](super::super::live_holdings::LiveHoldings::warm)); once the
    /// index of segments holding records was scanned, segments it knows empty are kept
    /// without a read. Returns the records read.
    ///
    /// # Errors
    /// The storage failed.
    pub fn warm_holdings(&mut self, budget: usize) -> Result<usize, StorageError> {
        let held = &self.held;
        self.live
            .warm(&mut self.inner, budget, |s| held.may_hold(s))
    }

    /// Segments whose holdings are kept in memory ([`LiveHoldings`](super::super::live_holdings::LiveHoldings)).
    pub fn holdings_kept(&self) -> usize {
        self.live.len()
    }

    /// [`handoff_page_skipping`] for a new replica that holds `theirs`, reading only the
    /// records it lacks when the segment's holding is kept ([`LiveHoldings::lacking`](super::super::live_holdings::LiveHoldings::lacking); the
    /// first page reads the segment once to keep it). Returns the page (`skipped`: the
    /// records left out, read or not) and the records read.
    ///
    /// # Errors
    /// The storage failed.
    pub fn handoff_page_lacking(
        &mut self,
        segment: u16,
        after: Option<&[u8]>,
        max_records: usize,
        max_bytes: usize,
        theirs: &SegmentHolding,
    ) -> Result<(HandoffPage, usize), StorageError> {
        let mut read = 0usize;
        if after.is_none() && !self.live.keeps(segment) && !self.live.known_too_large(segment) {
            read += self.live.read(&mut self.inner, segment)?.0;
        }
        let Some(lacking) = self.live.lacking(segment, theirs, after) else {
            let page = handoff_page_skipping(self, segment, after, max_records, max_bytes, theirs)?;
            read = read
                .saturating_add(page.records.len())
                .saturating_add(usize::try_from(page.skipped).unwrap_or(usize::MAX));
            return Ok((page, read));
        };
        let max_records = max_records.max(1);
        let mut page = HandoffPage {
            resume: after.map(<[u8]>::to_vec),
            ..HandoffPage::default()
        };
        let mut bytes = 0usize;
        // Records the holding covers, counted once the page reaches past them.
        let mut covered = 0u64;
        for (i, lack) in lacking.lacks.iter().enumerate() {
            let before = lacking.covered_before.get(i).copied().unwrap_or(0);
            let mut reached = false;
            let (mut from, to, point) = match lack {
                Lack::Record(k) => (k.clone(), Vec::new(), true),
                Lack::Range(a, b) => (a.clone(), b.clone(), false),
            };
            loop {
                let want = max_records.saturating_sub(page.records.len()).max(1);
                let records = if point {
                    KvStorage::get(self, Table::Journal, &from)?
                        .map(|v| vec![(from.clone(), v)])
                        .unwrap_or_default()
                } else {
                    self.inner.range(Table::Journal, &from, &to, want)?
                };
                let n = records.len();
                read = read.saturating_add(n);
                for (k, v) in records {
                    let size = k.len().saturating_add(v.len());
                    let covers = theirs.covers(&k, &v);
                    if !covers
                        && !page.records.is_empty()
                        && (page.records.len() >= max_records
                            || bytes.saturating_add(size) > max_bytes)
                    {
                        page.skipped = page.skipped.saturating_add(covered);
                        return Ok((page, read));
                    }
                    if !reached {
                        reached = true;
                        covered = covered.saturating_add(before);
                    }
                    if covers {
                        page.skipped = page.skipped.saturating_add(1);
                    } else {
                        bytes = bytes.saturating_add(size);
                        page.records.push((k.clone(), v));
                    }
                    page.resume = Some(k);
                }
                if point || n < want {
                    break;
                }
                let Some(mut next) = page.resume.clone() else {
                    break;
                };
                next.push(0);
                from = next;
            }
            if !reached {
                covered = covered.saturating_add(before);
            }
        }
        let trailing = lacking.covered_before.last().copied().unwrap_or(0);
        page.skipped = page
            .skipped
            .saturating_add(covered)
            .saturating_add(trailing);
        page.last = true;
        Ok((page, read))
    }
}

#[cfg(test)]
#[path = "state_cache_holdings_tests.rs"]
mod tests;
