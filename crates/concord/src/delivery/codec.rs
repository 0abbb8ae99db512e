//! The wire form of the delivery layer ([`concord_core::ProtocolId::DELIVERY`]): manifest
//! 1, a [`DeliveryEnvelope`] as MessagePack with field names (the entity messages' format:
//! fields may be added), the payload as bytes. Any input decodes to a message or an error,
//! never a panic.

use bytes::Bytes;
use concord_core::delivery::{
    ConsumerMessage, DeliveryBody, DeliveryEnvelope, Incarnation, SequencedMessage,
};
use serde::{Deserialize, Serialize};

use crate::remote::codec::{Codec, DecodeError};
use crate::sharding::entity::{decode, encode};

/// The one manifest.
const ENVELOPE: u32 = 1;

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
    /// Added after the first release: a node of an earlier build fails to decode it
    /// (counted as malformed, dropped), and its producers resend as before.
    NoEndpoint,
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
            DeliveryBody::Sequenced(m) => WireBody::Sequenced {
                producer_id: m.producer_id.clone(),
                incarnation: m.incarnation,
                seq_nr: m.seq_nr,
                confirmed_seq_nr: m.confirmed_seq_nr,
                payload: m.payload.clone(),
            },
            DeliveryBody::Control(c) => WireBody::Control(c.clone()),
            DeliveryBody::NoEndpoint => WireBody::NoEndpoint,
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
            WireBody::NoEndpoint => DeliveryBody::NoEndpoint,
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
        assert_eq!(DeliveryCodec.decode(m, &bytes).unwrap(), gone);
        let (m, bytes) = DeliveryCodec.encode(&envelope);
        assert_eq!(DeliveryCodec.decode(m, &bytes).unwrap(), envelope);
        for garbage in [&b""[..], b"\xff\x00", &bytes[..bytes.len() / 2]] {
            assert!(DeliveryCodec.decode(1, garbage).is_err());
        }
        assert!(matches!(
            DeliveryCodec.decode(2, &bytes),
            Err(DecodeError::UnknownManifest(2))
        ));
    }
}
