//! [`LiveHoldings`]: what this replica holds of each segment ([`super::holding`]), kept up
//! to date as records are written and removed instead of read back from the disk at every
//! ring change.
//!
//! At a ring change every replica read whole segments: the holdings it offers (a member
//! that left, a member new to the ring), and each page it hands to a replica that sent its
//! holding (every record read, to leave out those covered). Under a rolling upgrade that
//! read most of every node's journal at each leave and each join, and the journal host
//! threads spent 68–70 % of those moments on it (docs/BENCHMARKS.md, "Rolling upgrade").
//! Here a segment is read once — a little each tick from the node's start
//! ([`LiveHoldings::warm`]), or when a ring change asks for it first — and every later
//! write or removal of one of its records updates it in memory, so that
//! - a holding offered is built from memory ([`LiveHoldings::holding`]);
//! - a handoff page to a replica that told its holding reads only the records it lacks
//!   ([`LiveHoldings::lacking`]: its key ranges, by comparing both holdings): the state
//!   records, the entries of a higher ballot or at slots it lacks, its missing marks, a
//!   newer snapshot.
//!
//! A segment is kept only while it is exact: a record whose key does not parse (or of a
//! kind a holding does not list), a slot at `u64::MAX`, a snapshot that does not decode, a
//! write the storage refused, or a segment beyond [`super::holding`]'s limits drops it
//! (the callers then read the disk, as before). [`super::state_cache::StateCache`] keeps
//! it, and drops all of it when a commit fails. Bounded: at most [`DEFAULT_BUDGET_BYTES`]
//! of holdings, counted as [`SegmentHolding::size`] counts them.
//!
//! The idea is Riak's active anti-entropy, whose hash trees are updated on every write
//! rather than rebuilt for each exchange; here the summary is exact (runs of slots with
//! one ballot) rather than hashed.

use std::collections::{BTreeMap, HashMap};

use super::acceptor::{
    key, parse_key, segment_records, KIND_ENTRY, KIND_INDEXED, KIND_SNAPSHOT, KIND_STATE,
};
use super::entry::{Ballot, Entry, StoredSnapshot};
use super::holding::{
    EntryRun, LogHolding, SegmentHolding, SlotRun, MAX_BYTES, MAX_LOGS, MAX_RUNS,
};
use super::slot_runs::{for_each_part, lacking, set, unset, Run};
use crate::kv::storage::{KvStorage, StorageError};

/// Bytes of holdings kept, at most, about ([`SegmentHolding::size`]): beyond, a segment
/// read is not kept, and one that grows past it is dropped.
pub const DEFAULT_BUDGET_BYTES: usize = 32 * 1024 * 1024;

/// What this replica holds of one log.
#[derive(Debug, Clone, Default)]
struct LogRuns {
    state: bool,
    entries: Vec<Run>,
    marks: Vec<Run>,
    snapshot_seq: u64,
    /// Its snapshot record is here (a snapshot of sequence number 0 is held too).
    snapshot: bool,
}

impl LogRuns {
    fn is_empty(&self) -> bool {
        !self.state && !self.snapshot && self.entries.is_empty() && self.marks.is_empty()
    }

    fn size(&self, log: &str) -> usize {
        16 + log.len() + 32 * self.entries.len() + 16 * self.marks.len()
    }
}

/// One segment's holding, exact.
#[derive(Debug, Clone, Default)]
struct Segment {
    logs: BTreeMap<String, LogRuns>,
    runs: usize,
    size: usize,
}

/// Why a record cannot be kept.
struct Untrackable;

impl Segment {
    fn within_limits(&self) -> bool {
        self.logs.len() <= MAX_LOGS && self.runs <= MAX_RUNS && 4 + self.size <= MAX_BYTES
    }

