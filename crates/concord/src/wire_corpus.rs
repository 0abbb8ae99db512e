//! The wire compatibility corpus (docs/UPGRADES.md): one of every message of every
//! protocol, as this version encodes it, checked into `crates/concord/wire-corpus/<version>/`
//! (one JSON file per protocol: name, manifest and base64 payload of each message).
//!
//! - Every version's corpus in the repository must decode with this build (a rolling
//!   upgrade has the old and the new version exchange every message), and what it decodes to
//!   must encode to bytes that decode to the same again.
//! - The current version's corpus must equal what this build encodes, message by message:
//!   a change of the bytes of an existing message is a change of the wire format, which
//!   needs a new protocol version (and a refusal at the handshake) or a new message.
//! - Every message type a codec knows must be in the current corpus (found by asking each
//!   codec about manifests 0–255).
//!
//! `CONCORD_WRITE_WIRE_CORPUS=1 cargo test -p concord --lib wire_corpus` adds this build's
//! new messages to the current version's corpus (and never changes an existing entry);
//! `CONCORD_WRITE_WIRE_CORPUS=replace` rewrites it (only for a version not yet released).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::path::{Path, PathBuf};

use base64::Engine;
use bytes::Bytes;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::remote::codec::{Codec, DecodeError};
use crate::remote::wire;

/// One corpus file: a protocol's messages as one version encoded them.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct CorpusFile {
    protocol: String,
    protocol_id: u32,
    /// The handshake's protocol version of the build that wrote it.
    wire_version: u32,
    /// The crate version of the build that wrote it.
    concord_version: String,
    messages: Vec<CorpusEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct CorpusEntry {
    name: String,
    manifest: u32,
    /// Base64 (standard alphabet) of the payload.
    payload: String,
}

/// A protocol's codec as the corpus sees it.
trait CorpusCodec {
    fn protocol(&self) -> &'static str;
    fn protocol_id(&self) -> u32;
    /// This build's samples: (name, manifest, payload).
    fn samples(&self) -> Vec<(String, u32, Vec<u8>)>;
    /// Decodes, then encodes what it decoded.
    fn reencode(&self, manifest: u32, payload: &[u8]) -> Result<(u32, Vec<u8>), String>;
    /// True if the codec knows message type `manifest`.
    fn knows(&self, manifest: u32) -> bool;
}

/// A [`Codec`] and one of each of its messages.
struct Of<C: Codec> {
    protocol: &'static str,
    id: u32,
    codec: C,
    samples: Vec<C::Message>,
}

/// `Variant` of a message's `Debug` text (`Variant { .. }`, `Variant(..)`, `Variant`), or of
/// its body's (`Message { name: "s", body: Variant .. }`).
fn variant_name(debug: &str) -> String {
    let s = debug.split("body: ").nth(1).unwrap_or(debug);
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

impl<C: Codec> CorpusCodec for Of<C>
where
    C::Message: Debug + PartialEq,
{
    fn protocol(&self) -> &'static str {
        self.protocol
    }

    fn protocol_id(&self) -> u32 {
        self.id
    }

    fn samples(&self) -> Vec<(String, u32, Vec<u8>)> {
        self.samples
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let (manifest, bytes) = self.codec.encode(m);
                let decoded = self
                    .codec
                    .decode_owned(manifest, bytes.clone())
                    .expect("a sample decodes");
                assert_eq!(&decoded, m, "{} sample {i} round-trips", self.protocol);
                (
                    format!("{i:02}-{}", variant_name(&format!("{m:?}"))),
                    manifest,
                    bytes.to_vec(),
                )
            })
            .collect()
    }

    fn reencode(&self, manifest: u32, payload: &[u8]) -> Result<(u32, Vec<u8>), String> {
        let m = self
            .codec
            .decode_owned(manifest, Bytes::copy_from_slice(payload))
            .map_err(|e| e.to_string())?;
        let (m2, bytes) = self.codec.encode(&m);
        let again = self
            .codec
            .decode_owned(m2, bytes.clone())
            .map_err(|e| format!("re-encoded, it no longer decodes: {e}"))?;
        if again != m {
            return Err(format!("re-encoded, it decodes to {again:?}, not {m:?}"));
        }
        Ok((m2, bytes.to_vec()))
    }

    fn knows(&self, manifest: u32) -> bool {
        !matches!(
            self.codec.decode_owned(manifest, Bytes::new()),
            Err(DecodeError::UnknownManifest(_))
        )
    }
}

/// The remoting handshake and envelope (protobuf, `remote.proto`): manifests are this
/// corpus's own numbering of the five messages.
struct Remoting;

const REMOTING_MESSAGES: [&str; 5] = [
    "Handshake",
    "HandshakeReply",
    "SecretChallenge",
    "SecretProof",
    "Envelope",
];

