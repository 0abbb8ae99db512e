//! The replicated journal's codec ([`JournalCodec`]): the core's [`JournalMessage`]s to and
//! from the `Journal*` protobuf messages of `journal.proto`, one manifest per message
//! type. Entries and snapshots are validated when decoded; a peer's bytes never panic the
//! node.

use bytes::Bytes;
use concord_core::address::Address;
use concord_core::persistence::journal::handoff::{Need, MAX_NEEDS, MAX_NEED_ADDRESSES};
use concord_core::persistence::journal::standing::Standing;
use concord_core::persistence::journal::{
    Ballot, Entry, JournalMessage, StoredSnapshot, UnableReason,
};
use prost::Message;

use crate::remote::wire;
use crate::remote::{Codec, DecodeError};

/// The journal's manifests.
pub mod manifest {
    /// `JournalPrepare`.
    pub const PREPARE: u32 = 1;
    /// `JournalPromise`.
    pub const PROMISE: u32 = 2;
    /// `JournalAccept`.
    pub const ACCEPT: u32 = 3;
    /// `JournalRequestId` (accepted).
    pub const ACCEPTED: u32 = 4;
    /// `JournalNack`.
    pub const NACK: u32 = 5;
    /// `JournalRead`.
    pub const READ: u32 = 6;
    /// `JournalReadReply`.
    pub const READ_REPLY: u32 = 7;
    /// `JournalSnapshot` (save).
    pub const SAVE_SNAPSHOT: u32 = 8;
    /// `JournalSnapshot` (load).
    pub const LOAD_SNAPSHOT: u32 = 9;
    /// `JournalSnapshot` (reply).
    pub const SNAPSHOT_REPLY: u32 = 10;
    /// `JournalDelete`.
    pub const DELETE: u32 = 11;
    /// `JournalRequestId` (done).
    pub const DONE: u32 = 12;
    /// `JournalRequestId` (unable).
    pub const UNABLE: u32 = 13;
    /// `JournalHandoff`.
    pub const HANDOFF: u32 = 14;
    /// `JournalHandoffAck`.
    pub const HANDOFF_ACK: u32 = 15;
    /// `JournalHandoffEmpty` (empty handoff).
    pub const HANDOFF_EMPTY: u32 = 16;
    /// `JournalSegments` (its acknowledgement).
    pub const HANDOFF_EMPTY_ACK: u32 = 17;
    /// `JournalHandoffWanted` (segments wanted, and what the new replica holds of them).
    pub const HANDOFF_WANTED: u32 = 18;
    /// `JournalLearn`.
    pub const LEARN: u32 = 19;
    /// `JournalRequestId` (a learn's acknowledgement).
    pub const LEARN_ACK: u32 = 20;
    /// `JournalStreamRead`.
    pub const STREAM_READ: u32 = 21;
    /// `JournalStreamReply`.
    pub const STREAM_REPLY: u32 = 22;
    /// `JournalGiveUp`.
    pub const GIVE_UP: u32 = 23;
}

/// The codec of [`concord_core::ProtocolId::JOURNAL`].
#[derive(Clone, Copy, Debug, Default)]
pub struct JournalCodec;

fn ballot_to(b: Ballot) -> Option<wire::JournalBallot> {
    Some(wire::JournalBallot {
        round: b.round,
        node: b.node,
    })
}

fn ballot_from(b: Option<wire::JournalBallot>) -> Ballot {
    b.map_or(Ballot::ZERO, |b| Ballot {
        round: b.round,
        node: b.node,
    })
}

fn entries_to(es: &[Entry]) -> Vec<wire::JournalEntry> {
    es.iter()
        .map(|e| wire::JournalEntry {
            first_seq: e.first_seq,
            record: e.encode().into(),
        })
        .collect()
}

fn entries_from(es: Vec<wire::JournalEntry>) -> Result<Vec<Entry>, DecodeError> {
    es.into_iter()
        .map(|e| {
            Entry::decode(e.first_seq, &e.record)
                .map_err(|m| DecodeError::Invalid(format!("journal entry: {m}")))
        })
        .collect()
}