    /// Applies a write (`Some(value)`) or a removal (`None`) of the record `k`.
    fn apply(&mut self, k: &[u8], value: Option<&[u8]>) -> Result<(), Untrackable> {
        let (_, log, kind, seq) = parse_key(k).ok_or(Untrackable)?;
        if key(log, kind, seq) != k {
            return Err(Untrackable);
        }
        let l = match self.logs.get_mut(log) {
            Some(l) => l,
            None if value.is_none() => return Ok(()),
            None => {
                self.size = self.size.saturating_add(LogRuns::default().size(log));
                self.logs.entry(log.to_string()).or_default()
            }
        };
        let before = (l.entries.len() + l.marks.len(), l.size(log));
        match (kind, value) {
            (KIND_STATE, v) if seq == 0 => l.state = v.is_some(),
            (KIND_SNAPSHOT, Some(v)) if seq == 0 => {
                l.snapshot_seq = StoredSnapshot::decode(v).map_err(|_| Untrackable)?.seq_nr;
                l.snapshot = true;
            }
            (KIND_SNAPSHOT, None) if seq == 0 => {
                l.snapshot_seq = 0;
                l.snapshot = false;
            }
            (KIND_ENTRY, Some(v)) if seq < u64::MAX => {
                let (ballot, _) = Entry::head_of(v).map_err(|_| Untrackable)?;
                set(&mut l.entries, seq, ballot);
            }
            (KIND_ENTRY, None) => unset(&mut l.entries, seq),
            (KIND_INDEXED, Some(_)) if seq < u64::MAX => {
                set(&mut l.marks, seq, Ballot::default());
            }
            (KIND_INDEXED, None) => unset(&mut l.marks, seq),
            _ => return Err(Untrackable),
        }
        let after = (l.entries.len() + l.marks.len(), l.size(log));
        self.runs = (self.runs + after.0).saturating_sub(before.0);
        self.size = (self.size + after.1).saturating_sub(before.1);
        if l.is_empty() {
            self.size = self.size.saturating_sub(l.size(log));
            self.logs.remove(log);
        }
        Ok(())
    }

    /// As [`SegmentHolding`] (what [`super::holding::summarize`] would read).
    fn holding(&self, segment: u16) -> SegmentHolding {
        let runs = |rs: &[Run]| -> Vec<SlotRun> {
            rs.iter()
                .map(|r| SlotRun {
                    first: r.first,
                    count: r.count,
                })
                .collect()
        };
        SegmentHolding {
            segment,
            logs: self
                .logs
                .iter()
                .map(|(log, l)| LogHolding {
                    log: log.clone(),
                    entries: l
                        .entries
                        .iter()
                        .map(|r| EntryRun {
                            first: r.first,
                            count: r.count,
                            ballot: r.ballot,
                        })
                        .collect(),
                    marks: runs(&l.marks),
                    snapshot_seq: l.snapshot_seq,
                })
                .collect(),
        }
    }
}

/// The records of one segment a replica holding `theirs` lacks, by key ranges in key
/// order ([`LiveHoldings::lacking`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lack {
    /// The record at this key.
    Record(Vec<u8>),
    /// The records from the first key (inclusive) to the second (exclusive).
    Range(Vec<u8>, Vec<u8>),
}

/// What [`LiveHoldings::lacking`] found: the key ranges to read and how many records it
/// leaves out (covered by the holding) past the page's start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lacking {
    /// Key ranges, ascending, all after the page's start.
    pub lacks: Vec<Lack>,
    /// Records here after the page's start that the holding covers, for each entry of
    /// `lacks` the ones before it (index `i`: those between `lacks[i-1]` and `lacks[i]`),
    /// and one more for those after the last.
    pub covered_before: Vec<u64>,
}

/// What [`LiveHoldings::read`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The segment is kept ([`LiveHoldings::holding`]).
    Kept,
    /// Its holding, not kept: the budget is spent.
    NotKept(SegmentHolding),
    /// It is beyond [`super::holding`]'s limits (its holding is `None`; noted until a
    /// record of it is removed).
    TooLarge,
    /// A record is one a holding does not list exactly (a key that does not parse, a kind
    /// it does not list, a slot at `u64::MAX`, a snapshot that does not decode).
    Inexact,
}

/// The holdings of the segments read so far; see the module docs.
#[derive(Debug)]
pub struct LiveHoldings {
    segments: HashMap<u16, Segment>,
    /// Segments found beyond the limits, until a record of theirs is removed.
    too_large: std::collections::HashSet<u16>,
    size: usize,
    budget: usize,
    /// The next segment [`LiveHoldings::warm`] reads (`None`: every segment was read once).
    warm_next: Option<u16>,
}

impl Default for LiveHoldings {
    fn default() -> Self {
        LiveHoldings::new(DEFAULT_BUDGET_BYTES)
    }
}