impl Remoting {
    fn decode_encode(manifest: u32, payload: &[u8]) -> Result<Vec<u8>, String> {
        fn re<M: Message + Default + PartialEq + Debug>(p: &[u8]) -> Result<Vec<u8>, String> {
            let m = M::decode(p).map_err(|e| e.to_string())?;
            let bytes = m.encode_to_vec();
            let again = M::decode(bytes.as_slice()).map_err(|e| e.to_string())?;
            if again != m {
                return Err(format!("re-encoded, it decodes to {again:?}, not {m:?}"));
            }
            Ok(bytes)
        }
        match manifest {
            1 => re::<wire::Handshake>(payload),
            2 => re::<wire::HandshakeReply>(payload),
            3 => re::<wire::SecretChallenge>(payload),
            4 => re::<wire::SecretProof>(payload),
            5 => re::<wire::Envelope>(payload),
            m => Err(format!("unknown remoting message {m}")),
        }
    }
}

impl CorpusCodec for Remoting {
    fn protocol(&self) -> &'static str {
        "remoting"
    }

    fn protocol_id(&self) -> u32 {
        0
    }

    fn samples(&self) -> Vec<(String, u32, Vec<u8>)> {
        let addr = |port: u32| wire::Address {
            system: "corpus".into(),
            host: "10.0.0.1".into(),
            port,
        };
        let from = wire::UniqueAddress {
            address: Some(addr(25520)),
            uid: 42,
        };
        let handshake = wire::Handshake {
            from: Some(from.clone()),
            to: Some(addr(25521)),
            protocol_version: crate::remote::PROTOCOL_VERSION,
            cluster_name: "corpus".into(),
            lane: 1,
            nonce: Bytes::from(vec![7u8; 32]),
        };
        let replies = [
            wire::handshake_reply::Result::Accepted(from.clone()),
            wire::handshake_reply::Result::Rejected("cluster name differs".into()),
            wire::handshake_reply::Result::Challenge(wire::SecretChallenge {
                nonce: Bytes::from(vec![1u8; 32]),
                proof: Bytes::from(vec![2u8; 32]),
            }),
        ];
        let mut out = vec![("00-Handshake".to_string(), 1, handshake.encode_to_vec())];
        for (i, r) in replies.into_iter().enumerate() {
            let reply = wire::HandshakeReply {
                result: Some(r),
                quarantined: i == 1,
            };
            out.push((
                format!("{:02}-HandshakeReply", i + 1),
                2,
                reply.encode_to_vec(),
            ));
        }
        out.push((
            "04-SecretChallenge".into(),
            3,
            wire::SecretChallenge {
                nonce: Bytes::from(vec![3u8; 32]),
                proof: Bytes::from(vec![4u8; 32]),
            }
            .encode_to_vec(),
        ));
        out.push((
            "05-SecretProof".into(),
            4,
            wire::SecretProof {
                proof: Bytes::from(vec![5u8; 32]),
            }
            .encode_to_vec(),
        ));
        out.push((
            "06-Envelope".into(),
            5,
            wire::Envelope {
                protocol: 4,
                manifest: 3,
                payload: Bytes::from_static(b"payload"),
                recipient_uid: 42,
                trace: Bytes::new(),
            }
            .encode_to_vec(),
        ));
        out.push((
            "07-Envelope".into(),
            5,
            wire::Envelope {
                protocol: 4,
                manifest: 3,
                payload: Bytes::from_static(b"traced"),
                recipient_uid: 42,
                trace: Bytes::copy_from_slice(
                    &crate::host::TraceContext {
                        trace_id: [0xab; 16],
                        span_id: [0xcd; 8],
                        flags: 1,
                    }
                    .to_bytes(),
                ),
            }
            .encode_to_vec(),
        ));
        out
    }

    fn reencode(&self, manifest: u32, payload: &[u8]) -> Result<(u32, Vec<u8>), String> {
        if manifest == 5 {
            // The inbound hot path reads envelopes with its own decoder: the same answer.
            let frames = Bytes::copy_from_slice(payload);
            let by_hand = crate::remote::envelope::decode_envelope_at(&frames, 0, frames.len())
                .map_err(|e| e.to_string())?;
            let by_prost = wire::Envelope::decode(payload).map_err(|e| e.to_string())?;
            if by_hand != by_prost {
                return Err(format!(
                    "the hot path reads {by_hand:?}, prost {by_prost:?}"
                ));
            }
        }
        Remoting::decode_encode(manifest, payload).map(|b| (manifest, b))
    }

    fn knows(&self, manifest: u32) -> bool {
        (1..=REMOTING_MESSAGES.len() as u32).contains(&manifest)
    }
}

