//! The wire form of the cluster-metrics protocol ([`ProtocolId::CLUSTER_METRICS`]).
//!
//! **Manifest 2, a gossip round or its answer** ([`MetricsGossipMessage`]), a compact binary
//! form (the byte budget is ~100 B/s per node at 25 nodes: docs/CLUSTER_METRICS.md):
//!
//! ```text
//! message := flags:u8 section*            flags bit 0: reply; other bits ignored
//! section := tag:u8 length:varint body    in any order, each tag at most once;
//!                                         unknown tags are skipped (later versions)
//!   tag 1 entries:        count:varint entry*
//!   tag 2 full digest:    count:varint (uid:u64le sequence:varint)*
//!   tag 3 want:           count:varint position:varint*
//!   tag 4 compact digest: nodes:u64le count:varint sequence:varint*
//! entry   := uid:u64le sequence:varint present:varint code:varint*
//!            present: bit i set = metric number i; one code per set bit, ascending
//! varint  := unsigned LEB128, at most 10 bytes; codes and positions at most 2^32 − 1
//! ```
//!
//! An entry is 8 bytes of uid, the version (1–3 bytes), the presence mask (2 bytes for
//! Concord's 11 metrics) and one code per metric (1–2 bytes each): ~25 bytes. A round with a
//! compact digest of 25 entries is ~37 bytes. Absent sections mean empty (no digest); the
//! encoder writes no empty section but a digest; a message with both digests is refused.
//!
//! **Manifest 1, the first version's message** ([`MetricsGossipEnvelope`], every entry in
//! full), still decoded and encoded for a rolling upgrade from that version: MessagePack
//! with one-letter field names, each metric `name → [value, smoothed]` as 32-bit floats.
//!
//! Any input decodes to a message or an error, never a panic, and no count read from the
//! input allocates more than the input could hold; what decodes is checked again by the
//! collector ([`concord_core::cluster_metrics::MetricsEntry::validate`]).
//!
//! [`ProtocolId::CLUSTER_METRICS`]: concord_core::ProtocolId::CLUSTER_METRICS

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use concord_core::cluster_metrics::{
    ClusterMetricsMessage, Digest, EntryVersion, Metric, MetricsEntry, MetricsGossipEnvelope,
    MetricsGossipMessage, NodeMetrics,
};
use concord_core::UniqueAddress;
use serde::{Deserialize, Serialize};

use crate::remote::codec::{Codec, DecodeError};
use crate::sharding::entity::{decode, encode};

/// The first version's message ([`MetricsGossipEnvelope`]).
pub const LEGACY_GOSSIP: u32 = 1;
/// A gossip round or its answer ([`MetricsGossipMessage`]).
pub const GOSSIP: u32 = 2;

const ENTRIES: u8 = 1;
const FULL_DIGEST: u8 = 2;
const WANT: u8 = 3;
const COMPACT_DIGEST: u8 = 4;

/// The cluster-metrics codec.
pub struct ClusterMetricsCodec;

impl Codec for ClusterMetricsCodec {
    type Message = ClusterMetricsMessage;

