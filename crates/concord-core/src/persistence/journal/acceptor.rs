//! The acceptor side of the replicated journal: one node's records of the logs it
//! replicates, in [`Table::Journal`] of its storage, and its answers to proposers (the
//! acceptor of Lamport's Paxos, one instance per slot, with the promise shared by every
//! slot of a log as in Multi-Paxos).
//!
//! **Records** (keys sort by segment, then log, then kind and slot):
//! `[segment: u16 BE][log bytes][0][kind: u8][seq: u64 BE]` with kind
//! - 0, seq 0: the log's state ([`LogState`]: the promised ballot and the committed
//!   prefix);
//! - 1, seq = slot: an accepted [`Entry`];
//! - 2, seq 0: the newest [`StoredSnapshot`];
//! - 3, seq = slot: the write's mark in the events-by-type stream ([`super::stream`]:
//!   its stream time, and the ballot and last sequence number of the write indexed; the
//!   index itself is in [`Table::JournalIndex`]).
//!
//! Values are stored forms: a format byte, then postcard.
//!
//! Log names never hold a NUL byte (persistence ids refuse it), so one log's records never
//! interleave with another's.
//!
//! Merging records (handoff after a ring change) is safe in any order: the promise and
//! the committed prefix take the maximum, a slot the entry of the higher ballot, the
//! snapshot the higher sequence number.

use super::entry::{from_bytes, to_bytes, Ballot, Entry, StoredSnapshot, FORMAT};
use super::message::JournalMessage;
use super::unable::UnableReason;
use crate::kv::ring::{key_hash, segment_of};
use crate::kv::storage::{KvStorage, StorageError, Table};

pub(super) const KIND_STATE: u8 = 0;
pub(super) const KIND_ENTRY: u8 = 1;
pub(super) const KIND_SNAPSHOT: u8 = 2;
/// Kind 3, seq = slot: the write is indexed in the events-by-type stream (value: its
/// stream time, ballot and last sequence number; see [`super::stream`]).
pub(super) const KIND_INDEXED: u8 = 3;

/// Bytes of events one page carries, at most (at least one entry is always sent; the
/// reader reads on from where the page ends): a promise, a read's answer or a stream page
/// then fits in one frame of the large lane (`maximum-large-frame-size`, 2 MiB by
/// default) whenever one write does — a larger answer would be dropped as too large, and
/// the request it answers could never complete.
pub const MAX_PAGE_BYTES: usize = 1 << 20;
/// Entries in a log's uncertain tail an acceptor sends, at most (more: it answers
/// `Unable`; a writer that never completes a write leaves at most one).
pub const MAX_TAIL_ENTRIES: usize = 1000;
/// Records read from storage at once.
const SCAN: usize = 256;

/// The ring segment of a log.
pub fn segment_of_log(log: &str) -> u16 {
    segment_of(key_hash(log))
}

pub(super) fn key(log: &str, kind: u8, seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(log.len() + 12);
    k.extend_from_slice(&segment_of_log(log).to_be_bytes());
    k.extend_from_slice(log.as_bytes());
    k.push(0);
    k.push(kind);
    k.extend_from_slice(&seq.to_be_bytes());
    k
}

/// True if `k` is the key of a log's state record (`key(log, KIND_STATE, 0)`: it ends
/// with the log name's terminator, the kind and slot 0), by its last bytes alone.
pub(super) fn is_state_key(k: &[u8]) -> bool {
    const TAIL: [u8; 10] = [0, KIND_STATE, 0, 0, 0, 0, 0, 0, 0, 0];
    k.len() > 2 + TAIL.len() && k.ends_with(&TAIL)
}

/// True if `k` is the key of an entry record (`key(log, KIND_ENTRY, slot)`: the log
/// name's terminator, then the kind), by its last bytes alone.
pub(super) fn is_entry_key(k: &[u8]) -> bool {
    k.len() > 12 && k[k.len() - 10] == 0 && k[k.len() - 9] == KIND_ENTRY
}