fn delivery_samples() -> Vec<concord_core::delivery::DeliveryEnvelope> {
    use concord_core::delivery::{
        ConsumerMessage, DeliveryBody, DeliveryEnvelope, Incarnation, SequencedMessage,
    };
    let inc = Incarnation {
        started_ms: 5,
        generation: 2,
        nonce: 9,
    };
    let envelope = |body| DeliveryEnvelope {
        to: "worker".into(),
        from: "producer/p".into(),
        body,
    };
    vec![
        envelope(DeliveryBody::Sequenced(SequencedMessage {
            producer_id: "p".into(),
            incarnation: inc,
            seq_nr: 3,
            confirmed_seq_nr: 2,
            payload: vec![1, 2, 3],
        })),
        envelope(DeliveryBody::Control(ConsumerMessage::Request {
            incarnation: inc,
            confirmed_seq_nr: 2,
            request_up_to_seq_nr: 52,
        })),
        envelope(DeliveryBody::Control(ConsumerMessage::Resend {
            incarnation: inc,
            from_seq_nr: 3,
        })),
        envelope(DeliveryBody::Control(ConsumerMessage::Stale {
            current: inc,
        })),
        envelope(DeliveryBody::NoEndpoint),
    ]
}

/// Every protocol's codec with its samples.
fn codecs() -> Vec<Box<dyn CorpusCodec>> {
    use concord_core::ProtocolId;
    let singleton = crate::singleton::codec::tests::all_bodies()
        .into_iter()
        .map(|body| concord_core::singleton::SingletonMessage {
            name: "s".into(),
            body,
        })
        .collect();
    let sharding = crate::sharding::codec::tests::all_messages()
        .into_iter()
        .map(|body| concord_core::sharding::ShardingMessage {
            type_name: "counter".into(),
            body,
        })
        .collect();
    vec![
        Box::new(Remoting),
        Box::new(Of {
            protocol: "membership",
            id: ProtocolId::MEMBERSHIP.0,
            codec: crate::cluster::codec::MembershipCodec::default(),
            samples: crate::cluster::codec::tests::all_messages(),
        }),
        Box::new(Of {
            protocol: "singleton",
            id: ProtocolId::SINGLETON.0,
            codec: crate::singleton::codec::SingletonCodec,
            samples: singleton,
        }),
        Box::new(Of {
            protocol: "ddata",
            id: ProtocolId::DISTRIBUTED_DATA.0,
            codec: crate::ddata::codec::ReplicatorCodec,
            samples: crate::ddata::codec::tests::all_messages(),
        }),
        Box::new(Of {
            protocol: "sharding",
            id: ProtocolId::SHARDING.0,
            codec: crate::sharding::codec::ShardingCodec,
            samples: sharding,
        }),
        Box::new(Of {
            protocol: "kv",
            id: ProtocolId::KEY_VALUE.0,
            codec: crate::kv::codec::KvCodec,
            samples: crate::kv::codec::tests::all_messages(),
        }),
        Box::new(Of {
            protocol: "journal",
            id: ProtocolId::JOURNAL.0,
            codec: crate::persistence::replicated::JournalCodec,
            samples: crate::persistence::replicated::codec::tests::all_messages(),
        }),
        Box::new(Of {
            protocol: "delivery",
            id: ProtocolId::DELIVERY.0,
            codec: crate::delivery::codec::DeliveryCodec,
            samples: delivery_samples(),
        }),
        Box::new(Of {
            protocol: "cluster-metrics",
            id: ProtocolId::CLUSTER_METRICS.0,
            codec: crate::cluster_metrics::codec::ClusterMetricsCodec,
            samples: crate::cluster_metrics::codec::samples(),
        }),
        Box::new(Of {
            protocol: "receptionist",
            id: ProtocolId::RECEPTIONIST.0,
            codec: crate::receptionist::codec::ReceptionistCodec,
            samples: crate::receptionist::codec::samples(),
        }),
        Box::new(Of {
            protocol: "services",
            id: ProtocolId::SERVICES.0,
            codec: crate::services::codec::ServicesCodec,
            samples: crate::services::codec::samples(),
        }),
    ]
}

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("wire-corpus")
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn file_of(c: &dyn CorpusCodec, messages: Vec<CorpusEntry>) -> CorpusFile {
    CorpusFile {
        protocol: c.protocol().into(),
        protocol_id: c.protocol_id(),
        wire_version: crate::remote::PROTOCOL_VERSION,
        concord_version: VERSION.into(),
        messages,
    }
}

fn read(path: &Path) -> CorpusFile {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a corpus: {e}", path.display()))
}

