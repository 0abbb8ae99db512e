//! Fuzzing of everything the network feeds a node: the frame splitter, the envelope, the
//! handshake messages and their check, every protocol's decoder (membership, Distributed
//! Data, singleton, sharding) and the gzip path. Each target gets arbitrary bytes and
//! structure-aware mutations of valid input (bit flips, byte changes, insertions,
//! deletions, truncation, duplicated ranges, length fields pointing anywhere).
//!
//! Properties: no panic; failures are errors (which close only the connection that sent
//! them); sizes stay within the limits (the splitter never asks for more than a frame of
//! the lane's limit, decompression stops at its limit).
//!
//! Cases per target: `CONCORD_FUZZ_CASES` (default 512, what CI runs). A long run of over a
//! million cases in total:
//!
//! ```text
//! CONCORD_FUZZ_CASES=200000 cargo test --release -p concord --lib remote::fuzz_tests
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use concord_core::{Address, ClusterMessage, UniqueAddress};
use proptest::prelude::*;
use prost::Message;

use super::envelope::{decode_envelope, decode_envelope_head_at, Frame, FRAME_HEADER_BYTES};
use super::handshake::check_handshake;
use super::inbound::complete_frames;
use super::registry::{Codec, DecodeError};
use super::wire;
use crate::cluster::codec::MembershipCodec;
use crate::cluster::gossip_wire::{compress_gossip, decompress_gossip};
use crate::ddata::codec::ReplicatorCodec;
use crate::kv::codec::KvCodec;
use crate::sharding::codec::ShardingCodec;
use crate::singleton::codec::SingletonCodec;
use concord_core::sharding::ShardingMessage;
use concord_core::singleton::SingletonMessage;

