//! The membership protocol's codec ([`MembershipCodec`]): `concord-core`'s
//! [`ClusterMessage`]s to and from the protobuf messages of `cluster.proto`, one
//! manifest per message type (see [`manifest`]). Full gossip travels in the wire form of
//! [`super::gossip_wire`] (gzip'd, bounded decompression). Decoding never panics: every
//! malformed input gives a [`DecodeError`].

use bytes::Bytes;
use concord_core::vector_clock::VectorClock;
use concord_core::ClusterMessage;
use prost::Message;

pub use super::gossip_wire::{
    compress_gossip, decompress_gossip, gossip_from_wire, gossip_to_wire, GossipSize,
};
use crate::remote::address_wire::{unique_from_wire, unique_to_wire};
pub use crate::remote::codec::DEFAULT_MAX_DECOMPRESSED_GOSSIP_BYTES;
use crate::remote::wire;
pub use crate::remote::{Codec, DecodeError};

/// The membership manifests: the message type numbers in the envelope.
pub mod manifest {
    /// `InitJoin` (`Empty`).
    pub const INIT_JOIN: u32 = 1;
    /// `InitJoinAck` (`Empty`).
    pub const INIT_JOIN_ACK: u32 = 2;
    /// `InitJoinNack` (`Empty`).
    pub const INIT_JOIN_NACK: u32 = 3;
    /// `Join`.
    pub const JOIN: u32 = 4;
    /// `Welcome` (gzip'd gossip).
    pub const WELCOME: u32 = 5;
    /// `GossipEnvelope` (gzip'd gossip).
    pub const GOSSIP_ENVELOPE: u32 = 6;
    /// `GossipStatus`.
    pub const GOSSIP_STATUS: u32 = 7;
    /// `Heartbeat`.
    pub const HEARTBEAT: u32 = 8;
    /// `HeartbeatRsp` (`Heartbeat`).
    pub const HEARTBEAT_RSP: u32 = 9;
}

/// The codec of [`concord_core::ProtocolId::MEMBERSHIP`].
#[derive(Clone, Copy, Debug)]
pub struct MembershipCodec {
    /// Largest gossip accepted after decompression, bytes
    /// (`remote.maximum-decompressed-gossip-size`).
    pub max_decompressed_gossip_bytes: usize,
}

impl Default for MembershipCodec {
    fn default() -> Self {
        MembershipCodec {
            max_decompressed_gossip_bytes: DEFAULT_MAX_DECOMPRESSED_GOSSIP_BYTES,
        }
    }
}

fn identity_to_wire(c: Option<concord_core::ClusterIdentity>) -> wire::InitJoinInfo {
    let (cluster_id, reformed_from) = super::gossip_wire::identity_parts(c);
    wire::InitJoinInfo {
        cluster_id,
        reformed_from,
    }
}

fn identity_from_wire(w: &wire::InitJoinInfo) -> Option<concord_core::ClusterIdentity> {
    super::gossip_wire::identity_of(w.cluster_id, w.reformed_from)
}

impl Codec for MembershipCodec {
    type Message = ClusterMessage;

    fn encode(&self, msg: &ClusterMessage) -> (u32, Bytes) {
        let (m, bytes) = match msg {
            ClusterMessage::InitJoin { cluster } => (
                manifest::INIT_JOIN,
                identity_to_wire(*cluster).encode_to_vec(),
            ),
            ClusterMessage::InitJoinAck { cluster } => (
                manifest::INIT_JOIN_ACK,
                identity_to_wire(*cluster).encode_to_vec(),
            ),
            ClusterMessage::InitJoinNack => {
                (manifest::INIT_JOIN_NACK, wire::Empty {}.encode_to_vec())
            }
            ClusterMessage::Join { roles, app_version } => (
                manifest::JOIN,
                wire::Join {
                    roles: roles.iter().cloned().collect(),
                    app_version: app_version.clone(),
                }
                .encode_to_vec(),
            ),
            ClusterMessage::Welcome { gossip } => (
                manifest::WELCOME,
                wire::Welcome {
                    gossip: compress_gossip(gossip).0.into(),
                }
                .encode_to_vec(),
            ),
            ClusterMessage::GossipEnvelope { to, gossip } => (
                manifest::GOSSIP_ENVELOPE,
                wire::GossipEnvelope {
                    to: Some(unique_to_wire(to)),
                    gossip: compress_gossip(gossip).0.into(),
                }
                .encode_to_vec(),
            ),
            ClusterMessage::GossipStatus {
                version,
                seen_digest,
            } => (
                manifest::GOSSIP_STATUS,
                wire::GossipStatus {
                    version: version
                        .entries()
                        .map(|(n, c)| wire::VersionEntry {
                            node: Some(unique_to_wire(n)),
                            counter: c,
                        })
                        .collect(),
                    seen_digest: *seen_digest,
                }
                .encode_to_vec(),
            ),
            ClusterMessage::Heartbeat {
                sequence_nr,
                creation_time_ms,
            } => (
                manifest::HEARTBEAT,
                wire::Heartbeat {
                    sequence_nr: *sequence_nr,
                    creation_time_ms: *creation_time_ms,
                }
                .encode_to_vec(),
            ),
            ClusterMessage::HeartbeatRsp {
                sequence_nr,
                creation_time_ms,
            } => (
                manifest::HEARTBEAT_RSP,
                wire::Heartbeat {
                    sequence_nr: *sequence_nr,
                    creation_time_ms: *creation_time_ms,
                }
                .encode_to_vec(),
            ),
        };
        (m, Bytes::from(bytes))
    }