    fn encode(&self, message: &ClusterMetricsMessage) -> (u32, Bytes) {
        match message {
            ClusterMetricsMessage::Gossip(m) => (GOSSIP, encode_gossip(m)),
            ClusterMetricsMessage::Legacy(m) => (LEGACY_GOSSIP, encode_legacy(m)),
        }
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<ClusterMetricsMessage, DecodeError> {
        match manifest {
            GOSSIP => decode_gossip(payload)
                .map(ClusterMetricsMessage::Gossip)
                .map_err(|e| DecodeError::Invalid(e.to_string())),
            LEGACY_GOSSIP => decode_legacy(payload).map(ClusterMetricsMessage::Legacy),
            other => Err(DecodeError::UnknownManifest(other)),
        }
    }
}

fn put_varint(out: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

fn section(out: &mut BytesMut, tag: u8, body: BytesMut) {
    out.put_u8(tag);
    put_varint(out, body.len() as u64);
    out.extend_from_slice(&body);
}

fn put_entry(out: &mut BytesMut, e: &MetricsEntry) {
    out.put_u64_le(e.uid);
    put_varint(out, e.sequence);
    // The collector only sends valid entries (numbers ≤ 63, ascending).
    let present = e.codes.iter().fold(0u64, |m, (id, _)| {
        m | 1u64.checked_shl(u32::from(*id)).unwrap_or(0)
    });
    put_varint(out, present);
    for (_, code) in &e.codes {
        put_varint(out, u64::from(*code));
    }
}

fn encode_gossip(m: &MetricsGossipMessage) -> Bytes {
    let mut out = BytesMut::new();
    out.put_u8(u8::from(m.reply));
    if !m.entries.is_empty() {
        let mut body = BytesMut::new();
        put_varint(&mut body, m.entries.len() as u64);
        for e in &m.entries {
            put_entry(&mut body, e);
        }
        section(&mut out, ENTRIES, body);
    }
    match &m.digest {
        Some(Digest::Full(versions)) => {
            let mut body = BytesMut::new();
            put_varint(&mut body, versions.len() as u64);
            for v in versions {
                body.put_u64_le(v.uid);
                put_varint(&mut body, v.sequence);
            }
            section(&mut out, FULL_DIGEST, body);
        }
        Some(Digest::Compact { nodes, sequences }) => {
            let mut body = BytesMut::new();
            body.put_u64_le(*nodes);
            put_varint(&mut body, sequences.len() as u64);
            for s in sequences {
                put_varint(&mut body, *s);
            }
            section(&mut out, COMPACT_DIGEST, body);
        }
        None => {}
    }
    if !m.want.is_empty() {
        let mut body = BytesMut::new();
        put_varint(&mut body, m.want.len() as u64);
        for i in &m.want {
            put_varint(&mut body, u64::from(*i));
        }
        section(&mut out, WANT, body);
    }
    out.freeze()
}

/// Why a manifest-2 payload does not decode.
#[derive(Debug, thiserror::Error)]
enum WireError {
    #[error("the message ends inside a field")]
    Truncated,
    #[error("a varint longer than 10 bytes or over its range")]
    BadVarint,
    #[error("section {0} twice")]
    Repeated(u8),
    #[error("section {0} has {1} bytes after its last item")]
    Trailing(u8, usize),
    #[error("an empty message")]
    Empty,
    #[error("both a full and a compact digest")]
    TwoDigests,
}

/// A reader over a byte slice that never reads past its end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u64_le(&mut self) -> Result<u64, WireError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                return Err(WireError::BadVarint);
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::BadVarint)
    }

    fn u32_varint(&mut self) -> Result<u32, WireError> {
        u32::try_from(self.varint()?).map_err(|_| WireError::BadVarint)
    }

    /// A count of items of at least `min_bytes` each: at most what the rest could hold.
    fn count(&mut self, min_bytes: usize) -> Result<usize, WireError> {
        let n = self.varint()?;
        if n > (self.0.len() / min_bytes.max(1)) as u64 {
            return Err(WireError::Truncated);
        }
        Ok(n as usize)
    }

    fn done(&self, tag: u8) -> Result<(), WireError> {
        match self.0.len() {
            0 => Ok(()),
            n => Err(WireError::Trailing(tag, n)),
        }
    }
}

fn read_entry(r: &mut Reader<'_>) -> Result<MetricsEntry, WireError> {
    let uid = r.u64_le()?;
    let sequence = r.varint()?;
    let present = r.varint()?;
    let mut codes = Vec::with_capacity(present.count_ones() as usize);
    for id in 0..64u8 {
        if present & (1u64 << id) != 0 {
            codes.push((id, r.u32_varint()?));
        }
    }
    Ok(MetricsEntry {
        uid,
        sequence,
        codes,
    })
}

