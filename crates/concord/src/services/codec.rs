//! The wire form of the partitioned-services protocol ([`ProtocolId::SERVICES`]): manifest
//! 1, a [`ServicesMessage`] as MessagePack with field names (the entity messages' format:
//! fields may be added, unknown ones are ignored), payloads as bytes. Paths are checked on
//! decoding ([`PartitionPath`]'s rules); any input decodes to a message or an error, never
//! a panic. The machine bounds what decodes (`max-services`, `buffer-size`, hops).
//!
//! [`ProtocolId::SERVICES`]: concord_core::ProtocolId::SERVICES

use bytes::Bytes;
use concord_core::services::{
    PartitionChange, PartitionPath, PartitionTable, ServicesMessage, ServicesState,
};
use concord_core::{Address, UniqueAddress};

use crate::remote::codec::{Codec, DecodeError};
use crate::sharding::entity::{decode, encode};

/// A services message.
pub const MESSAGE: u32 = 1;

/// The partitioned-services codec.
pub struct ServicesCodec;

impl Codec for ServicesCodec {
    type Message = ServicesMessage;

    fn encode(&self, message: &ServicesMessage) -> (u32, Bytes) {
        // Plain data with string keys: MessagePack cannot fail on it.
        (MESSAGE, Bytes::from(encode(message).unwrap_or_default()))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<ServicesMessage, DecodeError> {
        if manifest != MESSAGE {
            return Err(DecodeError::UnknownManifest(manifest));
        }
        decode(payload).map_err(DecodeError::Invalid)
    }
}

/// One message of each kind, for the wire corpus and tests.
pub fn samples() -> Vec<ServicesMessage> {
    let node = |port| UniqueAddress::new(Address::new("concord", "10.0.0.1", port), 7);
    let path = |p: &str| PartitionPath::new(p).unwrap_or_else(|_| unreachable!("valid path"));
    let change = PartitionChange::awaiting(path("echo"), Some(node(1)), node(2));
    let table: PartitionTable = [(path("echo"), vec![node(1), node(3)])]
        .into_iter()
        .collect();
    vec![
        ServicesMessage::Status {
            version: 4,
            writer: Some(node(1)),
        },
        ServicesMessage::State(ServicesState {
            version: 4,
            writer: Some(node(1)),
            table,
            pending: vec![change.clone()],
        }),
        ServicesMessage::Report {
            offers: vec![path("echo"), path("games/lobby")],
            depths: vec![(path("echo"), 3)],
            draining: false,
            version: 4,
            writer: Some(node(1)),
        },
        ServicesMessage::Prepare {
            path: path("echo"),
            version: 4,
        },
        ServicesMessage::Ready { path: path("echo") },
        ServicesMessage::HandOver { path: path("echo") },
        ServicesMessage::Complete { change },
        ServicesMessage::Deliver {
            path: path("echo"),
            payload: vec![0x92, 0x01, 0x02],
            hold_for: Some(node(1)),
        },
        ServicesMessage::Forward {
            path: path("echo"),
            sender: node(3),
            payload: vec![1],
            hops: 1,
        },
        ServicesMessage::Flush {
            path: path("echo"),
            next: node(2),
        },
        ServicesMessage::Drained {
            path: path("echo"),
            sender: node(3),
        },
        ServicesMessage::Reply {
            id: 9,
            payload: vec![0xc0],
            error: None,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_garbage_or_a_bad_path_is_an_error() {
        let c = ServicesCodec;
        for m in samples() {
            let (manifest, bytes) = c.encode(&m);
            assert_eq!(c.decode(manifest, &bytes).unwrap(), m, "{}", m.kind());
        }
        assert!(c.decode(MESSAGE, b"\xc1").is_err());
        assert!(c.decode(MESSAGE, b"").is_err());
        assert!(matches!(
            c.decode(2, b""),
            Err(DecodeError::UnknownManifest(2))
        ));
        // A path with `..` does not decode.
        let wire = rmp_serde::to_vec_named(&serde_json::json!({"Ready": {"path": ".."}})).unwrap();
        assert!(c.decode(MESSAGE, &wire).is_err());
    }
}
