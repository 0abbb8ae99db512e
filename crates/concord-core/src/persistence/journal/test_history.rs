//! Random histories of a replica's journal records for property tests: writes (accepts,
//! snapshots) and removals (a durable state's compaction, deletes up to a slot), over three
//! logs of one segment.

use proptest::prelude::*;

use super::acceptor::{accept_and_learn, save_snapshot, segment_of_log};
use super::deletion::delete_to;
use super::entry::{Ballot, Entry, StoredSnapshot};
use crate::kv::storage::{KvStorage, MemoryStorage, Table};

/// Three logs of one segment (their records interleave with nothing else).
pub fn logs() -> (u16, Vec<String>) {
    let first = "et|0".to_string();
    let segment = segment_of_log(&first);
    let mut logs = vec![first];
    for i in 1.. {
        let log = format!("et|{i}");
        if segment_of_log(&log) == segment {
            logs.push(log);
            if logs.len() == 3 {
                break;
            }
        }
    }
    (segment, logs)
}

/// One change to a replica's records.
#[derive(Debug, Clone)]
pub enum Op {
    /// An accept of one write of `events` events at `round`, learned or not; `compact`:
    /// a durable state's (the slots before it are removed).
    Accept {
        log: usize,
        round: u64,
        first: u64,
        events: usize,
        committed: u64,
        learn: bool,
        compact: bool,
    },
    /// A snapshot kept.
    Snapshot { log: usize, seq: u64 },
    /// Committed entries deleted up to `to`.
    Delete { log: usize, to: u64 },
}

fn accept(compact: impl Strategy<Value = bool>) -> impl Strategy<Value = Op> {
    (
        0..3usize,
        1..4u64,
        1..24u64,
        1..3usize,
        0..24u64,
        any::<bool>(),
        compact,
    )
        .prop_map(
            |(log, round, first, events, committed, learn, compact)| Op::Accept {
                log,
                round,
                first,
                events,
                committed: committed.min(first),
                learn,
                compact,
            },
        )
}

fn snapshot() -> impl Strategy<Value = Op> {
    (0..3usize, 1..24u64).prop_map(|(log, seq)| Op::Snapshot { log, seq })
}

/// Writes only: accepts and snapshots (records only grow).
pub fn write() -> impl Strategy<Value = Op> {
    prop_oneof![4 => accept(Just(false)), 1 => snapshot()]
}

/// Writes and removals: one accept in 8 compacts, and deletes.
pub fn change() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => accept((0..8u8).prop_map(|c| c == 0)),
        1 => snapshot(),
        1 => (0..3usize, 1..24u64).prop_map(|(log, to)| Op::Delete { log, to }),
    ]
}

/// Applies `ops` to `st`.
pub fn apply<S: KvStorage>(st: &mut S, logs: &[String], ops: &[Op]) {
    for op in ops {
        match *op {
            Op::Accept {
                log,
                round,
                first,
                events,
                committed,
                learn,
                compact,
            } => {
                let ballot = Ballot { round, node: 7 };
                let w = Entry {
                    first_seq: first,
                    ballot,
                    timestamp_ms: 5,
                    events: (0..events).map(|i| vec![round as u8, i as u8]).collect(),
                };
                let at = learn.then_some(1_000 + first);
                accept_and_learn(st, 1, &logs[log], ballot, committed, compact, &[w], at).unwrap();
            }
            Op::Snapshot { log, seq } => save_snapshot(
                st,
                &logs[log],
                &StoredSnapshot {
                    seq_nr: seq,
                    timestamp_ms: 9,
                    payload: vec![seq as u8; 4],
                },
            )
            .unwrap(),
            Op::Delete { log, to } => delete_to(st, &logs[log], to).unwrap(),
        }
    }
}

/// A write of one 100-byte event at slot `seq` of `log`, accepted at `ballot` and learned,
/// the slots before it committed.
pub fn learned_write<S: KvStorage>(st: &mut S, log: &str, ballot: Ballot, seq: u64) {
    let w = Entry {
        first_seq: seq,
        ballot,
        timestamp_ms: 5,
        events: vec![vec![1; 100]],
    };
    accept_and_learn(st, 1, log, ballot, seq - 1, false, &[w], Some(seq)).unwrap();
}

/// Every record of the journal's tables.
pub fn dump(st: &mut MemoryStorage) -> Vec<(Table, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for t in [Table::Journal, Table::JournalIndex] {
        for (k, v) in st.range(t, &[], &[0xff; 8], usize::MAX).unwrap() {
            out.push((t, k, v));
        }
    }
    out
}
