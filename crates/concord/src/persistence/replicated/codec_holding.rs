//! [`JournalMessage::HandoffWanted`] to and from `JournalHandoffWanted` (manifest
//! [`super::manifest::HANDOFF_WANTED`]): the segments wanted, and what the new replica
//! holds of some of them ([`concord_core::persistence::journal::holding`]). An earlier
//! version's `JournalSegments` is the same message without the holdings.

use concord_core::kv::SEGMENTS;
use concord_core::persistence::journal::holding::{
    EntryRun, LogHolding, SegmentHolding, SlotRun, MAX_LOGS, MAX_RUNS,
};
use concord_core::persistence::journal::JournalMessage;
use prost::Message;

use super::{ballot_from, ballot_to, segment};
use crate::remote::wire;
use crate::remote::DecodeError;

pub(super) fn encode(segments: &[u16], held: &[SegmentHolding]) -> Vec<u8> {
    wire::JournalHandoffWanted {
        segments: segments.iter().map(|s| u32::from(*s)).collect(),
        held: held
            .iter()
            .map(|h| wire::JournalSegmentHolding {
                segment: u32::from(h.segment),
                logs: h
                    .logs
                    .iter()
                    .map(|l| wire::JournalLogHolding {
                        log: l.log.clone(),
                        entries: l
                            .entries
                            .iter()
                            .map(|r| wire::JournalEntryRun {
                                first: r.first,
                                count: r.count,
                                ballot: ballot_to(r.ballot),
                            })
                            .collect(),
                        marks: l
                            .marks
                            .iter()
                            .map(|r| wire::JournalSlotRun {
                                first: r.first,
                                count: r.count,
                            })
                            .collect(),
                        snapshot_seq: l.snapshot_seq,
                    })
                    .collect(),
            })
            .collect(),
    }
    .encode_to_vec()
}

pub(super) fn decode(payload: &[u8]) -> Result<JournalMessage, DecodeError> {
    let m = wire::JournalHandoffWanted::decode(payload).map_err(super::invalid)?;
    let limit = usize::from(SEGMENTS);
    if m.segments.len() > limit || m.held.len() > limit {
        return Err(DecodeError::Invalid("too many segments".into()));
    }
    let segments = m
        .segments
        .into_iter()
        .map(segment)
        .collect::<Result<_, _>>()?;
    let mut held = Vec::with_capacity(m.held.len());
    for h in m.held {
        if h.logs.len() > MAX_LOGS {
            return Err(DecodeError::Invalid(format!(
                "a holding of {} logs",
                h.logs.len()
            )));
        }
        let runs: usize = h.logs.iter().map(|l| l.entries.len() + l.marks.len()).sum();
        if runs > MAX_RUNS {
            return Err(DecodeError::Invalid(format!("a holding of {runs} runs")));
        }
        held.push(SegmentHolding {
            segment: segment(h.segment)?,
            logs: h
                .logs
                .into_iter()
                .map(|l| LogHolding {
                    log: l.log,
                    entries: l
                        .entries
                        .into_iter()
                        .map(|r| EntryRun {
                            first: r.first,
                            count: r.count,
                            ballot: ballot_from(r.ballot),
                        })
                        .collect(),
                    marks: l
                        .marks
                        .into_iter()
                        .map(|r| SlotRun {
                            first: r.first,
                            count: r.count,
                        })
                        .collect(),
                    snapshot_seq: l.snapshot_seq,
                })
                .collect(),
        });
    }
    Ok(JournalMessage::HandoffWanted { segments, held })
}
