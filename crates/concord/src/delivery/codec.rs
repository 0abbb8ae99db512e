//! The wire form of the delivery layer ([`concord_core::ProtocolId::DELIVERY`]): manifest
//! 1, a [`DeliveryEnvelope`] as MessagePack with field names (the entity messages' format:
//! fields may be added), the payload as bytes; manifest 2, a
//! [`DeliveryBody::NoEndpoint`] answer (its names only). `NoEndpoint` came after the first
//! release and has a manifest of its own so that a node of an earlier build drops it as an
//! unknown message type (counted, the connection kept) instead of failing to decode manifest
//! 1 (a malformed message closes the connection). Any input decodes to a message or an
//! error, never a panic.

use bytes::Bytes;
use concord_core::delivery::{
    ConsumerMessage, DeliveryBody, DeliveryEnvelope, Incarnation, SequencedMessage,
};
use serde::{Deserialize, Serialize};

use crate::remote::codec::{Codec, DecodeError};
use crate::sharding::entity::{decode, encode};

/// A producer's message or a consumer's answer.
const ENVELOPE: u32 = 1;
/// A node's answer that it has no such endpoint.
const NO_ENDPOINT: u32 = 2;

#[derive(Serialize, Deserialize)]
enum WireBody {
    Sequenced {
        producer_id: String,
        incarnation: Incarnation,
        seq_nr: u64,
        confirmed_seq_nr: u64,
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
    },
    Control(ConsumerMessage),
}

/// Manifest 2: the names of a `NoEndpoint` answer.
#[derive(Serialize, Deserialize)]
struct WireNoEndpoint {
    to: String,
    from: String,
}

#[derive(Serialize, Deserialize)]
struct WireEnvelope {
    to: String,
    from: String,
    body: WireBody,
}

/// The delivery layer's codec.
pub struct DeliveryCodec;

impl Codec for DeliveryCodec {
    type Message = DeliveryEnvelope;

    fn encode(&self, message: &DeliveryEnvelope) -> (u32, Bytes) {
        let body = match &message.body {
            DeliveryBody::NoEndpoint => {
                let wire = WireNoEndpoint {
                    to: message.to.clone(),
                    from: message.from.clone(),
                };
                return (NO_ENDPOINT, Bytes::from(encode(&wire).unwrap_or_default()));
            }
            DeliveryBody::Sequenced(m) => WireBody::Sequenced {
                producer_id: m.producer_id.clone(),
                incarnation: m.incarnation,
                seq_nr: m.seq_nr,
                confirmed_seq_nr: m.confirmed_seq_nr,
                payload: m.payload.clone(),
            },
            DeliveryBody::Control(c) => WireBody::Control(c.clone()),
        };
        let wire = WireEnvelope {
            to: message.to.clone(),
            from: message.from.clone(),
            body,
        };
        // Plain data with string keys: MessagePack cannot fail on it.
        (ENVELOPE, Bytes::from(encode(&wire).unwrap_or_default()))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<DeliveryEnvelope, DecodeError> {
        if manifest == NO_ENDPOINT {
            let wire: WireNoEndpoint = decode(payload).map_err(DecodeError::Invalid)?;
            return Ok(DeliveryEnvelope {
                to: wire.to,
                from: wire.from,
                body: DeliveryBody::NoEndpoint,
            });
        }
        if manifest != ENVELOPE {
            return Err(DecodeError::UnknownManifest(manifest));
        }
        let wire: WireEnvelope = decode(payload).map_err(DecodeError::Invalid)?;
        let body = match wire.body {
            WireBody::Sequenced {
                producer_id,
                incarnation,
                seq_nr,
                confirmed_seq_nr,
                payload,
            } => DeliveryBody::Sequenced(SequencedMessage {
                producer_id,
                incarnation,
                seq_nr,
                confirmed_seq_nr,
                payload,
            }),
            WireBody::Control(c) => DeliveryBody::Control(c),
        };
        Ok(DeliveryEnvelope {
            to: wire.to,
            from: wire.from,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_garbage_is_an_error() {
        let envelope = DeliveryEnvelope {
            to: "worker".into(),
            from: "producer/p".into(),
            body: DeliveryBody::Sequenced(SequencedMessage {
                producer_id: "p".into(),
                incarnation: Incarnation {
                    started_ms: 5,
                    generation: 2,
                    nonce: 9,
                },
                seq_nr: 3,
                confirmed_seq_nr: 2,
                payload: vec![1, 2, 3],
            }),
        };
        let gone = DeliveryEnvelope {
            to: "producer/p".into(),
            from: "worker".into(),
            body: DeliveryBody::NoEndpoint,
        };
        let (m, bytes) = DeliveryCodec.encode(&gone);
        // Its own manifest: an earlier build drops it as unknown, not as malformed.
        assert_eq!(m, NO_ENDPOINT);
        assert_eq!(DeliveryCodec.decode(m, &bytes).unwrap(), gone);
        let (m, bytes) = DeliveryCodec.encode(&envelope);
        assert_eq!(DeliveryCodec.decode(m, &bytes).unwrap(), envelope);
        for garbage in [&b""[..], b"\xff\x00", &bytes[..bytes.len() / 2]] {
            assert!(DeliveryCodec.decode(1, garbage).is_err());
        }
        assert!(matches!(
            DeliveryCodec.decode(3, &bytes),
            Err(DecodeError::UnknownManifest(3))
        ));
    }
}
