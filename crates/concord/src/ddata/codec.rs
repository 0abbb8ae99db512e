//! The Distributed Data protocol's codec ([`ReplicatorCodec`]): the core's
//! [`ReplicatorMessage`]s to and from the `Dd*` protobuf messages of
//! `ddata.proto`, one manifest per message type ([`manifest`]). Values stay in
//! the CRDTs' own encoding inside. [`envelope_to_wire`] and [`envelope_from_wire`] are
//! also the durable store's record format. Decoding never panics.

use bytes::Bytes;
use concord_core::ddata::replicator::{
    DataTypeId, DeltaEntry, Digest, PruningState, ReplicatorMessage, SerializedEnvelope,
};
use concord_core::ddata::ReplicaId;
use prost::Message;

use crate::remote::address_wire::{
    address_from_wire, address_to_wire, unique_from_wire, unique_to_wire,
};
use crate::remote::wire;
use crate::remote::{Codec, DecodeError};

/// The Distributed Data manifests.
pub mod manifest {
    /// `DdRead`.
    pub const READ: u32 = 1;
    /// `DdReadResult`.
    pub const READ_RESULT: u32 = 2;
    /// `DdWrite`.
    pub const WRITE: u32 = 3;
    /// `DdRequest` (write ack).
    pub const WRITE_ACK: u32 = 4;
    /// `DdRequest` (write nack).
    pub const WRITE_NACK: u32 = 5;
    /// `DdDeltaPropagation`.
    pub const DELTA_PROPAGATION: u32 = 6;
    /// `DdDeltaNack`.
    pub const DELTA_NACK: u32 = 7;
    /// `DdStatus`.
    pub const STATUS: u32 = 8;
    /// `DdGossip`.
    pub const GOSSIP: u32 = 9;
}

/// The codec of [`concord_core::ProtocolId::DISTRIBUTED_DATA`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplicatorCodec;

fn pruning_to_wire(pruning: &[(ReplicaId, PruningState)]) -> Vec<wire::DdPruningState> {
    pruning
        .iter()
        .map(|(r, p)| wire::DdPruningState {
            removed_replica: r.0,
            state: Some(match p {
                PruningState::Initialized { owner, seen } => {
                    wire::dd_pruning_state::State::Initialized(wire::DdPruningInitialized {
                        owner: Some(unique_to_wire(owner)),
                        seen: seen.iter().map(address_to_wire).collect(),
                    })
                }
                PruningState::Performed { obsolete_at_ms } => {
                    wire::dd_pruning_state::State::PerformedObsoleteAtMs(*obsolete_at_ms)
                }
            }),
        })
        .collect()
}

fn pruning_from_wire(
    pruning: &[wire::DdPruningState],
) -> Result<Vec<(ReplicaId, PruningState)>, DecodeError> {
    let mut out = Vec::with_capacity(pruning.len());
    for p in pruning {
        let state = match p
            .state
            .as_ref()
            .ok_or(DecodeError::MissingField("pruning.state"))?
        {
            wire::dd_pruning_state::State::Initialized(i) => PruningState::Initialized {
                owner: unique_from_wire(
                    i.owner
                        .as_ref()
                        .ok_or(DecodeError::MissingField("pruning.owner"))?,
                )?,
                seen: i
                    .seen
                    .iter()
                    .map(address_from_wire)
                    .collect::<Result<_, _>>()?,
            },
            wire::dd_pruning_state::State::PerformedObsoleteAtMs(t) => {
                PruningState::Performed { obsolete_at_ms: *t }
            }
        };
        out.push((ReplicaId(p.removed_replica), state));
    }
    Ok(out)
}

/// The wire form of an envelope.
pub fn envelope_to_wire(e: &SerializedEnvelope) -> wire::DdEnvelope {
    wire::DdEnvelope {
        data_type: e.data_type.0,
        data: e.data.clone().map(Bytes::from),
        pruning: pruning_to_wire(&e.pruning),
        delta_versions: e
            .delta_versions
            .iter()
            .map(|(r, v)| wire::DdVersion {
                replica: r.0,
                version: *v,
            })
            .collect(),
    }
}

/// An envelope from its wire form.
///
/// # Errors
/// A pruning state without its state, or with an invalid address.
pub fn envelope_from_wire(e: &wire::DdEnvelope) -> Result<SerializedEnvelope, DecodeError> {
    let pruning = pruning_from_wire(&e.pruning)?;
    Ok(SerializedEnvelope {
        data_type: DataTypeId(e.data_type),
        data: e.data.as_ref().map(|d| d.to_vec()),
        pruning,
        delta_versions: e
            .delta_versions
            .iter()
            .map(|v| (ReplicaId(v.replica), v.version))
            .collect(),
    })
}

