//! The wire form of the cluster-metrics protocol ([`ProtocolId::CLUSTER_METRICS`]):
//! manifest 1, a [`MetricsGossipEnvelope`] as MessagePack with (one-letter) field names
//! (the entity messages' format: fields may be added, unknown ones are ignored); each
//! metric is `name → [value, smoothed]` as 32-bit floats (7 significant digits, plenty for
//! a load figure; about 25 bytes a metric, 370 an entry with Concord's 11 metrics). Any input decodes to a
//! message or an error, never a panic; what decodes is checked again by the collector
//! ([`concord_core::cluster_metrics::NodeMetrics::validate`]).
//!
//! [`ProtocolId::CLUSTER_METRICS`]: concord_core::ProtocolId::CLUSTER_METRICS

use std::collections::BTreeMap;

use bytes::Bytes;
use concord_core::cluster_metrics::{Metric, MetricsGossipEnvelope, NodeMetrics};
use concord_core::UniqueAddress;
use serde::{Deserialize, Serialize};

use crate::remote::codec::{Codec, DecodeError};
use crate::sharding::entity::{decode, encode};

/// A gossip message (a round's first message or its answer).
pub const GOSSIP: u32 = 1;

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

/// The cluster-metrics codec.
pub struct ClusterMetricsCodec;

impl Codec for ClusterMetricsCodec {
    type Message = MetricsGossipEnvelope;

    fn encode(&self, message: &MetricsGossipEnvelope) -> (u32, Bytes) {
        let wire = WireGossip {
            entries: message
                .entries
                .iter()
                .map(|e| WireEntry {
                    node: e.node.clone(),
                    sequence: e.sequence,
                    sampled_at_ms: e.sampled_at_ms,
                    // f64 → f32 rounds (and saturates to infinity beyond f32::MAX, which
                    // the receiver refuses as not finite).
                    metrics: e
                        .metrics
                        .iter()
                        .map(|(name, m)| (name.clone(), (m.value as f32, m.smoothed as f32)))
                        .collect(),
                })
                .collect(),
            reply: message.reply,
        };
        // Plain data with string keys: MessagePack cannot fail on it.
        (GOSSIP, Bytes::from(encode(&wire).unwrap_or_default()))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<MetricsGossipEnvelope, DecodeError> {
        if manifest != GOSSIP {
            return Err(DecodeError::UnknownManifest(manifest));
        }
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
}

/// Messages for the wire corpus and tests: one round with two entries, one answer.
pub fn samples() -> Vec<MetricsGossipEnvelope> {
    use concord_core::cluster_metrics::names;
    use concord_core::Address;
    let entry = |port: u16, cpu: f64| NodeMetrics {
        node: UniqueAddress::new(Address::new("corpus", "127.0.0.1", port), u64::from(port)),
        sequence: 7,
        sampled_at_ms: 1_700_000_000_000,
        metrics: [
            (names::CPU_COMBINED, cpu),
            (names::SYSTEM_LOAD_AVERAGE, 1.5),
            (names::PROCESSORS, 2.0),
            (names::MEMORY_RSS, 52_428_800.0), // exact in f32
            (names::ENTITIES, 12.0),
        ]
        .into_iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                Metric {
                    value: v,
                    smoothed: v / 2.0,
                },
            )
        })
        .collect(),
    };
    vec![
        MetricsGossipEnvelope {
            entries: vec![entry(25520, 0.25), entry(25521, 0.5)],
            reply: true,
        },
        MetricsGossipEnvelope {
            entries: vec![],
            reply: false,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_is_an_error() {
        let c = ClusterMetricsCodec;
        for m in samples() {
            let (manifest, bytes) = c.encode(&m);
            assert_eq!(c.decode(manifest, &bytes).unwrap(), m);
        }
        assert!(matches!(
            c.decode(GOSSIP, b"\xff\x00garbage"),
            Err(DecodeError::Invalid(_))
        ));
        assert!(matches!(
            c.decode(99, b""),
            Err(DecodeError::UnknownManifest(99))
        ));
        // Any prefix of a good message is an error or a message, never a panic.
        let (_, bytes) = c.encode(&samples()[0]);
        for n in 0..bytes.len() {
            let _ = c.decode(GOSSIP, &bytes[..n]);
        }
    }
}