impl LiveHoldings {
    /// None kept yet; at most `budget` bytes of holdings kept.
    pub fn new(budget: usize) -> Self {
        LiveHoldings {
            segments: HashMap::new(),
            too_large: std::collections::HashSet::new(),
            size: 0,
            budget,
            warm_next: Some(0),
        }
    }

    /// Reads segments not kept yet, in order from where the last call stopped, until
    /// about `budget` records were read (an empty segment counts as one: its seek) and
    /// keeps them; `may_hold` says which segments may hold records at all (the others
    /// are kept as empty without a read). Each segment is read once this way, after a
    /// start or a [`LiveHoldings::clear`]; returns the records read.
    ///
    /// So a replica has its holdings in memory before a ring change asks for them: a node
    /// restarted on its disk reads them while it joins, a little each tick, instead of all
    /// at once when the ring takes it in.
    ///
    /// # Errors
    /// The storage failed (the next call reads the same segment again).
    pub fn warm<S: KvStorage>(
        &mut self,
        st: &mut S,
        budget: usize,
        may_hold: impl Fn(u16) -> bool,
    ) -> Result<usize, StorageError> {
        let mut read = 0usize;
        while read < budget {
            let Some(s) = self.warm_next else {
                break;
            };
            if s >= crate::kv::ring::SEGMENTS {
                self.warm_next = None;
                break;
            }
            if !self.keeps(s) && !self.known_too_large(s) {
                if may_hold(s) {
                    read = read.saturating_add(self.read(st, s)?.0.max(1));
                } else if self.size.saturating_add(4) <= self.budget {
                    self.segments.insert(s, Segment::default());
                }
            }
            self.warm_next = s.checked_add(1);
        }
        Ok(read)
    }

    /// Segments kept.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    /// True if no segment is kept.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// True if `segment` is kept (its holding needs no read).
    pub fn keeps(&self, segment: u16) -> bool {
        self.segments.contains_key(&segment)
    }

    /// True if `segment` was found beyond [`super::holding`]'s limits and nothing of it was
    /// removed since: its holding is `None` without a read.
    pub fn known_too_large(&self, segment: u16) -> bool {
        self.too_large.contains(&segment)
    }

    /// Forgets everything (a commit failed: the storage may have dropped writes noted).
    pub fn clear(&mut self) {
        self.segments.clear();
        self.too_large.clear();
        self.size = 0;
        self.warm_next = Some(0);
    }

    /// Notes a write (`Some(value)`) or a removal (`None`) of the journal record `k` of
    /// `segment`, done in the storage.
    pub fn noted(&mut self, segment: u16, k: &[u8], value: Option<&[u8]>) {
        if value.is_none() {
            self.too_large.remove(&segment);
        }
        let Some(s) = self.segments.get_mut(&segment) else {
            return;
        };
        let before = s.size;
        let ok = s.apply(k, value).is_ok();
        self.size = (self.size + s.size).saturating_sub(before);
        if !ok || !s.within_limits() || self.size > self.budget {
            self.drop_segment(segment);
        }
    }

    /// Forgets `segment` (a write of it failed, or it cannot be kept).
    pub fn drop_segment(&mut self, segment: u16) {
        if let Some(s) = self.segments.remove(&segment) {
            self.size = self.size.saturating_sub(s.size);
        }
    }

    /// Reads `segment` from `st` and keeps it if it can be (within the limits and the
    /// budget). Returns the records read and what was found.
    ///
    /// # Errors
    /// The storage failed.
    pub fn read<S: KvStorage>(
        &mut self,
        st: &mut S,
        segment: u16,
    ) -> Result<(usize, Read), StorageError> {
        const SCAN: usize = 256;
        let mut s = Segment::default();
        let mut after: Option<Vec<u8>> = None;
        let mut read = 0usize;
        loop {
            let records = segment_records(st, segment, after.as_deref(), SCAN)?;
            read += records.len();
            for (k, v) in &records {
                if s.apply(k, Some(v)).is_err() {
                    return Ok((read, Read::Inexact));
                }
            }
            if !s.within_limits() {
                self.too_large.insert(segment);
                return Ok((read, Read::TooLarge));
            }
            if records.len() < SCAN {
                break;
            }
            after = records.last().map(|(k, _)| k.clone());
        }
        self.too_large.remove(&segment);
        self.drop_segment(segment);
        if self.size.saturating_add(s.size) > self.budget {
            return Ok((read, Read::NotKept(s.holding(segment))));
        }
        self.size += s.size;
        self.segments.insert(segment, s);
        Ok((read, Read::Kept))
    }