fn digest_parts(d: Digest) -> (u64, u64) {
    ((d.0 >> 64) as u64, d.0 as u64)
}

fn envelope_field(e: Option<&wire::DdEnvelope>) -> Result<SerializedEnvelope, DecodeError> {
    envelope_from_wire(e.ok_or(DecodeError::MissingField("envelope"))?)
}

impl Codec for ReplicatorCodec {
    type Message = ReplicatorMessage;

    fn encode(&self, msg: &ReplicatorMessage) -> (u32, Bytes) {
        let (m, bytes) = match msg {
            ReplicatorMessage::Read { request, key } => (
                manifest::READ,
                wire::DdRead {
                    request: *request,
                    key: key.clone(),
                }
                .encode_to_vec(),
            ),
            ReplicatorMessage::ReadResult { request, envelope } => (
                manifest::READ_RESULT,
                wire::DdReadResult {
                    request: *request,
                    envelope: envelope.as_ref().map(envelope_to_wire),
                }
                .encode_to_vec(),
            ),
            ReplicatorMessage::Write {
                request,
                key,
                envelope,
            } => (
                manifest::WRITE,
                wire::DdWrite {
                    request: request.unwrap_or(0),
                    key: key.clone(),
                    envelope: Some(envelope_to_wire(envelope)),
                }
                .encode_to_vec(),
            ),
            ReplicatorMessage::WriteAck { request } => (
                manifest::WRITE_ACK,
                wire::DdRequest { request: *request }.encode_to_vec(),
            ),
            ReplicatorMessage::WriteNack { request } => (
                manifest::WRITE_NACK,
                wire::DdRequest { request: *request }.encode_to_vec(),
            ),
            ReplicatorMessage::DeltaPropagation { deltas } => (
                manifest::DELTA_PROPAGATION,
                wire::DdDeltaPropagation {
                    deltas: deltas
                        .iter()
                        .map(|d| wire::DdDelta {
                            key: d.key.clone(),
                            data_type: d.data_type.0,
                            seq: d.seq,
                            full: d.full,
                            bytes: Bytes::from(d.bytes.clone()),
                            pruning: pruning_to_wire(&d.pruning),
                        })
                        .collect(),
                }
                .encode_to_vec(),
            ),
            ReplicatorMessage::DeltaNack { key } => (
                manifest::DELTA_NACK,
                wire::DdDeltaNack { key: key.clone() }.encode_to_vec(),
            ),
            ReplicatorMessage::Status {
                digests,
                chunk,
                total_chunks,
            } => (
                manifest::STATUS,
                wire::DdStatus {
                    digests: digests
                        .iter()
                        .map(|(k, d)| {
                            let (digest_high, digest_low) = digest_parts(*d);
                            wire::DdDigest {
                                key: k.clone(),
                                digest_high,
                                digest_low,
                            }
                        })
                        .collect(),
                    chunk: *chunk,
                    total_chunks: *total_chunks,
                }
                .encode_to_vec(),
            ),
            ReplicatorMessage::Gossip { entries, send_back } => (
                manifest::GOSSIP,
                wire::DdGossip {
                    entries: entries
                        .iter()
                        .map(|(k, e)| wire::DdEntry {
                            key: k.clone(),
                            envelope: Some(envelope_to_wire(e)),
                        })
                        .collect(),
                    send_back: *send_back,
                }
                .encode_to_vec(),
            ),
        };
        (m, Bytes::from(bytes))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<ReplicatorMessage, DecodeError> {
        Ok(match manifest {
            manifest::READ => {
                let w = wire::DdRead::decode(payload)?;
                ReplicatorMessage::Read {
                    request: w.request,
                    key: w.key,
                }
            }
            manifest::READ_RESULT => {
                let w = wire::DdReadResult::decode(payload)?;
                ReplicatorMessage::ReadResult {
                    request: w.request,
                    envelope: w.envelope.as_ref().map(envelope_from_wire).transpose()?,
                }
            }
            manifest::WRITE => {
                let w = wire::DdWrite::decode(payload)?;
                ReplicatorMessage::Write {
                    request: (w.request != 0).then_some(w.request),
                    envelope: envelope_field(w.envelope.as_ref())?,
                    key: w.key,
                }
            }
            manifest::WRITE_ACK => ReplicatorMessage::WriteAck {
                request: wire::DdRequest::decode(payload)?.request,
            },
            manifest::WRITE_NACK => ReplicatorMessage::WriteNack {
                request: wire::DdRequest::decode(payload)?.request,
            },
            manifest::DELTA_PROPAGATION => {
                let w = wire::DdDeltaPropagation::decode(payload)?;
                let mut deltas = Vec::with_capacity(w.deltas.len());
                for d in w.deltas {
                    deltas.push(DeltaEntry {
                        pruning: pruning_from_wire(&d.pruning)?,
                        key: d.key,
                        data_type: DataTypeId(d.data_type),
                        seq: d.seq,
                        full: d.full,
                        bytes: d.bytes.to_vec(),
                    });
                }
                ReplicatorMessage::DeltaPropagation { deltas }
            }
            manifest::DELTA_NACK => ReplicatorMessage::DeltaNack {
                key: wire::DdDeltaNack::decode(payload)?.key,
            },
            manifest::STATUS => {
                let w = wire::DdStatus::decode(payload)?;
                ReplicatorMessage::Status {
                    digests: w
                        .digests
                        .into_iter()
                        .map(|d| {
                            let digest =
                                (u128::from(d.digest_high) << 64) | u128::from(d.digest_low);
                            (d.key, Digest(digest))
                        })
                        .collect(),
                    chunk: w.chunk,
                    total_chunks: w.total_chunks,
                }
            }
            manifest::GOSSIP => {
                let w = wire::DdGossip::decode(payload)?;
                let mut entries = Vec::with_capacity(w.entries.len());
                for e in &w.entries {
                    entries.push((e.key.clone(), envelope_field(e.envelope.as_ref())?));
                }
                ReplicatorMessage::Gossip {
                    entries,
                    send_back: w.send_back,
                }
            }
            other => return Err(DecodeError::UnknownManifest(other)),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use concord_core::{Address, UniqueAddress};

    fn env() -> SerializedEnvelope {
        SerializedEnvelope {
            data_type: DataTypeId(7),
            data: Some(vec![1, 2, 3]),
            pruning: vec![
                (
                    ReplicaId(9),
                    PruningState::Initialized {
                        owner: UniqueAddress::new(Address::new("s", "h", 1), 5),
                        seen: [Address::new("s", "h", 2)].into(),
                    },
                ),
                (
                    ReplicaId(10),
                    PruningState::Performed { obsolete_at_ms: 99 },
                ),
            ],
            delta_versions: vec![(ReplicaId(1), 4)],
        }
    }

    /// One message of every kind (also the seeds of the wire fuzz tests).
    pub(crate) fn all_messages() -> Vec<ReplicatorMessage> {
        vec![
            ReplicatorMessage::Read {
                request: 1,
                key: "k".into(),
            },
            ReplicatorMessage::ReadResult {
                request: 2,
                envelope: Some(env()),
            },
            ReplicatorMessage::ReadResult {
                request: 2,
                envelope: None,
            },
            ReplicatorMessage::Write {
                request: Some(3),
                key: "k".into(),
                envelope: env(),
            },
            ReplicatorMessage::Write {
                request: None,
                key: "k".into(),
                envelope: SerializedEnvelope {
                    data: None,
                    ..env()
                },
            },
            ReplicatorMessage::WriteAck { request: 4 },
            ReplicatorMessage::WriteNack { request: 5 },
            ReplicatorMessage::DeltaPropagation {
                deltas: vec![DeltaEntry {
                    key: "k".into(),
                    data_type: DataTypeId(3),
                    seq: 8,
                    full: true,
                    bytes: vec![9],
                    pruning: vec![(ReplicaId(4), PruningState::Performed { obsolete_at_ms: 3 })],
                }],
            },
            ReplicatorMessage::DeltaNack { key: "k".into() },
            ReplicatorMessage::Status {
                digests: vec![("k".into(), Digest(u128::MAX - 5))],
                chunk: 1,
                total_chunks: 3,
            },
            ReplicatorMessage::Gossip {
                entries: vec![("k".into(), env())],
                send_back: true,
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in all_messages() {
            let (manifest, bytes) = ReplicatorCodec.encode(&m);
            assert_eq!(ReplicatorCodec.decode_owned(manifest, bytes).unwrap(), m);
        }
        assert!(matches!(
            ReplicatorCodec.decode_owned(99, Bytes::new()),
            Err(DecodeError::UnknownManifest(99))
        ));
        assert!(ReplicatorCodec
            .decode_owned(manifest::WRITE, Bytes::from_static(&[0xff, 0xff]))
            .is_err());
        assert!(
            ReplicatorCodec
                .decode_owned(manifest::WRITE, Bytes::new())
                .is_err(),
            "no envelope"
        );
    }
}