/// The first key of segment `s` and the first key after it.
pub fn segment_bounds(s: u16) -> (Vec<u8>, Vec<u8>) {
    let start = s.to_be_bytes().to_vec();
    let end = match s.checked_add(1) {
        Some(n) => n.to_be_bytes().to_vec(),
        None => vec![0xff, 0xff, 0xff],
    };
    (start, end)
}

/// A record key's parts: segment, log, kind, seq.
pub(super) fn parse_key(k: &[u8]) -> Option<(u16, &str, u8, u64)> {
    if k.len() < 2 + 1 + 1 + 8 {
        return None;
    }
    let segment = u16::from_be_bytes([k[0], k[1]]);
    let rest = &k[2..];
    let nul = rest.iter().position(|b| *b == 0)?;
    let log = std::str::from_utf8(&rest[..nul]).ok()?;
    let tail = &rest[nul + 1..];
    if tail.len() != 9 {
        return None;
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&tail[1..]);
    Some((segment, log, tail[0], u64::from_be_bytes(seq)))
}

pub(super) fn corrupt(what: impl std::fmt::Display) -> StorageError {
    StorageError(format!("journal record: {what}"))
}

/// A log's promise and committed prefix, and how far this replica indexed its writes.
///
/// Stored as postcard of (`promised`, `committed`, `indexed`, `marked_to`). A record of an
/// earlier version ends after `committed`: it reads as `indexed` 0 and `marked_to`
/// `u64::MAX` (every learn then looks for a mark, as that version did); an earlier version
/// reading this one ignores the trailing fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogState {
    /// The highest ballot promised.
    pub promised: Ballot,
    /// Every slot up to this is chosen: advanced by an accept's `committed`, and by a learn
    /// of a write held here at its chosen ballot ([`super::stream::learn`]), so a log whose
    /// last write was learned has no uncertain tail for its next recovery.
    pub committed: u64,
    /// Every write of the log starting at or below this is indexed here
    /// ([`super::stream`]): a learn of such a slot has nothing to do.
    pub indexed: u64,
    /// The highest slot above `indexed` this replica indexed out of order (a learn that
    /// overtook an earlier one, a handoff's mark); 0 if none. A learn of the slot right after
    /// `indexed` and above this needs no look for a mark.
    pub marked_to: u64,
}

impl LogState {
    pub(super) fn encode(&self) -> Vec<u8> {
        to_bytes(self)
    }

    pub(super) fn decode(b: &[u8]) -> Result<LogState, StorageError> {
        let body = match b.split_first() {
            Some((&FORMAT, body)) => body,
            _ => return from_bytes(b).map_err(corrupt),
        };
        let ((promised, committed), rest) =
            postcard::take_from_bytes::<(Ballot, u64)>(body).map_err(corrupt)?;
        let (indexed, marked_to) = if rest.is_empty() {
            (0, u64::MAX)
        } else {
            postcard::from_bytes::<(u64, u64)>(rest).map_err(corrupt)?
        };
        Ok(LogState {
            promised,
            committed,
            indexed,
            marked_to,
        })
    }
}

/// The acceptor's state of `log`.
///
/// # Errors
/// The storage failed or the record is corrupt.
pub fn log_state<S: KvStorage>(st: &mut S, log: &str) -> Result<LogState, StorageError> {
    match st.get(Table::Journal, &key(log, KIND_STATE, 0))? {
        Some(b) => LogState::decode(&b),
        None => Ok(LogState::default()),
    }
}

pub(super) fn put_state<S: KvStorage>(
    st: &mut S,
    log: &str,
    s: &LogState,
) -> Result<(), StorageError> {
    st.put(Table::Journal, &key(log, KIND_STATE, 0), &s.encode())
}