fn decode_gossip(payload: &[u8]) -> Result<MetricsGossipMessage, WireError> {
    let mut r = Reader(payload);
    let flags = r.u8().map_err(|_| WireError::Empty)?;
    let mut m = MetricsGossipMessage {
        reply: flags & 1 != 0,
        ..Default::default()
    };
    let mut seen = [false; 256];
    while !r.0.is_empty() {
        let tag = r.u8()?;
        let length = r.varint()?;
        let length = usize::try_from(length).map_err(|_| WireError::Truncated)?;
        let mut body = Reader(r.take(length)?);
        if std::mem::replace(&mut seen[usize::from(tag)], true) {
            return Err(WireError::Repeated(tag));
        }
        match tag {
            ENTRIES => {
                // uid, version, mask: at least 10 bytes an entry.
                let n = body.count(10)?;
                m.entries = (0..n)
                    .map(|_| read_entry(&mut body))
                    .collect::<Result<_, _>>()?;
            }
            FULL_DIGEST | COMPACT_DIGEST if m.digest.is_some() => {
                return Err(WireError::TwoDigests);
            }
            FULL_DIGEST => {
                let n = body.count(9)?;
                let versions = (0..n)
                    .map(|_| {
                        let uid = body.u64_le()?;
                        let sequence = body.varint()?;
                        Ok(EntryVersion { uid, sequence })
                    })
                    .collect::<Result<_, WireError>>()?;
                m.digest = Some(Digest::Full(versions));
            }
            COMPACT_DIGEST => {
                let nodes = body.u64_le()?;
                let n = body.count(1)?;
                let sequences = (0..n).map(|_| body.varint()).collect::<Result<_, _>>()?;
                m.digest = Some(Digest::Compact { nodes, sequences });
            }
            WANT => {
                let n = body.count(1)?;
                m.want = (0..n)
                    .map(|_| body.u32_varint())
                    .collect::<Result<_, _>>()?;
            }
            // A later version's section.
            _ => continue,
        }
        body.done(tag)?;
    }
    Ok(m)
}

#[derive(Serialize, Deserialize)]
struct WireEntry {
    #[serde(rename = "n")]
    node: UniqueAddress,
    #[serde(rename = "s")]
    sequence: u64,
    #[serde(rename = "t")]
    sampled_at_ms: u64,
    /// Name → (value, smoothed).
    #[serde(rename = "m")]
    metrics: BTreeMap<String, (f32, f32)>,
}

#[derive(Serialize, Deserialize)]
struct WireGossip {
    #[serde(rename = "e")]
    entries: Vec<WireEntry>,
    #[serde(rename = "r")]
    reply: bool,
}

fn encode_legacy(m: &MetricsGossipEnvelope) -> Bytes {
    let wire = WireGossip {
        entries: m
            .entries
            .iter()
            .map(|e| WireEntry {
                node: e.node.clone(),
                sequence: e.sequence,
                sampled_at_ms: e.sampled_at_ms,
                // f64 → f32 rounds (and saturates to infinity beyond f32::MAX, which the
                // receiver refuses as not finite).
                metrics: e
                    .metrics
                    .iter()
                    .map(|(name, m)| (name.clone(), (m.value as f32, m.smoothed as f32)))
                    .collect(),
            })
            .collect(),
        reply: m.reply,
    };
    // Plain data with string keys: MessagePack cannot fail on it.
    Bytes::from(encode(&wire).unwrap_or_default())
}

fn decode_legacy(payload: &[u8]) -> Result<MetricsGossipEnvelope, DecodeError> {
    let wire: WireGossip = decode(payload).map_err(DecodeError::Invalid)?;
    Ok(MetricsGossipEnvelope {
        entries: wire
            .entries
            .into_iter()
            .map(|e| NodeMetrics {
                node: e.node,
                sequence: e.sequence,
                sampled_at_ms: e.sampled_at_ms,
                // The collector refuses an entry with too many names.
                metrics: e
                    .metrics
                    .into_iter()
                    .map(|(name, (value, smoothed))| {
                        let metric = Metric {
                            value: f64::from(value),
                            smoothed: f64::from(smoothed),
                        };
                        (name, metric)
                    })
                    .collect(),
            })
            .collect(),
        reply: wire.reply,
    })
}

