//! Round trips of every key-value message through [`KvCodec`], and refusals of bad input;
//! the sample messages are shared with the fuzz tests.

use super::*;
use concord_core::ddata::{ReplicaId, VersionVector};
use concord_core::kv::{Dot, Write};
use concord_core::Address;

fn object() -> Versioned {
    Versioned::of_write(&Write {
        context: VersionVector::new(),
        dot: Dot {
            replica: ReplicaId(9),
            counter: 1,
        },
        value: Some(b"v".to_vec()),
        n: 3,
    })
}

/// One message of every kind (also the fuzz tests' seeds).
pub(crate) fn all_messages() -> Vec<KvMessage> {
    let a = Address::new("s", "10.0.0.1", 25520);
    vec![
        KvMessage::Forward {
            request: 1,
            key: "k".into(),
            value: Some(b"v".to_vec()),
            context: object().clock().clone(),
            n: 3,
            w: 2,
        },
        KvMessage::Forward {
            request: 1,
            key: "k".into(),
            value: None,
            context: VersionVector::new(),
            n: 3,
            w: 2,
        },
        KvMessage::ForwardReply {
            request: 2,
            result: Ok(()),
        },
        KvMessage::ForwardReply {
            request: 2,
            result: Err(KvError::Unavailable(QuorumFailure {
                quorum: "w",
                needed: 2,
                counted: vec![a.clone()],
                uncounted: vec![],
                failed: vec![(a.clone(), "disk full".into())],
                unanswered: vec![a],
            })),
        },
        KvMessage::ForwardReply {
            request: 2,
            result: Err(KvError::Overloaded(7)),
        },
        KvMessage::Put {
            request: 3,
            key: "k".into(),
            object: object(),
        },
        KvMessage::PutReply {
            request: 3,
            result: Err("nope".into()),
        },
        KvMessage::Get {
            request: 4,
            key: "k".into(),
        },
        KvMessage::GetReply {
            request: 4,
            result: Ok(Some(object())),
            complete: true,
        },
        KvMessage::GetReply {
            request: 4,
            result: Ok(None),
            complete: false,
        },
        KvMessage::Repair {
            key: "k".into(),
            object: object(),
        },
        KvMessage::Reap {
            key: "k".into(),
            clock: object().clock().clone(),
        },
        KvMessage::AeGroups {
            session: 5,
            groups: vec![GroupHash {
                segment: 1023,
                n: 3,
                hash: u64::MAX,
            }],
        },
        KvMessage::AeBuckets {
            session: 5,
            groups: vec![GroupBuckets {
                segment: 7,
                n: 3,
                buckets: vec![(63, 1)],
            }],
            truncated: true,
        },
        KvMessage::AeKeys {
            session: 5,
            buckets: vec![BucketKeys {
                segment: 7,
                n: 3,
                bucket: 2,
                keys: vec![("k".into(), 42)],
            }],
        },
        KvMessage::AeObjects {
            session: 5,
            objects: vec![("k".into(), object())],
            want: vec!["j".into()],
        },
        KvMessage::AeWanted {
            session: 5,
            objects: vec![("j".into(), object())],
        },
        KvMessage::Handoff {
            session: 6,
            objects: vec![("k".into(), object())],
        },
        KvMessage::HandoffAck {
            session: 6,
            result: Ok(()),
        },
    ]
}

#[test]
fn every_message_round_trips() {
    for m in all_messages() {
        let (manifest, bytes) = KvCodec.encode(&m);
        assert_eq!(KvCodec.decode_owned(manifest, bytes).unwrap(), m);
    }
}

#[test]
fn invalid_versions_and_unknown_manifests_are_errors() {
    let bad = wire::KvPut {
        request: 1,
        key: "k".into(),
        object: Bytes::from_static(b"\x01\xff\xff"),
    }
    .encode_to_vec();
    assert!(KvCodec.decode_owned(manifest::PUT, bad.into()).is_err());
    assert!(matches!(
        KvCodec.decode_owned(99, Bytes::new()),
        Err(DecodeError::UnknownManifest(99))
    ));
    let wide = wire::KvAeGroups {
        session: 1,
        groups: vec![wire::KvGroupHash {
            segment: 70_000,
            n: 3,
            hash: 0,
        }],
    }
    .encode_to_vec();
    assert!(KvCodec
        .decode_owned(manifest::AE_GROUPS, wide.into())
        .is_err());
}