/// Entries of `log` with slots from `from`, at most `max_events` events and `max_bytes` of
/// them (but at least one entry), and the slot up to which the page is complete.
pub(super) fn page<S: KvStorage>(
    st: &mut S,
    log: &str,
    from: u64,
    max_events: usize,
    max_bytes: usize,
) -> Result<(Vec<Entry>, u64), StorageError> {
    let end = key(log, KIND_SNAPSHOT, 0);
    let mut start = key(log, KIND_ENTRY, from.max(1));
    let (mut out, mut events, mut bytes) = (Vec::new(), 0usize, 0usize);
    loop {
        let records = st.range(Table::Journal, &start, &end, SCAN)?;
        let exhausted = records.len() < SCAN;
        for (k, v) in records {
            let (_, _, _, slot) = parse_key(&k).ok_or_else(|| corrupt("a bad key"))?;
            let e = Entry::decode(slot, &v).map_err(corrupt)?;
            if !out.is_empty()
                && (events + e.events.len() > max_events || bytes + e.payload_bytes() > max_bytes)
            {
                let covered = out.last().map_or(from, |l: &Entry| l.first_seq);
                return Ok((out, covered));
            }
            events += e.events.len();
            bytes += e.payload_bytes();
            start = key(log, KIND_ENTRY, slot.saturating_add(1));
            out.push(e);
        }
        if exhausted || slot_after(&start) {
            return Ok((out, u64::MAX));
        }
    }
}

/// True if `k` is the key after slot `u64::MAX` (the scan is over).
fn slot_after(k: &[u8]) -> bool {
    k.ends_with(&u64::MAX.to_be_bytes())
}

/// Phase 1: promise `ballot` if it is above every ballot promised, with the page from
/// `from` and the uncertain tail; a [`JournalMessage::Nack`] otherwise. With `snapshot`, the
/// snapshot kept goes with the promise, and the page starts after it if that is later than
/// `from` (its events need not be read again).
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn prepare<S: KvStorage>(
    st: &mut S,
    request: u64,
    log: &str,
    ballot: Ballot,
    from: u64,
    max_events: usize,
    snapshot: bool,
) -> Result<JournalMessage, StorageError> {
    let mut state = log_state(st, log)?;
    if ballot <= state.promised {
        return Ok(JournalMessage::Nack {
            request,
            promised: state.promised,
        });
    }
    state.promised = ballot;
    put_state(st, log, &state)?;
    let snapshot = if snapshot {
        load_snapshot(st, log)?
    } else {
        None
    };
    let page_from = snapshot
        .as_ref()
        .map_or(from, |s| from.max(s.seq_nr.saturating_add(1)));
    // A promise's page shares MAX_PAGE_BYTES with its snapshot and its tail (at least one
    // entry is still sent; the recovery's caller reads on), so that the promise fits in
    // one frame whenever they and one write do.
    let snapshot_bytes = snapshot.as_ref().map_or(0, |s| s.payload.len());
    let max_bytes = MAX_PAGE_BYTES.saturating_sub(snapshot_bytes);
    let (mut entries, mut covered_to) = page(st, log, page_from, max_events, max_bytes)?;
    let tail_from = state.committed.saturating_add(1);
    let tail = if covered_to == u64::MAX && page_from <= tail_from {
        // The page holds the tail already.
        Vec::new()
    } else {
        let (tail, complete) = page(st, log, tail_from, MAX_TAIL_ENTRIES * 1000, MAX_PAGE_BYTES)?;
        if complete != u64::MAX || tail.len() > MAX_TAIL_ENTRIES {
            return Ok(JournalMessage::Unable {
                request,
                reason: UnableReason::TailTooLong,
            });
        }
        let tail_bytes: usize = tail.iter().map(Entry::payload_bytes).sum();
        let mut bytes = 0usize;
        let keep = entries
            .iter()
            .position(|e| {
                bytes += e.payload_bytes();
                bytes > max_bytes.saturating_sub(tail_bytes)
            })
            .map_or(entries.len(), |cut| cut.max(1));
        if keep < entries.len() {
            entries.truncate(keep);
            covered_to = entries.last().map_or(page_from, |e| e.first_seq);
        }
        tail
    };
    Ok(JournalMessage::Promise {
        request,
        committed: state.committed,
        page: entries,
        page_from,
        covered_to,
        tail,
        snapshot,
        replicas: 0,
    })
}