    fn decode(&self, m: u32, payload: &[u8]) -> Result<ClusterMessage, DecodeError> {
        Ok(match m {
            manifest::INIT_JOIN => ClusterMessage::InitJoin {
                cluster: identity_from_wire(&wire::InitJoinInfo::decode(payload)?),
            },
            manifest::INIT_JOIN_ACK => ClusterMessage::InitJoinAck {
                cluster: identity_from_wire(&wire::InitJoinInfo::decode(payload)?),
            },
            manifest::INIT_JOIN_NACK => {
                wire::Empty::decode(payload)?;
                ClusterMessage::InitJoinNack
            }
            manifest::JOIN => {
                let j = wire::Join::decode(payload)?;
                ClusterMessage::Join {
                    roles: j.roles.into_iter().collect(),
                    app_version: j.app_version,
                }
            }
            manifest::WELCOME => ClusterMessage::Welcome {
                gossip: decompress_gossip(
                    &wire::Welcome::decode(payload)?.gossip,
                    self.max_decompressed_gossip_bytes,
                )?,
            },
            manifest::GOSSIP_ENVELOPE => {
                let e = wire::GossipEnvelope::decode(payload)?;
                ClusterMessage::GossipEnvelope {
                    to: unique_from_wire(
                        e.to.as_ref()
                            .ok_or(DecodeError::MissingField("gossip_envelope.to"))?,
                    )?,
                    gossip: decompress_gossip(&e.gossip, self.max_decompressed_gossip_bytes)?,
                }
            }
            manifest::GOSSIP_STATUS => {
                let s = wire::GossipStatus::decode(payload)?;
                ClusterMessage::GossipStatus {
                    version: VectorClock::from_entries(
                        s.version
                            .iter()
                            .map(|e| {
                                Ok((
                                    unique_from_wire(
                                        e.node
                                            .as_ref()
                                            .ok_or(DecodeError::MissingField("version.node"))?,
                                    )?,
                                    e.counter,
                                ))
                            })
                            .collect::<Result<Vec<_>, DecodeError>>()?,
                    ),
                    seen_digest: s.seen_digest,
                }
            }
            manifest::HEARTBEAT => {
                let h = wire::Heartbeat::decode(payload)?;
                ClusterMessage::Heartbeat {
                    sequence_nr: h.sequence_nr,
                    creation_time_ms: h.creation_time_ms,
                }
            }
            manifest::HEARTBEAT_RSP => {
                let h = wire::Heartbeat::decode(payload)?;
                ClusterMessage::HeartbeatRsp {
                    sequence_nr: h.sequence_nr,
                    creation_time_ms: h.creation_time_ms,
                }
            }
            other => return Err(DecodeError::UnknownManifest(other)),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use concord_core::gossip::Gossip;
    use concord_core::member::Member;
    use concord_core::{Address, UniqueAddress};
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use proptest::prelude::*;
    use std::io::Write;

    fn ua(i: u16) -> UniqueAddress {
        UniqueAddress::new(
            Address::new("sys", "127.0.0.1", 2550 + i),
            u64::from(i) * 977 + 1,
        )
    }

    fn sample_gossip(n: u16) -> Gossip {
        let mut g = Gossip::empty();
        for i in 0..n {
            let mut m = Member::joining(ua(i), ["dc-default".to_string()].into(), "1.2.3");
            m = m.with_up(u32::from(i) + 1);
            g.members.insert(ua(i), m);
            g.version = g.version.increment(&ua(i));
            g.overview.seen.insert(ua(i));
        }
        g.overview.reachability = g
            .overview
            .reachability
            .unreachable(&ua(0), &ua(1))
            .terminated(&ua(2), &ua(1));
        g.tombstones.insert(ua(100), 12345);
        g.identity = Some(concord_core::ClusterIdentity {
            id: concord_core::ClusterId(0xfeed),
            reformed_from: None,
        });
        g
    }

    #[test]
    fn gossip_round_trips_through_gzip_protobuf() {
        let g = sample_gossip(10);
        let (bytes, size) = compress_gossip(&g);
        assert!(size.compressed < size.raw);
        assert_eq!(decompress_gossip(&bytes, 1 << 20).unwrap(), g);
    }

    #[test]
    fn an_empty_init_join_of_an_older_version_decodes_without_identity() {
        let c = MembershipCodec::default();
        let m = c
            .decode_owned(
                manifest::INIT_JOIN_ACK,
                wire::Empty {}.encode_to_vec().into(),
            )
            .unwrap();
        assert_eq!(m, ClusterMessage::InitJoinAck { cluster: None });
    }

    /// One of each membership message (the round-trip test's and the wire corpus's).
    pub(crate) fn all_messages() -> Vec<ClusterMessage> {
        let g = sample_gossip(3);
        vec![
            ClusterMessage::InitJoin { cluster: None },
            ClusterMessage::InitJoin {
                cluster: g.identity,
            },
            ClusterMessage::InitJoinAck {
                cluster: Some(concord_core::ClusterIdentity {
                    id: concord_core::ClusterId(1),
                    reformed_from: Some(concord_core::ClusterId(u64::MAX)),
                }),
            },
            ClusterMessage::InitJoinNack,
            ClusterMessage::Join {
                roles: ["a".to_string()].into(),
                app_version: "1".into(),
            },
            ClusterMessage::Welcome { gossip: g.clone() },
            ClusterMessage::GossipEnvelope {
                to: ua(1),
                gossip: g.clone(),
            },
            ClusterMessage::GossipStatus {
                version: g.version.clone(),
                seen_digest: 42,
            },
            ClusterMessage::Heartbeat {
                sequence_nr: 7,
                creation_time_ms: 9,
            },
            ClusterMessage::HeartbeatRsp {
                sequence_nr: 7,
                creation_time_ms: 9,
            },
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in all_messages() {
            let (manifest, bytes) = MembershipCodec::default().encode(&m);
            assert_eq!(
                MembershipCodec::default()
                    .decode_owned(manifest, bytes)
                    .unwrap(),
                m
            );
        }
    }

    #[test]
    fn bad_indexes_and_enums_are_errors() {
        let mut w = gossip_to_wire(&sample_gossip(2));
        w.members[0].address_index = 99;
        assert!(matches!(
            gossip_from_wire(&w),
            Err(DecodeError::BadIndex(99))
        ));
        let mut w = gossip_to_wire(&sample_gossip(2));
        w.members[0].status = 42;
        assert!(matches!(
            gossip_from_wire(&w),
            Err(DecodeError::BadEnum(..))
        ));
        let mut w = gossip_to_wire(&sample_gossip(2));
        w.all_addresses[0].address.as_mut().unwrap().port = 70000;
        assert!(matches!(
            gossip_from_wire(&w),
            Err(DecodeError::BadPort(70000))
        ));
        assert!(MembershipCodec::default()
            .decode_owned(manifest::JOIN, Bytes::from_static(&[0xff]))
            .is_err());
        assert!(matches!(
            MembershipCodec::default().decode_owned(99, Bytes::new()),
            Err(DecodeError::UnknownManifest(99))
        ));
        assert!(decompress_gossip(b"not gzip", 1 << 20).is_err());
    }

    #[test]
    fn gzip_bomb_is_refused() {
        // 64 MiB of zeros gzip to about 65 KB: a stranger's frame that would inflate 1000×.
        let zeros = vec![0u8; 64 << 20];
        let mut enc = GzEncoder::new(Vec::new(), Compression::best());
        enc.write_all(&zeros).unwrap();
        let bomb = enc.finish().unwrap();
        assert!(bomb.len() < 70_000);
        let limit = DEFAULT_MAX_DECOMPRESSED_GOSSIP_BYTES;
        assert!(matches!(
            decompress_gossip(&bomb, limit),
            Err(DecodeError::DecompressedTooLarge(l)) if l == limit
        ));
        // Through the codec too, with its configured limit.
        let codec = MembershipCodec {
            max_decompressed_gossip_bytes: 4096,
        };
        let env = wire::GossipEnvelope {
            to: Some(unique_to_wire(&ua(1))),
            gossip: Bytes::from(bomb),
        };
        assert!(matches!(
            codec.decode_owned(manifest::GOSSIP_ENVELOPE, Bytes::from(env.encode_to_vec())),
            Err(DecodeError::DecompressedTooLarge(4096))
        ));
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            for m in 0..12 {
                let _ = MembershipCodec::default().decode_owned(m, Bytes::from(bytes.clone()));
            }
            let _ = decompress_gossip(&bytes, 1 << 20);
        }
    }
}
