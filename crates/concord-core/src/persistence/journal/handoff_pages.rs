//! Reading a segment's records for handoff pages ([`super::handoff`]): whole pages,
//! pages that leave out what the new replica holds ([`super::holding`]), and the segments
//! this node holds records of.

use super::acceptor::{corrupt, segment_bounds};
use crate::kv::storage::{KvStorage, StorageError, Table};

/// Records of segment `segment` from `after` (exclusive; `None`: from the start), at most
/// `limit` — a handoff page (the events-by-type index is not among them: each replica
/// makes its own from the marks).
///
/// # Errors
/// The storage failed.
pub fn segment_records<S: KvStorage>(
    st: &mut S,
    segment: u16,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<crate::kv::storage::Record>, StorageError> {
    let (start, end) = segment_bounds(segment);
    let start = match after {
        Some(a) => {
            let mut k = a.to_vec();
            k.push(0);
            k
        }
        None => start,
    };
    st.range(Table::Journal, &start, &end, limit)
}

/// A handoff page of `segment`: its records after key `after` (from its start if `None`),
/// at most `max_records` of them and — but at least one — at most `max_bytes` of keys and
/// values, and whether it is the segment's last page. Bounded by bytes as well as by
/// records so that a page of large writes or snapshots still fits in one frame of the
/// large lane; a page cut by bytes is never the last.
///
/// # Errors
/// The storage failed.
pub fn handoff_page<S: KvStorage>(
    st: &mut S,
    segment: u16,
    after: Option<&[u8]>,
    max_records: usize,
    max_bytes: usize,
) -> Result<(Vec<crate::kv::storage::Record>, bool), StorageError> {
    let mut records = segment_records(st, segment, after, max_records)?;
    let mut last = records.len() < max_records;
    let mut bytes = 0usize;
    if let Some(cut) = records.iter().position(|(k, v)| {
        bytes = bytes.saturating_add(k.len() + v.len());
        bytes > max_bytes
    }) {
        records.truncate(cut.max(1));
        last = false;
    }
    Ok((records, last))
}

/// Pages of records a [`handoff_page_skipping`] reads at most, for one page it sends (the
/// reads of one tick are bounded by [`super::handoff::MAX_TICK_RECORDS`] too).
const SKIP_SCANS: usize = 4;

/// [`handoff_page`] for a new replica that holds `holding` already: the records it would
/// not change are left out ([`super::holding`]). Reads at most 4 × `max_records` records;
/// returns the page, the key to resume after (the last record read, sent or not) and
/// whether the segment ended. A page may be empty without being the last.
///
/// # Errors
/// The storage failed.
pub fn handoff_page_skipping<S: KvStorage>(
    st: &mut S,
    segment: u16,
    after: Option<&[u8]>,
    max_records: usize,
    max_bytes: usize,
    holding: &super::holding::SegmentHolding,
) -> Result<HandoffPage, StorageError> {
    let max_records = max_records.max(1);
    let mut page = HandoffPage {
        resume: after.map(<[u8]>::to_vec),
        ..HandoffPage::default()
    };
    let mut bytes = 0usize;
    for _ in 0..SKIP_SCANS {
        let records = segment_records(st, segment, page.resume.as_deref(), max_records)?;
        let n = records.len();
        for (k, v) in records {
            if holding.covers(&k, &v) {
                page.skipped += 1;
            } else {
                let size = k.len().saturating_add(v.len());
                if !page.records.is_empty()
                    && (page.records.len() >= max_records || bytes.saturating_add(size) > max_bytes)
                {
                    return Ok(page);
                }
                bytes = bytes.saturating_add(size);
                page.records.push((k.clone(), v));
            }
            page.resume = Some(k);
        }
        if n < max_records {
            page.last = true;
            return Ok(page);
        }
    }
    Ok(page)
}

/// A handoff page read by [`handoff_page_skipping`].
#[derive(Debug, Default)]
pub struct HandoffPage {
    /// Its records.
    pub records: Vec<crate::kv::storage::Record>,
    /// The key the next page starts after (the last record read, sent or not).
    pub resume: Option<Vec<u8>>,
    /// It is the segment's last.
    pub last: bool,
    /// Records read and left out.
    pub skipped: u64,
}

/// The segments this storage holds records of.
///
/// # Errors
/// The storage failed.
pub fn held_segments<S: KvStorage>(st: &mut S) -> Result<Vec<u16>, StorageError> {
    held_segments_from(st, 0, usize::MAX).map(|(held, _)| held)
}

/// [`held_segments`] from segment `from` on, in at most `seeks` seeks (each finds the next
/// segment held): those found, and the segment to go on from (`None` once done).
///
/// # Errors
/// The storage failed.
pub fn held_segments_from<S: KvStorage>(
    st: &mut S,
    mut from: u16,
    seeks: usize,
) -> Result<(Vec<u16>, Option<u16>), StorageError> {
    let mut out = Vec::new();
    for _ in 0..seeks.max(1) {
        let (start, _) = segment_bounds(from);
        let r = st.range(Table::Journal, &start, &[0xff, 0xff, 0xff], 1)?;
        let Some((k, _)) = r.first() else {
            return Ok((out, None));
        };
        let s = match k.as_slice() {
            [a, b, ..] => u16::from_be_bytes([*a, *b]),
            _ => return Err(corrupt("a bad key")),
        };
        out.push(s);
        match s.checked_add(1) {
            Some(n) => from = n,
            None => return Ok((out, None)),
        }
    }
    Ok((out, Some(from)))
}
