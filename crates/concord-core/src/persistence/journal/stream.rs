//! Events by entity type on the replicated journal: the stream a projection reads
//! (Akka's `EventsBySliceQuery` as the model; docs/PERSISTENCE.md, "Events by slices").
//!
//! **Index.** A replica indexes a write of an event log (`e<persistence id>`) once it
//! learns the write is *chosen*, never before:
//!
//! - from the writer's [`JournalMessage::Learn`](super::JournalMessage::Learn), sent to
//!   every replica once a majority accepted the write (or once a recovery re-proposed or
//!   read it), and sent again until each replica acknowledged it, naming each write by
//!   (slot, ballot) — the replica indexes the write it holds at that slot only if it was
//!   accepted at exactly that ballot, since a proposer proposes one value per slot and
//!   ballot (a higher ballot is not enough: across ring changes a stale writer's copy of
//!   a higher ballot may hold a value never chosen);
//! - or from an accept of the same writer that says the slot is chosen (its `committed`),
//!   if the learn was lost.
//!
//! The index record is `[entity type][0][stream time: u64 BE][tie: u64 BE]` → (log, slot,
//! slice) in [`Table::JournalIndex`]: time first, so a turn's new records land together at
//! the end of the type's range. A mark per write (kind 3 in [`super::acceptor`], holding
//! the stream time, the ballot of the write indexed and its last sequence number) keeps one
//! replica from indexing a write twice; a handoff carries the marks, not the index records,
//! and the new replica indexes each marked write at the mark's stream time (so the offset
//! stays the same). The **stream time** is the writer's clock when it learned the
//! write was chosen (or the replica's clock, for a write learned from an accept); the
//! **tie** is XXH3-64 of the log and slot with the low 16 bits zero, and an event's
//! **ordering** is the tie plus its index in the write (at most 1000 events per write).
//! So an event's offset is (stream time, ordering), the same on every replica that
//! learned the write from one message.
//!
//! **Reading** (`read_stream`): the type's records in offset order, of the segments a node
//! answers for, after an offset and up to a horizon (the querying node's clock minus the stream
//! delay): an event learned later than the delay after its stream time could be passed
//! over by a reader — the delay must cover a learn's delivery and the clock skew between
//! nodes. A write learned twice from different messages (a lost learn, a recovery) can
//! appear twice with two offsets: the stream is **at least once**.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use super::acceptor::{
    corrupt, key, log_state, put_state, segment_of_log, LogState, KIND_ENTRY, KIND_INDEXED,
    MAX_PAGE_BYTES,
};
use super::entry::{from_bytes, to_bytes, Ballot, Entry};
use crate::kv::ring::SEGMENTS;
use crate::kv::storage::{KvStorage, StorageError, Table};
use crate::persistence::PersistenceId;

/// Index records read at once.
const BATCH: usize = 256;
/// Writes an accept's `committed` can make this replica index at once, at most.
const MAX_LEARN_SCAN: usize = 1000;
/// Events one stream read returns, at most.
pub const MAX_STREAM_LIMIT: u32 = 10_000;

/// An event of the stream, with its offset (`at_ms`, `ordering`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamEvent {
    /// Stream time, ms since the Unix epoch (the offset's first part).
    pub at_ms: u64,
    /// Order within the stream time (the offset's second part).
    pub ordering: u64,
    /// The persistence id.
    pub persistence_id: String,
    /// The event's sequence number.
    pub seq_nr: u64,
    /// When the writer wrote it, ms since the Unix epoch.
    pub timestamp_ms: u64,
    /// The encoded event.
    pub payload: Vec<u8>,
}

impl StreamEvent {
    /// The offset: (stream time, ordering).
    pub fn offset(&self) -> (u64, u64) {
        (self.at_ms, self.ordering)
    }
}

/// What an index record points at.
#[derive(Serialize, Deserialize)]
struct Indexed {
    log: String,
    first_seq: u64,
    slice: u16,
}

/// A write's mark: it is indexed at `at_ms`, as the write of `ballot` ending at `last_seq`.
#[derive(Serialize, Deserialize)]
struct Mark {
    at_ms: u64,
    ballot: Ballot,
    last_seq: u64,
}