/// Phase 2 without the implied learn (the tests' shorthand for [`accept_and_learn`]).
///
/// # Errors
/// The storage failed or holds a corrupt record.
#[cfg(test)]
pub(super) fn accept<S: KvStorage>(
    st: &mut S,
    request: u64,
    log: &str,
    ballot: Ballot,
    committed: u64,
    compact: bool,
    writes: &[Entry],
) -> Result<JournalMessage, StorageError> {
    accept_and_learn(st, request, log, ballot, committed, compact, writes, None)
}

/// Phase 2: accept `writes` at `ballot` unless a higher ballot was promised; with
/// `learn_at_ms`, also the writes of this writer that the accept says are
/// chosen (slots above the committed prefix held before, up to `committed`) are indexed in
/// the events-by-type stream at that stream time ([`super::stream::learn_committed`]: their
/// learn may have been lost).
///
/// # Errors
/// The storage failed or holds a corrupt record.
#[allow(clippy::too_many_arguments)]
pub fn accept_and_learn<S: KvStorage>(
    st: &mut S,
    request: u64,
    log: &str,
    ballot: Ballot,
    committed: u64,
    compact: bool,
    writes: &[Entry],
    learn_at_ms: Option<u64>,
) -> Result<JournalMessage, StorageError> {
    let mut state = log_state(st, log)?;
    let committed_before = state.committed;
    if ballot < state.promised {
        return Ok(JournalMessage::Nack {
            request,
            promised: state.promised,
        });
    }
    if writes.iter().any(|w| !w.is_valid()) {
        return Ok(JournalMessage::Unable {
            request,
            reason: UnableReason::BadRequest,
        });
    }
    let before = state;
    state.promised = ballot;
    state.committed = state.committed.max(committed);
    if state != before {
        // Usually unchanged: the learn of the slot before came first and moved the
        // committed prefix, and the writer's ballot was promised at its recovery.
        put_state(st, log, &state)?;
    }
    for w in writes {
        let stored = Entry {
            ballot,
            ..w.clone()
        };
        st.put(
            Table::Journal,
            &key(log, KIND_ENTRY, w.first_seq),
            &stored.encode(),
        )?;
    }
    if compact {
        // Durable state: every slot before the newest is history nobody reads.
        let newest = writes.iter().map(|w| w.first_seq).max().unwrap_or(0);
        remove_entries(st, log, newest.min(state.committed.saturating_add(1)))?;
    }
    if let Some(at_ms) = learn_at_ms {
        super::stream::learn_committed(st, log, ballot, committed_before, committed, at_ms)?;
    }
    Ok(JournalMessage::Accepted {
        request,
        replicas: 0,
    })
}

/// Removes the entries of `log` with slots below `below`.
fn remove_entries<S: KvStorage>(st: &mut S, log: &str, below: u64) -> Result<(), StorageError> {
    loop {
        let records = st.range(
            Table::Journal,
            &key(log, KIND_ENTRY, 0),
            &key(log, KIND_ENTRY, below),
            SCAN,
        )?;
        let n = records.len();
        for (k, _) in records {
            st.remove(Table::Journal, &k)?;
        }
        if n < SCAN {
            return Ok(());
        }
    }
}

/// A read of the entries from `from` (no promise).
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn read<S: KvStorage>(
    st: &mut S,
    request: u64,
    log: &str,
    from: u64,
    max_events: usize,
) -> Result<JournalMessage, StorageError> {
    let (entries, covered_to) = page(st, log, from, max_events, MAX_PAGE_BYTES)?;
    Ok(JournalMessage::ReadReply {
        request,
        page: entries,
        covered_to,
        replicas: 0,
    })
}