    /// The holding of `segment` if it is kept (`None`: not kept).
    pub fn holding(&self, segment: u16) -> Option<SegmentHolding> {
        self.segments.get(&segment).map(|s| s.holding(segment))
    }

    /// The records of kept `segment` after key `after` (`None`: from its start) that a
    /// replica holding `theirs` lacks ([`SegmentHolding::covers`]): every state record; the
    /// entries at slots it lacks or holds at a lower ballot; its missing marks; a snapshot
    /// newer than its own. `None` if `segment` is not kept or `after` is not a key of it.
    pub fn lacking(
        &self,
        segment: u16,
        theirs: &SegmentHolding,
        after: Option<&[u8]>,
    ) -> Option<Lacking> {
        let s = self.segments.get(&segment)?;
        let after = match after {
            Some(a) => {
                let (seg, log, kind, seq) = parse_key(a)?;
                if seg != segment || key(log, kind, seq) != a {
                    return None;
                }
                Some((log.to_string(), kind, seq))
            }
            None => None,
        };
        let mut out = Lacking {
            lacks: Vec::new(),
            covered_before: vec![0],
        };
        let from = after.as_ref().map_or("", |(l, ..)| l.as_str());
        for (log, l) in s
            .logs
            .range::<str, _>((std::ops::Bound::Included(from), std::ops::Bound::Unbounded))
        {
            // Slots of `kind` past the page's start: from this one on.
            let first_after = |kind: u8| -> Option<u64> {
                match &after {
                    Some((al, ak, aseq)) if al == log => match kind.cmp(ak) {
                        std::cmp::Ordering::Less => None,
                        std::cmp::Ordering::Equal => aseq.checked_add(1),
                        std::cmp::Ordering::Greater => Some(0),
                    },
                    _ => Some(0),
                }
            };
            let held = theirs
                .logs
                .binary_search_by(|h| h.log.as_str().cmp(log))
                .ok()
                .map(|i| &theirs.logs[i]);
            let lack = |out: &mut Lacking, kind: u8, from: u64, to: u64, lacks: bool| {
                let Some(start) = first_after(kind) else {
                    return;
                };
                let from = from.max(start);
                if from >= to {
                    return;
                }
                if lacks {
                    out.lacks
                        .push(if kind == KIND_ENTRY || kind == KIND_INDEXED {
                            Lack::Range(key(log, kind, from), key(log, kind, to))
                        } else {
                            Lack::Record(key(log, kind, from))
                        });
                    out.covered_before.push(0);
                } else if let Some(c) = out.covered_before.last_mut() {
                    *c += to - from;
                }
            };
            if l.state {
                lack(&mut out, KIND_STATE, 0, 1, true);
            }
            let their_entries: Vec<(u64, u64, Ballot)> = held
                .map(|h| h.entries.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|r| (r.first, r.count, r.ballot))
                .collect();
            let missing = lacking(&l.entries, &their_entries, |own, their| own <= their);
            for_each_part(&l.entries, &missing, |a, b, lacks| {
                lack(&mut out, KIND_ENTRY, a, b, lacks)
            });
            if l.snapshot {
                let covered =
                    held.is_some_and(|h| h.snapshot_seq > 0 && l.snapshot_seq <= h.snapshot_seq);
                lack(&mut out, KIND_SNAPSHOT, 0, 1, !covered);
            }
            let their_marks: Vec<(u64, u64, Ballot)> = held
                .map(|h| h.marks.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|r| (r.first, r.count, Ballot::default()))
                .collect();
            let missing = lacking(&l.marks, &their_marks, |_, _| true);
            for_each_part(&l.marks, &missing, |a, b, lacks| {
                lack(&mut out, KIND_INDEXED, a, b, lacks)
            });
        }
        Some(out)
    }
}

#[cfg(test)]
#[path = "live_holdings_tests.rs"]
mod tests;
