//! What a replica already holds of a segment, sent with its [`HandoffWanted`] so that the
//! replicas handing the segment to it send only what it lacks: a node restarted with its
//! disk (a rolling upgrade, a crash) lacks only the writes made while it was away, not the
//! whole segment.
//!
//! A [`SegmentHolding`] lists, per log, the runs of entry slots the replica holds with the
//! lowest ballot of each run, the slots of its stream marks, and its snapshot's sequence
//! number. A sender skips a record exactly when merging it into that holding would change
//! nothing ([`super::acceptor::merge_record`]): an entry whose ballot is not higher than the
//! one held at its slot, a mark the replica has, a snapshot not newer than its own. Records
//! only grow on a replica (a higher ballot replaces an entry; only a committed prefix is
//! ever deleted), so a holding stays a lower bound of what its replica holds, and the copy
//! after a handoff that skipped by it is the copy a full handoff would have left — which
//! is why the waits, standings and needs of [`super::handoff`] need no change. State
//! records (promise, committed prefix) are always sent. A holding that is lost, too large
//! or never sent (a node of an earlier version) only means a full copy, as before.
//!
//! The idea is Dynamo's and Riak's anti-entropy (compare what each side holds, move only
//! the difference); the comparison here is exact rather than by Merkle tree because a
//! journal's records are runs of slots with one ballot.
//!
//! [`HandoffWanted`]: super::message::JournalMessage::HandoffWanted

use super::acceptor::{parse_key, segment_records, KIND_ENTRY, KIND_INDEXED, KIND_SNAPSHOT};
use super::entry::{Ballot, Entry, StoredSnapshot};
use crate::kv::storage::{KvStorage, StorageError};

/// Runs (entry runs plus mark runs) one segment's holding lists, at most: a copy more
/// fragmented than this is handed over whole.
pub const MAX_RUNS: usize = 4_096;
/// Logs one segment's holding lists, at most (beyond: handed over whole).
pub const MAX_LOGS: usize = 4_096;
/// Encoded bytes of one segment's holding, about, at most (beyond: handed over whole), so
/// that a [`HandoffWanted`](super::message::JournalMessage::HandoffWanted) carrying it
/// fits in one frame of the ordinary lane.
pub const MAX_BYTES: usize = 96 * 1024;
/// How long a sender holds back the first page of a segment for a new replica that has
/// not sent its holding yet, ms. It asks as soon as its wait begins, but tells its
/// holding to one replica it waits for at a time (the next once that one delivered, or
/// after 2 s: `super::ask`), and a node restarted on a large journal first reads its
/// holdings of the segments it waits for that it has not read ahead. At 500 ms (until
/// 2026-12-07) senders sent whole copies meanwhile: in the rolling upgrade about 30 % more
/// records per request served than with 5 s (docs/BENCHMARKS.md).
pub const WAIT_MS: u64 = 5_000;
/// How long a node that left the ring holds back the first page of a segment it hands to
/// the segment's replicas (`super::handoff::Handoffs::send_misplaced`) for their holding,
/// ms. They tell it once they no longer wait there themselves — a replica new to the
/// segment first takes the copies of the replicas that stay, and then lacks little or
/// nothing of the leaving node's — so this is longer than [`WAIT_MS`]; it stays well
/// within coordinated shutdown's 10 s for the leaving node's handoffs.
pub const DEPARTED_WAIT_MS: u64 = 5_000;

/// Entries at slots `first .. first + count` (each slot a key of its own), each accepted
/// at `ballot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRun {
    /// The first slot.
    pub first: u64,
    /// Slots in the run (at least 1).
    pub count: u64,
    /// The ballot of the run's entries.
    pub ballot: Ballot,
}

/// Marks at slots `first .. first + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotRun {
    /// The first slot.
    pub first: u64,
    /// Slots in the run (at least 1).
    pub count: u64,
}

/// What a replica holds of one log.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogHolding {
    /// The log (a persistence id, or a queue's name).
    pub log: String,
    /// Its entries, by ascending slot, runs not overlapping (a new run where the ballot
    /// changes or a slot is missing).
    pub entries: Vec<EntryRun>,
    /// Its stream marks ([`super::stream`]), by ascending slot.
    pub marks: Vec<SlotRun>,
    /// Its snapshot's sequence number (0: none).
    pub snapshot_seq: u64,
}

/// What a replica holds of one segment: its logs by ascending name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SegmentHolding {
    /// The segment.
    pub segment: u16,
    /// The logs with a record there.
    pub logs: Vec<LogHolding>,
}

impl SegmentHolding {
    /// Runs listed (entries and marks).
    pub fn runs(&self) -> usize {
        self.logs
            .iter()
            .map(|l| l.entries.len() + l.marks.len())
            .sum()
    }

    /// About how many bytes it takes encoded.
    pub fn size(&self) -> usize {
        4 + self
            .logs
            .iter()
            .map(|l| 16 + l.log.len() + 32 * l.entries.len() + 16 * l.marks.len())
            .sum::<usize>()
    }