/// The entity type and slice of an event log's name (`None` for other logs).
fn event_log(log: &str) -> Option<(String, u16)> {
    let pid = PersistenceId::parse(log.strip_prefix('e')?).ok()?;
    Some((pid.entity_type().to_owned(), pid.slice()))
}

/// The tie of a write: XXH3-64 of its log and slot, low 16 bits zero.
pub fn tie(log: &str, first_seq: u64) -> u64 {
    let mut h = Xxh3::new();
    h.update(log.as_bytes());
    h.update(&first_seq.to_be_bytes());
    h.digest() & !0xFFFF
}

fn index_key(entity_type: &str, at_ms: u64, tie: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(entity_type.len() + 17);
    k.extend_from_slice(entity_type.as_bytes());
    k.push(0);
    k.extend_from_slice(&at_ms.to_be_bytes());
    k.extend_from_slice(&tie.to_be_bytes());
    k
}

/// (stream time, tie) of an index key.
fn index_key_offset(k: &[u8]) -> Option<(u64, u64)> {
    let n = k.len().checked_sub(16)?;
    let at = u64::from_be_bytes(k[n..n + 8].try_into().ok()?);
    let tie = u64::from_be_bytes(k[n + 8..].try_into().ok()?);
    Some((at, tie))
}

/// Indexes `entry` (held at `slot` of `log`) at `at_ms`, marks it, and notes it in
/// `state` (the caller stores it).
fn index<S: KvStorage>(
    st: &mut S,
    log: &str,
    (entity_type, slice): (&str, u16),
    slot: u64,
    mark: &Mark,
    state: &mut LogState,
) -> Result<(), StorageError> {
    let record = Indexed {
        log: log.to_owned(),
        first_seq: slot,
        slice,
    };
    let k = index_key(entity_type, mark.at_ms, tie(log, slot));
    st.put(Table::JournalIndex, &k, &to_bytes(&record))?;
    if Some(slot) == state.indexed.checked_add(1) {
        state.indexed = mark.last_seq;
    } else {
        state.marked_to = state.marked_to.max(slot);
    }
    st.put(
        Table::Journal,
        &key(log, KIND_INDEXED, slot),
        &to_bytes(mark),
    )
}

/// Indexes the writes of `log` named by (slot, ballot) at stream time `at_ms`: each one
/// this replica holds at that ballot and has not indexed yet. Returns how many it
/// indexed.
///
/// A learn says its writes are chosen (and, as a writer proposes a slot only once the one
/// before it is chosen, every write before them), so a learned write held here at its
/// ballot extends the committed prefix ([`LogState::committed`]): the next accept then has
/// nothing to index, and a recovery no uncertain tail to propose again. A slot within
/// [`LogState::indexed`] is skipped; the slot right after it is indexed without a look for
/// its mark unless a write was marked out of order up there ([`LogState::marked_to`]).
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn learn<S: KvStorage>(
    st: &mut S,
    log: &str,
    at_ms: u64,
    writes: &[(u64, Ballot)],
) -> Result<usize, StorageError> {
    let Some((entity_type, slice)) = event_log(log) else {
        return Ok(0);
    };
    let mut state = log_state(st, log)?;
    let before = state;
    let mut n = 0;
    for (slot, ballot) in writes {
        if *slot <= state.indexed {
            continue;
        }
        let next = Some(*slot) == state.indexed.checked_add(1);
        if !next || *slot <= state.marked_to {
            if let Some(v) = st.get(Table::Journal, &key(log, KIND_INDEXED, *slot))? {
                if next {
                    let mark: Mark = from_bytes(&v).map_err(corrupt)?;
                    state.indexed = mark.last_seq.max(state.indexed);
                }
                continue;
            }
        }
        let Some(b) = st.get(Table::Journal, &key(log, KIND_ENTRY, *slot))? else {
            continue;
        };
        let (held, last_seq) = Entry::head_of(&b).map_err(corrupt)?;
        if held != *ballot {
            continue;
        }
        let mark = Mark {
            at_ms,
            ballot: *ballot,
            last_seq,
        };
        index(st, log, (&entity_type, slice), *slot, &mark, &mut state)?;
        state.committed = state.committed.max(last_seq);
        n += 1;
    }
    if state != before {
        put_state(st, log, &state)?;
    }
    Ok(n)
}