/// Messages for the wire corpus and tests: a round (compact digest), an answer, a full
/// digest sent back, the entries sent for a `want`; then the first version's round and
/// answer.
pub fn samples() -> Vec<ClusterMetricsMessage> {
    use concord_core::cluster_metrics::names;
    use concord_core::cluster_metrics::quantise::scale;
    use concord_core::Address;
    let uid = |port: u16| 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(u64::from(port));
    let values = |cpu: f64| {
        [
            (names::CPU_COMBINED, cpu),
            (names::SYSTEM_LOAD_AVERAGE, 1.5),
            (names::PROCESSORS, 2.0),
            (names::MEMORY_RSS, 52_428_800.0), // exact in f32
            (names::ENTITIES, 12.0),
        ]
    };
    let entry = |port: u16, cpu: f64| {
        let codes = values(cpu).into_iter().filter_map(|(n, v)| {
            let id = names::id(n)?;
            Some((id, scale(id)?.code(v)))
        });
        MetricsEntry {
            uid: uid(port),
            sequence: 7,
            codes: codes.collect::<BTreeMap<_, _>>().into_iter().collect(),
        }
    };
    let version = |port: u16, sequence: u64| EntryVersion {
        uid: uid(port),
        sequence,
    };
    let gossip = |m: MetricsGossipMessage| ClusterMetricsMessage::Gossip(m);
    let legacy_entry = |port: u16, cpu: f64| NodeMetrics {
        node: UniqueAddress::new(Address::new("corpus", "127.0.0.1", port), u64::from(port)),
        sequence: 7,
        sampled_at_ms: 1_700_000_000_000,
        metrics: values(cpu)
            .into_iter()
            .map(|(n, v)| {
                let metric = Metric {
                    value: v,
                    smoothed: v / 2.0,
                };
                (n.to_string(), metric)
            })
            .collect(),
    };
    vec![
        gossip(MetricsGossipMessage {
            digest: Some(Digest::Compact {
                nodes: 0x0123_4567_89ab_cdef,
                sequences: vec![7, 300, 1],
            }),
            reply: true,
            ..Default::default()
        }),
        gossip(MetricsGossipMessage {
            entries: vec![entry(25520, 0.25), entry(25521, 0.5)],
            want: vec![2],
            ..Default::default()
        }),
        gossip(MetricsGossipMessage {
            digest: Some(Digest::Full(vec![version(25520, 7), version(25522, 300)])),
            reply: true,
            ..Default::default()
        }),
        gossip(MetricsGossipMessage {
            entries: vec![entry(25522, 0.75)],
            ..Default::default()
        }),
        ClusterMetricsMessage::Legacy(MetricsGossipEnvelope {
            entries: vec![legacy_entry(25520, 0.25), legacy_entry(25521, 0.5)],
            reply: true,
        }),
        ClusterMetricsMessage::Legacy(MetricsGossipEnvelope {
            entries: vec![],
            reply: false,
        }),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_round_trip_and_garbage_is_an_error() {
        let c = ClusterMetricsCodec;
        for m in samples() {
            let (manifest, bytes) = c.encode(&m);
            assert_eq!(c.decode(manifest, &bytes).unwrap(), m);
        }
        for manifest in [GOSSIP, LEGACY_GOSSIP] {
            assert!(matches!(
                c.decode(
                    manifest,
                    b"\xff\x01\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00"
                ),
                Err(DecodeError::Invalid(_))
            ));
        }
        assert!(matches!(
            c.decode(99, b""),
            Err(DecodeError::UnknownManifest(99))
        ));
        // Any prefix of a good message is an error or a message, never a panic.
        for m in samples() {
            let (manifest, bytes) = c.encode(&m);
            for n in 0..bytes.len() {
                let _ = c.decode(manifest, &bytes[..n]);
            }
        }
    }

    #[test]
    fn an_entry_of_eleven_metrics_is_about_25_bytes_and_a_digest_one_byte_an_entry() {
        let c = ClusterMetricsCodec;
        let entry = MetricsEntry {
            uid: u64::MAX,
            sequence: 1000,
            codes: (0..11).map(|i| (i, 200)).collect(),
        };
        let one = |entries: Vec<MetricsEntry>| {
            c.encode(&ClusterMetricsMessage::Gossip(MetricsGossipMessage {
                entries,
                ..Default::default()
            }))
            .1
            .len()
        };
        let per_entry = one(vec![entry.clone(), entry.clone()]) - one(vec![entry]);
        assert_eq!(per_entry, 8 + 2 + 2 + 11 * 2);
        let round = c.encode(&ClusterMetricsMessage::Gossip(MetricsGossipMessage {
            digest: Some(Digest::Compact {
                nodes: u64::MAX,
                sequences: vec![100; 25],
            }),
            reply: true,
            ..Default::default()
        }));
        // Flags, section tag and length, the hash, the count, one byte a version.
        assert_eq!(round.1.len(), 1 + 2 + 8 + 1 + 25);
    }

    #[test]
    fn unknown_sections_are_skipped_and_repeated_or_overlong_ones_refused() {
        let c = ClusterMetricsCodec;
        // Flags, then an unknown section 9 of 2 bytes, then a known section.
        let m = c
            .decode(GOSSIP, &[1, 9, 2, 0xaa, 0xbb, 3, 2, 1, 5])
            .unwrap();
        let ClusterMetricsMessage::Gossip(m) = m else {
            panic!("{m:?}")
        };
        assert!(m.reply);
        assert_eq!(m.want, vec![5]);
        assert!(c.decode(GOSSIP, &[0, 3, 2, 1, 5, 3, 2, 1, 5]).is_err());
        // Both digests.
        let compact = [4, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        let full = [2, 1, 0];
        assert!(c
            .decode(GOSSIP, &[[0].as_slice(), &compact].concat())
            .is_ok());
        assert!(c
            .decode(GOSSIP, &[[0].as_slice(), &compact, &full].concat())
            .is_err());
        assert!(c
            .decode(GOSSIP, &[[0].as_slice(), &full, &compact].concat())
            .is_err());
        // A section with a byte after its last item.
        assert!(c.decode(GOSSIP, &[0, 3, 3, 1, 5, 0]).is_err());
        // A count far beyond what the bytes could hold allocates nothing.
        assert!(c
            .decode(GOSSIP, &[0, 1, 5, 0xff, 0xff, 0xff, 0xff, 0x0f])
            .is_err());
        assert!(c.decode(GOSSIP, &[]).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_to_a_message_or_an_error(
            manifest in 1u32..3, bytes in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let _ = ClusterMetricsCodec.decode(manifest, &bytes);
        }

        #[test]
        fn any_message_round_trips(
            entries in proptest::collection::vec(
                (any::<u64>(), any::<u64>(), proptest::collection::btree_map(0u8..64, any::<u32>(), 0..12)),
                0..5,
            ),
            full in proptest::option::of(proptest::collection::vec((any::<u64>(), any::<u64>()), 0..5)),
            compact in proptest::option::of((any::<u64>(), proptest::collection::vec(any::<u64>(), 0..5))),
            want in proptest::collection::vec(any::<u32>(), 0..4),
            reply in any::<bool>(),
        ) {
            let m = ClusterMetricsMessage::Gossip(MetricsGossipMessage {
                entries: entries
                    .into_iter()
                    .map(|(uid, sequence, codes)| MetricsEntry {
                        uid,
                        sequence,
                        codes: codes.into_iter().collect(),
                    })
                    .collect(),
                digest: match (full, compact) {
                    (Some(d), _) => Some(Digest::Full(
                        d.into_iter()
                            .map(|(uid, sequence)| EntryVersion { uid, sequence })
                            .collect(),
                    )),
                    (None, Some((nodes, sequences))) => Some(Digest::Compact { nodes, sequences }),
                    (None, None) => None,
                },
                want,
                reply,
            });
            let (manifest, bytes) = ClusterMetricsCodec.encode(&m);
            prop_assert_eq!(ClusterMetricsCodec.decode(manifest, &bytes).unwrap(), m);
        }
    }
}