    /// True if it is well formed: logs by ascending name, runs by ascending slot without
    /// overlap or an empty run, within [`MAX_LOGS`] and [`MAX_RUNS`]. A sender ignores one
    /// that is not (and hands the segment over whole).
    pub fn is_valid(&self) -> bool {
        fn ascending(runs: impl Iterator<Item = (u64, u64)>) -> bool {
            let mut next = 0u64;
            for (first, count) in runs {
                if count == 0 || first < next {
                    return false;
                }
                match first.checked_add(count) {
                    Some(n) => next = n,
                    None => return false,
                }
            }
            true
        }
        self.logs.len() <= MAX_LOGS
            && self.runs() <= MAX_RUNS
            && self.logs.windows(2).all(|w| w[0].log < w[1].log)
            && self.logs.iter().all(|l| {
                ascending(l.entries.iter().map(|r| (r.first, r.count)))
                    && ascending(l.marks.iter().map(|r| (r.first, r.count)))
            })
    }

    /// True if merging the record (`key`, `value`) of this segment into the replica that
    /// holds this would change nothing there ([`super::acceptor::merge_record`]), so that
    /// it need not be sent. A record that does not parse, a state record or one of another
    /// kind is never covered.
    pub fn covers(&self, key: &[u8], value: &[u8]) -> bool {
        let Some((_, log, kind, seq)) = parse_key(key) else {
            return false;
        };
        let Ok(i) = self.logs.binary_search_by(|l| l.log.as_str().cmp(log)) else {
            return false;
        };
        let held = &self.logs[i];
        match kind {
            KIND_ENTRY => {
                let Ok((ballot, _)) = Entry::head_of(value) else {
                    return false;
                };
                run_at(&held.entries, seq, |r| (r.first, r.count))
                    .is_some_and(|r| ballot <= r.ballot)
            }
            KIND_INDEXED => run_at(&held.marks, seq, |r| (r.first, r.count)).is_some(),
            KIND_SNAPSHOT => StoredSnapshot::decode(value)
                .is_ok_and(|s| held.snapshot_seq > 0 && s.seq_nr <= held.snapshot_seq),
            _ => false,
        }
    }
}

/// The run of `runs` (ascending) that holds `slot`.
fn run_at<R>(runs: &[R], slot: u64, span: impl Fn(&R) -> (u64, u64)) -> Option<&R> {
    let k = runs.partition_point(|r| span(r).0 <= slot);
    let r = runs.get(k.checked_sub(1)?)?;
    let (first, count) = span(r);
    (slot - first < count).then_some(r)
}

/// What this replica holds of `segment`, read from its storage; `None` if it is larger
/// than [`MAX_RUNS`], [`MAX_LOGS`] or [`MAX_BYTES`] allow (its senders then send it
/// whole).
///
/// # Errors
/// The storage failed.
pub fn summarize<S: KvStorage>(
    st: &mut S,
    segment: u16,
) -> Result<Option<SegmentHolding>, StorageError> {
    const SCAN: usize = 256;
    let mut holding = SegmentHolding {
        segment,
        logs: Vec::new(),
    };
    let mut after: Option<Vec<u8>> = None;
    loop {
        let records = segment_records(st, segment, after.as_deref(), SCAN)?;
        let n = records.len();
        for (k, v) in &records {
            let Some((_, log, kind, seq)) = parse_key(k) else {
                continue;
            };
            if holding.logs.last().is_none_or(|l| l.log != log) {
                if holding.logs.len() >= MAX_LOGS {
                    return Ok(None);
                }
                holding.logs.push(LogHolding {
                    log: log.to_string(),
                    ..LogHolding::default()
                });
            }
            let Some(held) = holding.logs.last_mut() else {
                continue;
            };
            match kind {
                KIND_ENTRY => {
                    let Ok((ballot, _)) = Entry::head_of(v) else {
                        continue;
                    };
                    match held.entries.last_mut() {
                        Some(r)
                            if r.ballot == ballot && r.first.checked_add(r.count) == Some(seq) =>
                        {
                            r.count += 1;
                        }
                        _ => held.entries.push(EntryRun {
                            first: seq,
                            count: 1,
                            ballot,
                        }),
                    }
                }
                KIND_INDEXED => match held.marks.last_mut() {
                    Some(r) if r.first.checked_add(r.count) == Some(seq) => r.count += 1,
                    _ => held.marks.push(SlotRun {
                        first: seq,
                        count: 1,
                    }),
                },
                KIND_SNAPSHOT => {
                    if let Ok(s) = StoredSnapshot::decode(v) {
                        held.snapshot_seq = s.seq_nr;
                    }
                }
                _ => {}
            }
        }
        if holding.runs() > MAX_RUNS || holding.size() > MAX_BYTES {
            return Ok(None);
        }
        if n < SCAN {
            return Ok(Some(holding));
        }
        after = records.last().map(|(k, _)| k.clone());
    }
}

#[cfg(test)]
#[path = "holding_tests.rs"]
mod tests;