/// Adds this build's new messages to the current version's corpus (`replace`: rewrites it).
fn write_current(replace: bool) {
    let dir = corpus_root().join(VERSION);
    std::fs::create_dir_all(&dir).unwrap();
    for c in codecs() {
        let path = dir.join(format!("{}.json", c.protocol()));
        let mut entries: BTreeMap<String, CorpusEntry> = BTreeMap::new();
        if path.exists() && !replace {
            for e in read(&path).messages {
                entries.insert(e.name.clone(), e);
            }
        }
        for (name, manifest, payload) in c.samples() {
            let e = CorpusEntry {
                name: name.clone(),
                manifest,
                payload: b64().encode(&payload),
            };
            match entries.get(&name) {
                Some(old) if *old != e => panic!(
                    "{}: {name} is encoded differently from the corpus of {VERSION}; a change of \
                     an existing message's bytes needs a new version (docs/UPGRADES.md)",
                    c.protocol()
                ),
                _ => {
                    entries.insert(name, e);
                }
            }
        }
        let file = file_of(c.as_ref(), entries.into_values().collect());
        std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap() + "\n").unwrap();
    }
}

/// The versions with a corpus in the repository, sorted.
fn versions() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(corpus_root())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn every_versions_corpus_decodes_and_the_current_one_is_what_this_build_encodes() {
    match std::env::var("CONCORD_WRITE_WIRE_CORPUS").as_deref() {
        Ok("replace") => write_current(true),
        Ok(_) => write_current(false),
        Err(_) => {}
    }
    let versions = versions();
    assert!(
        versions.iter().any(|v| v == VERSION),
        "no wire corpus for this version ({VERSION}) under {}: run \
         CONCORD_WRITE_WIRE_CORPUS=1 cargo test -p concord --lib wire_corpus",
        corpus_root().display()
    );
    let codecs = codecs();
    let mut checked = 0;
    for version in &versions {
        for c in &codecs {
            let path = corpus_root()
                .join(version)
                .join(format!("{}.json", c.protocol()));
            if !path.exists() {
                // A protocol newer than that version.
                assert_ne!(version, VERSION, "{} is missing", path.display());
                continue;
            }
            let file = read(&path);
            assert_eq!(file.protocol, c.protocol(), "{}", path.display());
            assert_eq!(file.protocol_id, c.protocol_id(), "{}", path.display());
            for e in &file.messages {
                let payload = b64().decode(&e.payload).unwrap_or_else(|err| {
                    panic!("{}: {}: bad base64: {err}", path.display(), e.name)
                });
                if let Err(why) = c.reencode(e.manifest, &payload) {
                    panic!(
                        "{version} {} message {} (manifest {}) does not decode with this build: {why}",
                        c.protocol(),
                        e.name,
                        e.manifest
                    );
                }
                checked += 1;
            }
            if version == VERSION {
                let on_disk: BTreeMap<&str, &CorpusEntry> =
                    file.messages.iter().map(|e| (e.name.as_str(), e)).collect();
                for (name, manifest, payload) in c.samples() {
                    let Some(e) = on_disk.get(name.as_str()) else {
                        panic!(
                            "{} message {name} is not in the corpus of {VERSION}: run \
                             CONCORD_WRITE_WIRE_CORPUS=1 cargo test -p concord --lib wire_corpus",
                            c.protocol()
                        );
                    };
                    assert_eq!(
                        (e.manifest, e.payload.as_str()),
                        (manifest, b64().encode(&payload).as_str()),
                        "{} message {name}: this build encodes it differently from the corpus \
                         of {VERSION}; a change of an existing message's bytes needs a new \
                         version (docs/UPGRADES.md)",
                        c.protocol()
                    );
                }
                let samples = c.samples();
                for manifest in 0..=255 {
                    if c.knows(manifest) {
                        assert!(
                            samples.iter().any(|s| s.1 == manifest),
                            "{} knows message type {manifest}, which has no sample (so none \
                             in the corpus of {VERSION})",
                            c.protocol()
                        );
                    }
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} messages checked");
}

#[test]
fn a_message_whose_bytes_changed_or_that_does_not_decode_is_caught() {
    let c = Of {
        protocol: "delivery",
        id: 7,
        codec: crate::delivery::codec::DeliveryCodec,
        samples: delivery_samples(),
    };
    let (_, manifest, payload) = c.samples().remove(0);
    assert!(c.reencode(manifest, &payload).is_ok());
    assert!(c.reencode(manifest, &payload[..payload.len() / 2]).is_err());
    assert!(c.reencode(99, &payload).is_err());
    assert!(c.knows(manifest) && !c.knows(99));
    assert_eq!(
        variant_name("Sequenced(SequencedMessage { .. })"),
        "Sequenced"
    );
    assert_eq!(
        variant_name("SingletonMessage { name: \"s\", body: Deliver { seq: 1 } }"),
        "Deliver"
    );
}