fn segment(s: u32) -> Result<u16, DecodeError> {
    u16::try_from(s)
        .ok()
        .filter(|s| *s < concord_core::kv::SEGMENTS)
        .ok_or_else(|| DecodeError::Invalid(format!("segment {s}")))
}

fn standing_to(s: Standing) -> i32 {
    (match s {
        Standing::Incomplete => wire::JournalStanding::Incomplete,
        Standing::Complete => wire::JournalStanding::Complete,
    }) as i32
}

fn need_to(segment: u16, n: &Need) -> wire::JournalNeed {
    let text =
        |set: &std::collections::BTreeSet<Address>| set.iter().map(|a| a.to_string()).collect();
    wire::JournalNeed {
        segment: u32::from(segment),
        previous: text(&n.previous),
        required: u32::try_from(n.required).unwrap_or(u32::MAX),
        delivered: text(&n.delivered),
        partial: text(&n.partial),
    }
}

/// The needs of a handoff message for `segments` segments: at most [`MAX_NEEDS`] per
/// segment, each bounded ([`Need::is_bounded`]), every address well-formed.
fn needs_from(
    needs: Vec<wire::JournalNeed>,
    segments: usize,
) -> Result<Vec<(u16, Need)>, DecodeError> {
    if needs.len() > MAX_NEEDS.saturating_mul(segments) {
        return Err(DecodeError::Invalid(format!("{} needs", needs.len())));
    }
    let set = |v: Vec<String>| -> Result<std::collections::BTreeSet<Address>, DecodeError> {
        if v.len() > MAX_NEED_ADDRESSES {
            return Err(DecodeError::Invalid(format!(
                "{} addresses in a need",
                v.len()
            )));
        }
        v.iter()
            .map(|a| {
                a.parse::<Address>()
                    .map_err(|e| DecodeError::Invalid(format!("need address {a:?}: {e}")))
            })
            .collect()
    };
    needs
        .into_iter()
        .map(|m| {
            let n = Need {
                previous: set(m.previous)?,
                required: usize::try_from(m.required).unwrap_or(usize::MAX),
                delivered: set(m.delivered)?,
                partial: set(m.partial)?,
            };
            if !n.is_bounded() {
                return Err(DecodeError::Invalid(format!(
                    "need of {} from {} replicas",
                    n.required,
                    n.previous.len()
                )));
            }
            Ok((segment(m.segment)?, n))
        })
        .collect()
}

fn standing_from(s: i32) -> Result<Standing, DecodeError> {
    match wire::JournalStanding::try_from(s) {
        Ok(wire::JournalStanding::Incomplete) => Ok(Standing::Incomplete),
        Ok(wire::JournalStanding::Complete) => Ok(Standing::Complete),
        Err(_) => Err(DecodeError::Invalid(format!("standing {s}"))),
    }
}

fn slice(s: u32) -> Result<u16, DecodeError> {
    u16::try_from(s)
        .ok()
        .filter(|s| *s < concord_core::persistence::NUMBER_OF_SLICES)
        .ok_or_else(|| DecodeError::Invalid(format!("slice {s}")))
}

fn snapshot_from(b: Option<Bytes>) -> Result<Option<StoredSnapshot>, DecodeError> {
    b.map(|b| {
        StoredSnapshot::decode(&b).map_err(|m| DecodeError::Invalid(format!("snapshot: {m}")))
    })
    .transpose()
}

fn invalid(e: prost::DecodeError) -> DecodeError {
    DecodeError::Invalid(e.to_string())
}

impl Codec for JournalCodec {
    type Message = JournalMessage;

