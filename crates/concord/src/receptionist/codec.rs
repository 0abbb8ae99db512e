//! The wire form of the receptionist protocol ([`ProtocolId::RECEPTIONIST`]): manifest 1,
//! a [`ReceptionistEnvelope`] as MessagePack with field names (fields may be added), the
//! payload as bytes. A key that is not a valid service key id is a decode error. Any input
//! decodes to a message or an error, never a panic.
//!
//! [`ProtocolId::RECEPTIONIST`]: concord_core::ProtocolId::RECEPTIONIST

use bytes::Bytes;
use concord_core::receptionist::{ReceptionistEnvelope, ServiceKeyId};
use serde::{Deserialize, Serialize};

use crate::remote::codec::{Codec, DecodeError};
use crate::sharding::entity::{decode, encode};

/// A message to a registered handle.
pub const ENVELOPE: u32 = 1;

#[derive(Serialize, Deserialize)]
struct WireEnvelope {
    key: String,
    instance: u64,
    #[serde(with = "serde_bytes")]
    payload: Vec<u8>,
}

/// The receptionist's codec.
pub struct ReceptionistCodec;

impl Codec for ReceptionistCodec {
    type Message = ReceptionistEnvelope;

    fn encode(&self, m: &ReceptionistEnvelope) -> (u32, Bytes) {
        let wire = WireEnvelope {
            key: m.key.as_str().to_string(),
            instance: m.instance,
            payload: m.payload.clone(),
        };
        // Plain data with string keys: MessagePack cannot fail on it.
        (ENVELOPE, Bytes::from(encode(&wire).unwrap_or_default()))
    }

    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<ReceptionistEnvelope, DecodeError> {
        if manifest != ENVELOPE {
            return Err(DecodeError::UnknownManifest(manifest));
        }
        let wire: WireEnvelope = decode(payload).map_err(DecodeError::Invalid)?;
        let key = ServiceKeyId::new(&wire.key).map_err(|e| DecodeError::Invalid(e.to_string()))?;
        Ok(ReceptionistEnvelope {
            key,
            instance: wire.instance,
            payload: wire.payload,
        })
    }
}

/// Messages for the wire corpus and tests.
pub fn samples() -> Vec<ReceptionistEnvelope> {
    let key = |k: &str| ServiceKeyId::new(k).unwrap_or_else(|_| unreachable!("valid key"));
    vec![
        ReceptionistEnvelope {
            key: key("pubsub/topic/chat"),
            instance: 3,
            payload: vec![0x92, 0x01, 0x02],
        },
        ReceptionistEnvelope {
            key: key("echo"),
            instance: 0,
            payload: vec![],
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_and_garbage_or_a_bad_key_is_an_error() {
        let c = ReceptionistCodec;
        for m in samples() {
            let (manifest, bytes) = c.encode(&m);
            assert_eq!(c.decode(manifest, &bytes).unwrap(), m);
        }
        assert!(c.decode(ENVELOPE, b"\xc1").is_err());
        assert!(matches!(
            c.decode(2, b""),
            Err(DecodeError::UnknownManifest(2))
        ));
        let bad = encode(&WireEnvelope {
            key: "a b".into(),
            instance: 1,
            payload: vec![],
        })
        .unwrap();
        assert!(matches!(
            c.decode(ENVELOPE, &bad),
            Err(DecodeError::Invalid(_))
        ));
    }
}
