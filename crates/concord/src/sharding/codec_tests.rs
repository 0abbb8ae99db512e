//! Tests of the sharding codec: every message round-trips (its bodies also seed the wire
//! fuzz tests), and arbitrary bytes never panic.

use super::*;
use concord_core::ddata::ReplicatorMessage;
use concord_core::singleton::SingletonBody;
use concord_core::Address;
use proptest::prelude::*;

fn node(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("s", "127.0.0.1", 2550 + i), u64::from(i) + 7)
}

/// One message body of every kind (also the seeds of the wire fuzz tests).
pub(crate) fn all_messages() -> Vec<ShardingBody> {
    vec![
        ShardingBody::Register { proxy: true },
        ShardingBody::GetShardHome { shard: "7".into() },
        ShardingBody::ShardStarted { shard: "7".into() },
        ShardingBody::ShardStopped {
            shard: "7".into(),
            handed_to: Some(node(2)),
        },
        ShardingBody::ShardStopped {
            shard: "7".into(),
            handed_to: None,
        },
        ShardingBody::GracefulShutdownReq,
        ShardingBody::RegionStopped,
        ShardingBody::RegisterAck,
        ShardingBody::ShardHomes {
            homes: vec![
                ("1".into(), node(1)),
                ("2".into(), node(2)),
                ("3".into(), node(1)),
            ],
        },
        ShardingBody::ShardHome {
            shard: "7".into(),
            home: node(1),
            previous: Some(node(3)),
        },
        ShardingBody::HostShard {
            shard: "7".into(),
            handoff_from: Some(node(3)),
        },
        ShardingBody::BeginHandOff {
            shard: "7".into(),
            from: node(1),
            to: node(2),
            regions: vec![node(1), node(2), node(3)],
        },
        ShardingBody::HandOff {
            shard: "7".into(),
            to: None,
        },
        ShardingBody::Deliver {
            shard: "7".into(),
            entity: "user-1".into(),
            payload: vec![1, 2, 3],
            origin: Some(node(3)),
            ask: Some(99),
        },
        ShardingBody::Reply {
            ask: 5,
            result: Ok(vec![9]),
        },
        ShardingBody::Reply {
            ask: 5,
            result: Err("buffer full".into()),
        },
        ShardingBody::EntityHandOver {
            shard: "7".into(),
            entity: "user-1".into(),
            state: vec![0; 40],
        },
        ShardingBody::HandOverDone { shard: "7".into() },
        ShardingBody::HandOffAckForward {
            shard: "7".into(),
            region: node(2),
        },
        ShardingBody::BeginHandOffAck { shard: "7".into() },
        ShardingBody::GetShardRegionStats { request: 3 },
        ShardingBody::ShardRegionStats {
            request: 3,
            shards: vec![("1".into(), 10), ("2".into(), 0)],
        },
        ShardingBody::Replicator(ReplicatorMessage::WriteAck { request: 4 }),
        ShardingBody::Singleton(SingletonBody::HandOverToMe),
    ]
}

#[test]
fn every_message_round_trips() {
    for body in all_messages() {
        let m = ShardingMessage {
            type_name: "counter".into(),
            body,
        };
        let (manifest, bytes) = ShardingCodec.encode(&m);
        let back = ShardingCodec
            .decode_owned(manifest, bytes)
            .expect("decodes");
        assert_eq!(back, m);
    }
    assert!(matches!(
        ShardingCodec.decode_owned(999, Bytes::new()),
        Err(DecodeError::UnknownManifest(999))
    ));
}

#[test]
fn a_home_index_out_of_range_is_refused() {
    let bad = wire::ShardingShardHomes {
        type_name: "t".into(),
        regions: vec![],
        homes: vec![wire::ShardingHomeEntry {
            shard: "1".into(),
            region: 3,
        }],
    }
    .encode_to_vec();
    assert!(ShardingCodec
        .decode_owned(manifest::SHARD_HOMES, Bytes::from(bad))
        .is_err());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(manifest in 0u32..30, bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = ShardingCodec.decode_owned(manifest, Bytes::from(bytes));
    }
}