    fn encode(&self, msg: &JournalMessage) -> (u32, Bytes) {
        use JournalMessage as M;
        let request_id = |request: u64, replicas: u64, unable_reason: u32| {
            wire::JournalRequestId {
                request,
                replicas,
                unable_reason,
            }
            .encode_to_vec()
        };
        let (m, bytes) = match msg {
            M::Prepare {
                request,
                log,
                ballot,
                from,
                max_events,
                snapshot,
            } => (
                manifest::PREPARE,
                wire::JournalPrepare {
                    request: *request,
                    log: log.clone(),
                    ballot: ballot_to(*ballot),
                    from: *from,
                    max_events: *max_events,
                    snapshot: *snapshot,
                }
                .encode_to_vec(),
            ),
            M::Promise {
                request,
                committed,
                page,
                page_from,
                covered_to,
                tail,
                snapshot,
                replicas,
            } => (
                manifest::PROMISE,
                wire::JournalPromise {
                    request: *request,
                    committed: *committed,
                    page: entries_to(page),
                    covered_to: *covered_to,
                    tail: entries_to(tail),
                    page_from: *page_from,
                    snapshot: snapshot.as_ref().map(|s| s.encode().into()),
                    replicas: *replicas,
                }
                .encode_to_vec(),
            ),
            M::Accept {
                request,
                log,
                ballot,
                committed,
                compact,
                writes,
            } => (
                manifest::ACCEPT,
                wire::JournalAccept {
                    request: *request,
                    log: log.clone(),
                    ballot: ballot_to(*ballot),
                    committed: *committed,
                    compact: *compact,
                    writes: entries_to(writes),
                }
                .encode_to_vec(),
            ),
            M::Accepted { request, replicas } => {
                (manifest::ACCEPTED, request_id(*request, *replicas, 0))
            }
            M::Done { request, replicas } => (manifest::DONE, request_id(*request, *replicas, 0)),
            M::Unable { request, reason } => {
                (manifest::UNABLE, request_id(*request, 0, reason.code()))
            }
            M::Nack { request, promised } => (
                manifest::NACK,
                wire::JournalNack {
                    request: *request,
                    promised: ballot_to(*promised),
                }
                .encode_to_vec(),
            ),
            M::Read {
                request,
                log,
                from,
                max_events,
            } => (
                manifest::READ,
                wire::JournalRead {
                    request: *request,
                    log: log.clone(),
                    from: *from,
                    max_events: *max_events,
                }
                .encode_to_vec(),
            ),
            M::ReadReply {
                request,
                page,
                covered_to,
                replicas,
            } => (
                manifest::READ_REPLY,
                wire::JournalReadReply {
                    request: *request,
                    page: entries_to(page),
                    covered_to: *covered_to,
                    replicas: *replicas,
                }
                .encode_to_vec(),
            ),
            M::SaveSnapshot {
                request,
                log,
                snapshot,
            } => (
                manifest::SAVE_SNAPSHOT,
                wire::JournalSnapshot {
                    request: *request,
                    log: log.clone(),
                    snapshot: Some(snapshot.encode().into()),
                    replicas: 0,
                }
                .encode_to_vec(),
            ),
            M::LoadSnapshot { request, log } => (
                manifest::LOAD_SNAPSHOT,
                wire::JournalSnapshot {
                    request: *request,
                    log: log.clone(),
                    snapshot: None,
                    replicas: 0,
                }
                .encode_to_vec(),
            ),
            M::SnapshotReply {
                request,
                snapshot,
                replicas,
            } => (
                manifest::SNAPSHOT_REPLY,
                wire::JournalSnapshot {
                    request: *request,
                    log: String::new(),
                    snapshot: snapshot.as_ref().map(|s| s.encode().into()),
                    replicas: *replicas,
                }
                .encode_to_vec(),
            ),
            M::Delete { request, log, to } => (
                manifest::DELETE,
                wire::JournalDelete {
                    request: *request,
                    log: log.clone(),
                    to: *to,
                }
                .encode_to_vec(),
            ),
            M::Handoff {
                segment,
                page,
                records,
                last,
                standing,
                needs,
            } => (
                manifest::HANDOFF,
                wire::JournalHandoff {
                    segment: u32::from(*segment),
                    page: *page,
                    records: records
                        .iter()
                        .map(|(k, v)| wire::JournalRecord {
                            key: k.clone().into(),
                            value: v.clone().into(),
                        })
                        .collect(),
                    last: *last,
                    standing: standing_to(*standing),
                    needs: needs.iter().map(|n| need_to(0, n)).collect(),
                }
                .encode_to_vec(),
            ),
            M::HandoffAck { segment, page } => (
                manifest::HANDOFF_ACK,
                wire::JournalHandoffAck {
                    segment: u32::from(*segment),
                    page: *page,
                }
                .encode_to_vec(),
            ),
            M::HandoffEmpty { segments, needs } => (
                manifest::HANDOFF_EMPTY,
                wire::JournalHandoffEmpty {
                    segments: segments.iter().map(|(s, _)| u32::from(*s)).collect(),
                    standings: segments.iter().map(|(_, t)| standing_to(*t)).collect(),
                    needs: needs.iter().map(|(s, n)| need_to(*s, n)).collect(),
                }
                .encode_to_vec(),
            ),
            M::HandoffWanted { segments, held } => (
                manifest::HANDOFF_WANTED,
                holding_codec::encode(segments, held),
            ),
            M::HandoffEmptyAck { segments } => (
                manifest::HANDOFF_EMPTY_ACK,
                wire::JournalSegments {
                    segments: segments.iter().map(|s| u32::from(*s)).collect(),
                }
                .encode_to_vec(),
            ),
            M::GiveUp { lost } => (manifest::GIVE_UP, give_up_codec::encode(lost)),
            m @ (M::Learn { .. }
            | M::LearnAck { .. }
            | M::StreamRead { .. }
            | M::StreamReply { .. }) => stream_codec::encode(m),
        };
        (m, Bytes::from(bytes))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<JournalMessage, DecodeError> {
        use JournalMessage as M;
        let segments = |p: &[u8]| -> Result<Vec<u16>, DecodeError> {
            let m = wire::JournalSegments::decode(p).map_err(invalid)?;
            if m.segments.len() > usize::from(concord_core::kv::SEGMENTS) {
                return Err(DecodeError::Invalid("too many segments".into()));
            }
            m.segments.into_iter().map(segment).collect()
        };
        Ok(match manifest {
            manifest::PREPARE => {
                let m = wire::JournalPrepare::decode(payload).map_err(invalid)?;
                M::Prepare {
                    request: m.request,
                    log: m.log,
                    ballot: ballot_from(m.ballot),
                    from: m.from,
                    max_events: m.max_events,
                    snapshot: m.snapshot,
                }
            }
            manifest::PROMISE => {
                let m = wire::JournalPromise::decode(payload).map_err(invalid)?;
                M::Promise {
                    request: m.request,
                    committed: m.committed,
                    page: entries_from(m.page)?,
                    page_from: m.page_from,
                    covered_to: m.covered_to,
                    tail: entries_from(m.tail)?,
                    snapshot: snapshot_from(m.snapshot)?,
                    replicas: m.replicas,
                }
            }
            manifest::ACCEPT => {
                let m = wire::JournalAccept::decode(payload).map_err(invalid)?;
                M::Accept {
                    request: m.request,
                    log: m.log,
                    ballot: ballot_from(m.ballot),
                    committed: m.committed,
                    compact: m.compact,
                    writes: entries_from(m.writes)?,
                }
            }
            manifest::ACCEPTED => {
                let m = wire::JournalRequestId::decode(payload).map_err(invalid)?;
                M::Accepted {
                    request: m.request,
                    replicas: m.replicas,
                }
            }
            manifest::DONE => {
                let m = wire::JournalRequestId::decode(payload).map_err(invalid)?;
                M::Done {
                    request: m.request,
                    replicas: m.replicas,
                }
            }
            manifest::UNABLE => {
                let m = wire::JournalRequestId::decode(payload).map_err(invalid)?;
                M::Unable {
                    request: m.request,
                    reason: UnableReason::from_code(m.unable_reason),
                }
            }
            manifest::NACK => {
                let m = wire::JournalNack::decode(payload).map_err(invalid)?;
                M::Nack {
                    request: m.request,
                    promised: ballot_from(m.promised),
                }
            }
            manifest::READ => {
                let m = wire::JournalRead::decode(payload).map_err(invalid)?;
                M::Read {
                    request: m.request,
                    log: m.log,
                    from: m.from,
                    max_events: m.max_events,
                }
            }
            manifest::READ_REPLY => {
                let m = wire::JournalReadReply::decode(payload).map_err(invalid)?;
                M::ReadReply {
                    request: m.request,
                    page: entries_from(m.page)?,
                    covered_to: m.covered_to,
                    replicas: m.replicas,
                }
            }
            manifest::SAVE_SNAPSHOT => {
                let m = wire::JournalSnapshot::decode(payload).map_err(invalid)?;
                M::SaveSnapshot {
                    request: m.request,
                    log: m.log,
                    snapshot: snapshot_from(m.snapshot)?
                        .ok_or_else(|| DecodeError::Invalid("a save without a snapshot".into()))?,
                }
            }
            manifest::LOAD_SNAPSHOT => {
                let m = wire::JournalSnapshot::decode(payload).map_err(invalid)?;
                M::LoadSnapshot {
                    request: m.request,
                    log: m.log,
                }
            }
            manifest::SNAPSHOT_REPLY => {
                let m = wire::JournalSnapshot::decode(payload).map_err(invalid)?;
                M::SnapshotReply {
                    request: m.request,
                    snapshot: snapshot_from(m.snapshot)?,
                    replicas: m.replicas,
                }
            }
            manifest::DELETE => {
                let m = wire::JournalDelete::decode(payload).map_err(invalid)?;
                M::Delete {
                    request: m.request,
                    log: m.log,
                    to: m.to,
                }
            }
            manifest::HANDOFF => {
                let m = wire::JournalHandoff::decode(payload).map_err(invalid)?;
                M::Handoff {
                    segment: segment(m.segment)?,
                    page: m.page,
                    records: m
                        .records
                        .into_iter()
                        .map(|r| (r.key.to_vec(), r.value.to_vec()))
                        .collect(),
                    last: m.last,
                    standing: standing_from(m.standing)?,
                    needs: needs_from(m.needs, 1)?
                        .into_iter()
                        .map(|(_, n)| n)
                        .collect(),
                }
            }
            manifest::HANDOFF_ACK => {
                let m = wire::JournalHandoffAck::decode(payload).map_err(invalid)?;
                M::HandoffAck {
                    segment: segment(m.segment)?,
                    page: m.page,
                }
            }
            manifest::HANDOFF_EMPTY => {
                let m = wire::JournalHandoffEmpty::decode(payload).map_err(invalid)?;
                if m.segments.len() > usize::from(concord_core::kv::SEGMENTS)
                    || m.standings.len() != m.segments.len()
                {
                    return Err(DecodeError::Invalid(format!(
                        "{} segments, {} standings",
                        m.segments.len(),
                        m.standings.len()
                    )));
                }
                let n = m.segments.len();
                M::HandoffEmpty {
                    segments: m
                        .segments
                        .into_iter()
                        .zip(m.standings)
                        .map(|(s, t)| Ok((segment(s)?, standing_from(t)?)))
                        .collect::<Result<_, DecodeError>>()?,
                    needs: needs_from(m.needs, n)?,
                }
            }
            manifest::HANDOFF_WANTED => return holding_codec::decode(payload),
            manifest::HANDOFF_EMPTY_ACK => M::HandoffEmptyAck {
                segments: segments(payload)?,
            },
            manifest::GIVE_UP => return give_up_codec::decode(payload),
            manifest::LEARN
            | manifest::LEARN_ACK
            | manifest::STREAM_READ
            | manifest::STREAM_REPLY => return stream_codec::decode(manifest, payload),
            other => return Err(DecodeError::UnknownManifest(other)),
        })
    }
}

#[path = "codec_give_up.rs"]
mod give_up_codec;
#[path = "codec_holding.rs"]
mod holding_codec;
#[path = "codec_stream.rs"]
mod stream_codec;

#[cfg(test)]
#[path = "codec_tests.rs"]
pub(crate) mod tests;