/// Indexes the writes of `log` in slots `after + 1 ..= through` that this replica holds
/// at `ballot` (an accept at `ballot` said they are chosen), at stream time `at_ms`; at
/// most [`MAX_LEARN_SCAN`] writes are looked at. Marks are read first, one point read
/// each: when they cover the slots (the learns came), no write is read.
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn learn_committed<S: KvStorage>(
    st: &mut S,
    log: &str,
    ballot: Ballot,
    after: u64,
    through: u64,
    at_ms: u64,
) -> Result<usize, StorageError> {
    if through <= after || event_log(log).is_none() {
        return Ok(0);
    }
    let end = |kind: u8| match through.checked_add(1) {
        Some(t) => key(log, kind, t),
        None => key(log, kind + 1, 0),
    };
    // Marks by point reads (a write's mark is at its first slot and names its last): in
    // the usual case one read finds that the learn came and covers the slots.
    let mut covered = after;
    for _ in 0..MAX_LEARN_SCAN {
        if covered >= through {
            break;
        }
        let Some(v) = st.get(Table::Journal, &key(log, KIND_INDEXED, covered + 1))? else {
            break;
        };
        let mark: Mark = from_bytes(&v).map_err(corrupt)?;
        if mark.last_seq <= covered {
            break; // Not a mark this replica wrote: the writes are read below.
        }
        covered = mark.last_seq;
    }
    if covered >= through {
        return Ok(0);
    }
    let records = st.range(
        Table::Journal,
        &key(log, KIND_ENTRY, covered + 1),
        &end(KIND_ENTRY),
        MAX_LEARN_SCAN,
    )?;
    let mut writes = Vec::new();
    for (k, v) in records {
        if Entry::head_of(&v).map_err(corrupt)?.0 == ballot {
            writes.push((slot_of(&k)?, ballot));
        }
    }
    learn(st, log, at_ms, &writes)
}

/// The slot of a record key (its last 8 bytes).
fn slot_of(k: &[u8]) -> Result<u64, StorageError> {
    k.get(k.len().saturating_sub(8)..)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| corrupt("a bad key"))
}

/// Removes the index record and mark of the write of `log` at `first_seq` (deleted).
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn unindex<S: KvStorage>(st: &mut S, log: &str, first_seq: u64) -> Result<(), StorageError> {
    let mark_key = key(log, KIND_INDEXED, first_seq);
    let Some(b) = st.get(Table::Journal, &mark_key)? else {
        return Ok(());
    };
    let mark: Mark = from_bytes(&b).map_err(corrupt)?;
    if let Some((entity_type, _)) = event_log(log) {
        let k = index_key(&entity_type, mark.at_ms, tie(log, first_seq));
        st.remove(Table::JournalIndex, &k)?;
    }
    st.remove(Table::Journal, &mark_key)
}

/// Merges a mark handed off by another replica (`false`: it does not parse): if this
/// replica has no mark of that write and holds the same write (same ballot; it came in an
/// earlier record: entries sort before marks), it indexes it at the mark's stream time.
/// Otherwise nothing changes (and a later learn may index it here).
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn merge_mark<S: KvStorage>(
    st: &mut S,
    log: &str,
    slot: u64,
    value: &[u8],
) -> Result<bool, StorageError> {
    let Ok(mark) = from_bytes::<Mark>(value) else {
        return Ok(false);
    };
    let Some((entity_type, slice)) = event_log(log) else {
        return Ok(false);
    };
    if st
        .get(Table::Journal, &key(log, KIND_INDEXED, slot))?
        .is_some()
    {
        return Ok(true);
    }
    let Some(b) = st.get(Table::Journal, &key(log, KIND_ENTRY, slot))? else {
        return Ok(true);
    };
    if Entry::head_of(&b).map_err(corrupt)? == (mark.ballot, mark.last_seq) {
        let before = log_state(st, log)?;
        let mut state = before;
        index(st, log, (&entity_type, slice), slot, &mark, &mut state)?;
        if state != before {
            put_state(st, log, &state)?;
        }
    }
    Ok(true)
}

