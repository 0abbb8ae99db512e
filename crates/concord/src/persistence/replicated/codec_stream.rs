//! The codec of the journal's learns and stream reads (`JournalLearn`,
//! `JournalStreamRead`, `JournalStreamReply`; the acknowledgement is a
//! `JournalRequestId`): part of [`super::JournalCodec`].

use concord_core::persistence::journal::learn::LearnedLog;
use concord_core::persistence::journal::stream::{StreamEvent, MAX_STREAM_LIMIT};
use concord_core::persistence::journal::JournalMessage;
use concord_core::persistence::PersistenceId;
use prost::Message;

use super::{ballot_from, ballot_to, invalid, manifest, segment, slice};
use crate::remote::wire;
use crate::remote::DecodeError;

/// A learn, its acknowledgement or a stream read or reply: its manifest and bytes (the
/// journal's codec calls it with no other message; one would get manifest 0, unknown to
/// every peer).
pub(super) fn encode(msg: &JournalMessage) -> (u32, Vec<u8>) {
    use JournalMessage as M;
    let id = |request: u64| {
        wire::JournalRequestId {
            request,
            replicas: 0,
            unable_reason: 0,
        }
        .encode_to_vec()
    };
    match msg {
        M::Learn { id, logs } => (
            manifest::LEARN,
            wire::JournalLearn {
                id: *id,
                logs: logs
                    .iter()
                    .map(|l| wire::JournalLearnedLog {
                        log: l.log.clone(),
                        at_ms: l.at_ms,
                        writes: l
                            .writes
                            .iter()
                            .map(|(first_seq, b)| wire::JournalLearned {
                                first_seq: *first_seq,
                                ballot: ballot_to(*b),
                            })
                            .collect(),
                    })
                    .collect(),
            }
            .encode_to_vec(),
        ),
        M::LearnAck { id: learn } => (manifest::LEARN_ACK, id(*learn)),
        M::StreamRead {
            request,
            entity_type,
            slice_from,
            slice_to,
            after_at_ms,
            after_ordering,
            horizon_ms,
            limit,
        } => (
            manifest::STREAM_READ,
            wire::JournalStreamRead {
                request: *request,
                entity_type: entity_type.clone(),
                slice_from: u32::from(*slice_from),
                slice_to: u32::from(*slice_to),
                after_at_ms: *after_at_ms,
                after_ordering: *after_ordering,
                horizon_ms: *horizon_ms,
                limit: *limit,
            }
            .encode_to_vec(),
        ),
        M::StreamReply {
            request,
            segments,
            events,
            full,
        } => (
            manifest::STREAM_REPLY,
            wire::JournalStreamReply {
                request: *request,
                segments: segments.iter().map(|s| u32::from(*s)).collect(),
                events: events
                    .iter()
                    .map(|e| wire::JournalStreamEvent {
                        at_ms: e.at_ms,
                        ordering: e.ordering,
                        persistence_id: e.persistence_id.clone(),
                        seq_nr: e.seq_nr,
                        timestamp_ms: e.timestamp_ms,
                        payload: e.payload.clone().into(),
                    })
                    .collect(),
                full: *full,
            }
            .encode_to_vec(),
        ),
        _ => (0, Vec::new()),
    }
}

/// A learn, its acknowledgement or a stream read or reply from `payload`.
pub(super) fn decode(manifest: u32, payload: &[u8]) -> Result<JournalMessage, DecodeError> {
    use JournalMessage as M;
    let id = |p: &[u8]| {
        wire::JournalRequestId::decode(p)
            .map(|m| m.request)
            .map_err(invalid)
    };
    Ok(match manifest {
        manifest::LEARN => {
            let m = wire::JournalLearn::decode(payload).map_err(invalid)?;
            M::Learn {
                id: m.id,
                logs: m
                    .logs
                    .into_iter()
                    .map(|l| LearnedLog {
                        log: l.log,
                        at_ms: l.at_ms,
                        writes: l
                            .writes
                            .into_iter()
                            .map(|w| (w.first_seq, ballot_from(w.ballot)))
                            .collect(),
                    })
                    .collect(),
            }
        }
        manifest::LEARN_ACK => M::LearnAck { id: id(payload)? },
        manifest::STREAM_READ => {
            let m = wire::JournalStreamRead::decode(payload).map_err(invalid)?;
            let (slice_from, slice_to) = (slice(m.slice_from)?, slice(m.slice_to)?);
            if slice_from > slice_to || m.limit > MAX_STREAM_LIMIT {
                return Err(DecodeError::Invalid(format!(
                    "a stream read of slices {slice_from}..={slice_to}, limit {}",
                    m.limit
                )));
            }
            M::StreamRead {
                request: m.request,
                entity_type: m.entity_type,
                slice_from,
                slice_to,
                after_at_ms: m.after_at_ms,
                after_ordering: m.after_ordering,
                horizon_ms: m.horizon_ms,
                limit: m.limit,
            }
        }
        manifest::STREAM_REPLY => {
            let m = wire::JournalStreamReply::decode(payload).map_err(invalid)?;
            if m.segments.len() > usize::from(concord_core::kv::SEGMENTS) {
                return Err(DecodeError::Invalid("too many segments".into()));
            }
            let events = m
                .events
                .into_iter()
                .map(|e| {
                    PersistenceId::parse(&e.persistence_id).map_err(|err| {
                        DecodeError::Invalid(format!("a stream event's persistence id: {err}"))
                    })?;
                    Ok(StreamEvent {
                        at_ms: e.at_ms,
                        ordering: e.ordering,
                        persistence_id: e.persistence_id,
                        seq_nr: e.seq_nr,
                        timestamp_ms: e.timestamp_ms,
                        payload: e.payload.to_vec(),
                    })
                })
                .collect::<Result<Vec<_>, DecodeError>>()?;
            M::StreamReply {
                request: m.request,
                segments: m
                    .segments
                    .into_iter()
                    .map(segment)
                    .collect::<Result<_, _>>()?,
                events,
                full: m.full,
            }
        }
        other => return Err(DecodeError::UnknownManifest(other)),
    })
}