fn cases() -> u32 {
    std::env::var("CONCORD_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

/// One mutation: (kind, position, byte).
type Mutation = (u8, usize, u8);

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    proptest::collection::vec((0u8..7, any::<usize>(), any::<u8>()), 0..10)
}

/// Applies `ops` to `bytes`.
fn mutate(mut bytes: Vec<u8>, ops: &[Mutation]) -> Vec<u8> {
    for &(kind, pos, b) in ops {
        let len = bytes.len();
        let at = if len == 0 { 0 } else { pos % len };
        match kind {
            0 if len > 0 => bytes[at] ^= 1 << (b % 8),
            1 if len > 0 => bytes[at] = b,
            2 => bytes.insert(at.min(len), b),
            3 if len > 0 => {
                bytes.remove(at);
            }
            4 => bytes.truncate(at),
            5 if len > 0 => {
                // Duplicate a range (repeated fields, overlapping messages).
                let end = (at + 1 + usize::from(b)).min(len);
                let dup = bytes[at..end].to_vec();
                bytes.splice(at..at, dup);
            }
            6 if len >= 4 => {
                // A 4-byte big-endian length somewhere: huge, zero or off by a little.
                let v = match b % 3 {
                    0 => u32::MAX,
                    1 => 0,
                    _ => u32::try_from(len)
                        .unwrap_or(u32::MAX)
                        .wrapping_add(u32::from(b)),
                };
                let at = at.min(len - 4);
                bytes[at..at + 4].copy_from_slice(&v.to_be_bytes());
            }
            _ => {}
        }
    }
    bytes
}

fn ua(i: u16) -> UniqueAddress {
    UniqueAddress::new(
        Address::new("fuzz", "127.0.0.1", 2550 + i),
        u64::from(i) + 11,
    )
}

fn sample_gossip() -> concord_core::Gossip {
    let mut g = concord_core::Gossip::empty();
    for i in 0..4 {
        let m = concord_core::Member::joining(ua(i), ["r".to_string()].into(), "1.0")
            .with_up(u32::from(i) + 1);
        g.members.insert(ua(i), m);
        g.version = g.version.increment(&ua(i));
        g.overview.seen.insert(ua(i));
    }
    g.overview.reachability = g.overview.reachability.unreachable(&ua(0), &ua(1));
    g.tombstones.insert(ua(9), 77);
    g
}

fn membership_samples() -> Vec<ClusterMessage> {
    let g = sample_gossip();
    vec![
        ClusterMessage::InitJoin { cluster: None },
        ClusterMessage::InitJoinAck {
            cluster: Some(concord_core::ClusterIdentity {
                id: concord_core::ClusterId(7),
                reformed_from: Some(concord_core::ClusterId(3)),
            }),
        },
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
    ]
}

/// Every protocol's valid messages, encoded: (protocol, manifest, payload).
fn valid_payloads() -> Vec<(u32, u32, Vec<u8>)> {
    let mut v = Vec::new();
    let codec = MembershipCodec::default();
    for m in membership_samples() {
        let (manifest, b) = codec.encode(&m);
        v.push((1, manifest, b.to_vec()));
    }
    for m in crate::ddata::codec::tests::all_messages() {
        let (manifest, b) = ReplicatorCodec.encode(&m);
        v.push((2, manifest, b.to_vec()));
    }
    for body in crate::singleton::codec::tests::all_bodies() {
        let m = SingletonMessage {
            name: "s".into(),
            body,
        };
        let (manifest, b) = SingletonCodec.encode(&m);
        v.push((3, manifest, b.to_vec()));
    }
    for body in crate::sharding::codec::tests::all_messages() {
        let m = ShardingMessage {
            type_name: "t".into(),
            body,
        };
        let (manifest, b) = ShardingCodec.encode(&m);
        v.push((4, manifest, b.to_vec()));
    }
    for m in crate::kv::codec::tests::all_messages() {
        let (manifest, b) = KvCodec.encode(&m);
        v.push((5, manifest, b.to_vec()));
    }
    v
}

/// Decodes `payload` with the codec of `codec` (1 membership, 2 ddata, 3 singleton, 4
/// sharding, 5 key-value store), both ways the host may call it (borrowed and owned); only
/// errors, never a panic, and the same outcome both ways.
fn decode_with(codec: u32, manifest: u32, payload: Bytes) -> Result<(), DecodeError> {
    fn both<C: Codec>(c: &C, manifest: u32, payload: Bytes) -> Result<(), DecodeError> {
        let borrowed = c.decode(manifest, &payload).map(drop);
        let owned = c.decode_owned(manifest, payload).map(drop);
        assert_eq!(borrowed.is_ok(), owned.is_ok());
        owned
    }
    match codec {
        1 => both(
            &MembershipCodec {
                max_decompressed_gossip_bytes: 1 << 20,
            },
            manifest,
            payload,
        ),
        2 => both(&ReplicatorCodec, manifest, payload),
        3 => both(&SingletonCodec, manifest, payload),
        4 => both(&ShardingCodec, manifest, payload),
        _ => both(&KvCodec, manifest, payload),
    }
}

fn handshake_bytes() -> Vec<u8> {
    wire::Handshake {
        from: Some(super::address_wire::unique_to_wire(&ua(1))),
        to: Some(super::address_wire::address_to_wire(&ua(0).address)),
        protocol_version: super::version::PROTOCOL_VERSION,
        cluster_name: "fuzz".into(),
        lane: 1,
        nonce: Bytes::from(vec![7u8; 32]),
    }
    .encode_to_vec()
}

/// Frames of valid envelopes, back to back.
fn frame_stream(payloads: &[(u32, u32, Vec<u8>)]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    for (p, m, b) in payloads {
        Frame {
            protocol: concord_core::ProtocolId(*p),
            manifest: *m,
            recipient_uid: 5,
            payload: Bytes::from(b.clone()),
            trace: None,
        }
        .write(&mut buf);
    }
    buf.to_vec()
}

/// The reader's path over `bytes`: split into frames at `limit`, decode each envelope and
/// its payload. Returns false where the reader would close the connection.
fn read_path(bytes: &[u8], limit: usize) -> bool {
    let bytes = Bytes::copy_from_slice(bytes);
    let mut off = 0;
    loop {
        match complete_frames(&bytes[off..], limit) {
            Err(len) => {
                assert!(len > limit);
                return false;
            }
            Ok((0, need)) => {
                assert!(need <= limit + FRAME_HEADER_BYTES, "asks for {need} bytes");
                return true;
            }
            Ok((end, need)) => {
                assert!(off + end <= bytes.len());
                assert!(need <= limit + FRAME_HEADER_BYTES);
                let chunk = bytes.slice(off..off + end);
                let mut at = 0;
                while at < chunk.len() {
                    let len = u32::from_be_bytes([
                        chunk[at],
                        chunk[at + 1],
                        chunk[at + 2],
                        chunk[at + 3],
                    ]) as usize;
                    let (s, e) = (at + FRAME_HEADER_BYTES, at + FRAME_HEADER_BYTES + len);
                    // The in-place reader agrees with the generated decoder.
                    let generated = decode_envelope(chunk.slice(s..e));
                    match decode_envelope_head_at(&chunk, s, e) {
                        Ok(head) => {
                            let env = generated.expect("the generated decoder accepts it too");
                            assert_eq!(
                                (
                                    env.protocol,
                                    env.manifest,
                                    env.recipient_uid,
                                    &env.payload[..]
                                ),
                                (
                                    head.protocol,
                                    head.manifest,
                                    head.recipient_uid,
                                    &chunk[head.payload.clone()]
                                )
                            );
                            let _ = decode_with(
                                head.protocol,
                                head.manifest,
                                chunk.slice(head.payload),
                            );
                        }
                        Err(_) => {
                            assert!(generated.is_err(), "the generated decoder refuses it too");
                            return false;
                        }
                    }
                    at = e;
                }
                off += end;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn the_frame_reader_survives_arbitrary_bytes(
        bytes in proptest::collection::vec(any::<u8>(), 0..2048),
        limit in 16usize..4096,
    ) {
        read_path(&bytes, limit);
    }

    #[test]
    fn the_frame_reader_survives_mutated_valid_streams(
        pick in proptest::collection::vec(any::<proptest::sample::Index>(), 1..6),
        ops in mutations(),
    ) {
        let all = valid_payloads();
        let chosen: Vec<_> = pick.iter().map(|i| all[i.index(all.len())].clone()).collect();
        let stream = frame_stream(&chosen);
        // The untouched stream reads completely.
        prop_assert!(read_path(&stream, 1 << 20));
        read_path(&mutate(stream, &ops), 1 << 20);
    }

    #[test]
    fn every_decoder_survives_mutations_of_its_valid_messages(
        i in any::<proptest::sample::Index>(),
        ops in mutations(),
        other_manifest in any::<u32>(),
    ) {
        let all = valid_payloads();
        let (codec, manifest, payload) = all[i.index(all.len())].clone();
        prop_assert!(decode_with(codec, manifest, Bytes::from(payload.clone())).is_ok());
        let bad = Bytes::from(mutate(payload, &ops));
        let _ = decode_with(codec, manifest, bad.clone());
        let _ = decode_with(codec, other_manifest, bad);
    }

    #[test]
    fn every_decoder_survives_arbitrary_bytes(
        codec in 1u32..6,
        manifest in 0u32..40,
        bytes in proptest::collection::vec(any::<u8>(), 0..1024),
    ) {
        let _ = decode_with(codec, manifest, Bytes::from(bytes));
    }

    #[test]
    fn handshakes_are_checked_without_panicking(ops in mutations(), arbitrary in proptest::collection::vec(any::<u8>(), 0..256)) {
        let me = ua(0).address;
        let valid = wire::Handshake::decode(Bytes::from(handshake_bytes())).unwrap();
        prop_assert!(check_handshake(&me, |_| false, &valid).is_ok());
        for bytes in [mutate(handshake_bytes(), &ops), arbitrary.clone()] {
            if let Ok(hs) = wire::Handshake::decode(Bytes::from(bytes.clone())) {
                let _ = check_handshake(&me, |_| false, &hs);
                let _ = check_handshake(&me, |_| true, &hs);
            }
            let _ = wire::HandshakeReply::decode(Bytes::from(bytes.clone()));
            let _ = wire::SecretProof::decode(Bytes::from(bytes));
        }
    }

    #[test]
    fn gzip_never_inflates_past_its_limit(ops in mutations(), limit in 64usize..65536) {
        let (gz, size) = compress_gossip(&sample_gossip());
        let mutated = mutate(gz, &ops);
        match decompress_gossip(&mutated, limit) {
            // Only what fits the limit can decode.
            Ok(_) => prop_assert!(size.raw <= limit || !ops.is_empty()),
            Err(DecodeError::DecompressedTooLarge(l)) => prop_assert_eq!(l, limit),
            Err(_) => {}
        }
    }
}

#[test]
fn a_length_field_beyond_the_limit_is_refused_before_anything_is_buffered() {
    let mut b = BytesMut::new();
    b.put_u32(u32::MAX);
    b.put_slice(&[1, 2, 3]);
    assert_eq!(complete_frames(&b, 1024), Err(u32::MAX as usize));
    // The splitter asks for at most one frame of the limit.
    let mut b = BytesMut::new();
    b.put_u32(1024);
    assert_eq!(
        complete_frames(&b, 1024),
        Ok((0, 1024 + FRAME_HEADER_BYTES))
    );
}