/// What a stream read asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamQuery {
    /// The entity type.
    pub entity_type: String,
    /// The slices of persistence ids.
    pub slices: RangeInclusive<u16>,
    /// Events after this offset (stream time ms, ordering); (0, 0) for all.
    pub after: (u64, u64),
    /// Events with stream times up to this only, ms.
    pub horizon_ms: u64,
    /// Events, at most (capped at [`MAX_STREAM_LIMIT`]).
    pub limit: u32,
}

/// The stream's events of the ring segments `answers` marks (indexed by segment), for
/// `q`, in offset order, and whether more follow (the limit or [`MAX_PAGE_BYTES`] cut the
/// page). Index records whose write was deleted are skipped.
///
/// # Errors
/// The storage failed or holds a corrupt record.
pub fn read_stream<S: KvStorage>(
    st: &mut S,
    answers: &[bool],
    q: &StreamQuery,
) -> Result<(Vec<StreamEvent>, bool), StorageError> {
    let limit = q.limit.clamp(1, MAX_STREAM_LIMIT) as usize;
    let mut next = index_key(&q.entity_type, q.after.0, q.after.1 & !0xFFFF);
    let mut end = index_key(&q.entity_type, q.horizon_ms, u64::MAX);
    end.push(0);
    let (mut out, mut bytes) = (Vec::new(), 0usize);
    loop {
        let records = st.range(Table::JournalIndex, &next, &end, BATCH)?;
        let exhausted = records.len() < BATCH;
        for (k, v) in records {
            next = k.clone();
            next.push(0);
            let offset = index_key_offset(&k).ok_or_else(|| corrupt("a bad index key"))?;
            let record: Indexed = from_bytes(&v).map_err(corrupt)?;
            let segment = segment_of_log(&record.log);
            if !answers.get(usize::from(segment)).copied().unwrap_or(false)
                || !q.slices.contains(&record.slice)
            {
                continue;
            }
            let Some(b) = st.get(
                Table::Journal,
                &key(&record.log, KIND_ENTRY, record.first_seq),
            )?
            else {
                continue;
            };
            let entry = Entry::decode(record.first_seq, &b).map_err(corrupt)?;
            let Some(pid) = record.log.strip_prefix('e') else {
                continue;
            };
            for (i, payload) in entry.events.into_iter().enumerate() {
                let ordering = offset.1 | i as u64;
                if (offset.0, ordering) <= q.after {
                    continue;
                }
                if out.len() >= limit || (!out.is_empty() && bytes + payload.len() > MAX_PAGE_BYTES)
                {
                    return Ok((out, true));
                }
                bytes += payload.len();
                out.push(StreamEvent {
                    at_ms: offset.0,
                    ordering,
                    persistence_id: pid.to_owned(),
                    seq_nr: entry.first_seq + i as u64,
                    timestamp_ms: entry.timestamp_ms,
                    payload,
                });
            }
        }
        if exhausted {
            return Ok((out, false));
        }
    }
}

/// Which segments of [`SEGMENTS`] a list names, indexed by segment.
pub fn segment_set(segments: &[u16]) -> Vec<bool> {
    let mut set = vec![false; usize::from(SEGMENTS)];
    for s in segments {
        if let Some(b) = set.get_mut(usize::from(*s)) {
            *b = true;
        }
    }
    set
}

/// Merges stream pages from several nodes: offset order, each offset once, and only up
/// to the smallest last offset of a page that was cut (beyond it that node's events are
/// unknown); at most `limit` events.
pub fn merge_pages(pages: Vec<(Vec<StreamEvent>, bool)>, limit: usize) -> Vec<StreamEvent> {
    let cut = pages
        .iter()
        .filter(|(_, full)| *full)
        .filter_map(|(events, _)| events.last().map(StreamEvent::offset))
        .min();
    let mut all: BTreeMap<(u64, u64), StreamEvent> = BTreeMap::new();
    for (events, _) in pages {
        for e in events {
            if cut.is_none_or(|c| e.offset() <= c) {
                all.entry(e.offset()).or_insert(e);
            }
        }
    }
    all.into_values().take(limit).collect()
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