/// Keeps `snapshot` if it is newer than the one kept.
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn save_snapshot<S: KvStorage>(
    st: &mut S,
    log: &str,
    snapshot: &StoredSnapshot,
) -> Result<(), StorageError> {
    let k = key(log, KIND_SNAPSHOT, 0);
    if let Some(old) = st.get(Table::Journal, &k)? {
        if StoredSnapshot::decode(&old).map_err(corrupt)?.seq_nr > snapshot.seq_nr {
            return Ok(());
        }
    }
    st.put(Table::Journal, &k, &snapshot.encode())
}

/// The snapshot kept for `log`.
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn load_snapshot<S: KvStorage>(
    st: &mut S,
    log: &str,
) -> Result<Option<StoredSnapshot>, StorageError> {
    st.get(Table::Journal, &key(log, KIND_SNAPSHOT, 0))?
        .map(|b| StoredSnapshot::decode(&b).map_err(corrupt))
        .transpose()
}

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

/// Merges a record handed off by another replica (see the module docs); a record that
/// does not parse is skipped and counted in the result.
///
/// # Errors
/// The storage failed.
pub fn merge_record<S: KvStorage>(
    st: &mut S,
    key_bytes: &[u8],
    value: &[u8],
) -> Result<bool, StorageError> {
    let Some((_, log, kind, seq)) = parse_key(key_bytes) else {
        return Ok(false);
    };
    if key(log, kind, seq) != key_bytes {
        return Ok(false);
    }
    let old = st.get(Table::Journal, key_bytes)?;
    let keep_new = match kind {
        KIND_STATE => {
            let Ok(new) = LogState::decode(value) else {
                return Ok(false);
            };
            let merged = match old.as_deref().map(LogState::decode).transpose()? {
                // How far the writes are indexed is this replica's own (the handed-off
                // marks that follow index them here).
                Some(o) => LogState {
                    promised: o.promised.max(new.promised),
                    committed: o.committed.max(new.committed),
                    ..o
                },
                None => LogState {
                    indexed: 0,
                    marked_to: 0,
                    ..new
                },
            };
            st.put(Table::Journal, key_bytes, &merged.encode())?;
            return Ok(true);
        }
        KIND_ENTRY => {
            let Ok(new) = Entry::decode(seq, value) else {
                return Ok(false);
            };
            match old {
                Some(o) => Entry::decode(seq, &o).map_err(corrupt)?.ballot < new.ballot,
                None => true,
            }
        }
        KIND_INDEXED => return super::stream::merge_mark(st, log, seq, value),
        KIND_SNAPSHOT => {
            let Ok(new) = StoredSnapshot::decode(value) else {
                return Ok(false);
            };
            match old {
                Some(o) => StoredSnapshot::decode(&o).map_err(corrupt)?.seq_nr < new.seq_nr,
                None => true,
            }
        }
        _ => return Ok(false),
    };
    if keep_new {
        st.put(Table::Journal, key_bytes, value)?;
    }
    Ok(true)
}

/// The segments this storage holds records of.
///
/// # Errors
/// The storage failed.
pub fn held_segments<S: KvStorage>(st: &mut S) -> Result<Vec<u16>, StorageError> {
    let mut out = Vec::new();
    let mut from = 0u16;
    loop {
        let (start, _) = segment_bounds(from);
        let r = st.range(Table::Journal, &start, &[0xff, 0xff, 0xff], 1)?;
        let Some((k, _)) = r.first() else {
            return Ok(out);
        };
        let Some(s) = super::held_index::HeldIndex::segment_of_key(k) else {
            return Err(corrupt("a bad key"));
        };
        out.push(s);
        match s.checked_add(1) {
            Some(n) => from = n,
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
#[path = "acceptor_tests.rs"]
mod tests;
