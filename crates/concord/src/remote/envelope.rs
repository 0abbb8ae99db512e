//! The envelope every frame carries: one message of one protocol ([`Outbound`] on the way
//! out, [`wire::Envelope`] on the wire), and the length-prefixed frame around it.
//!
//! Frame: 4-byte big-endian length, then the protobuf `Envelope` (protocol id, manifest,
//! payload, recipient uid). See `proto/concord.proto`.

use bytes::{BufMut, Bytes, BytesMut};
use concord_core::{Address, Lane, ProtocolId};
use prost::Message;

use super::wire;

/// Bytes of the length prefix of a frame.
pub const FRAME_HEADER_BYTES: usize = 4;

/// A message on its way to a peer: destination, lane, protocol, manifest and the encoded
/// message (already in the protocol's encoding, see [`super::registry::Codec`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Outbound {
    /// Destination address.
    pub to: Address,
    /// Destination incarnation, when known: another incarnation at `to` does not get it.
    pub to_uid: Option<u64>,
    /// The lane; the transport moves a frame above `maximum-frame-size` to the large lane.
    pub lane: Lane,
    /// The protocol.
    pub protocol: ProtocolId,
    /// The message type within the protocol.
    pub manifest: u32,
    /// The encoded message.
    pub payload: Bytes,
}

impl Outbound {
    fn envelope(&self) -> wire::Envelope {
        wire::Envelope {
            protocol: self.protocol.0,
            manifest: self.manifest,
            payload: self.payload.clone(),
            recipient_uid: self.to_uid.unwrap_or(0),
        }
    }

    /// Size of the frame body (the encoded envelope), bytes.
    pub fn frame_body_len(&self) -> usize {
        self.envelope().encoded_len()
    }

    /// Appends the frame (length prefix + envelope) to `buf`; returns its total size.
    pub fn write_frame(&self, buf: &mut BytesMut) -> usize {
        let env = self.envelope();
        let len = env.encoded_len();
        buf.reserve(FRAME_HEADER_BYTES + len);
        // A frame body larger than u32::MAX never gets here: lanes limit frames to a few MiB.
        buf.put_u32(u32::try_from(len).unwrap_or(u32::MAX));
        // Encoding into a BytesMut with the capacity reserved cannot fail.
        let _ = env.encode(buf);
        FRAME_HEADER_BYTES + len
    }
}

/// Decodes a frame body into an envelope (the payload is a slice of `frame`, not a copy).
pub fn decode_envelope(frame: Bytes) -> Result<wire::Envelope, prost::DecodeError> {
    wire::Envelope::decode(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_round_trip() {
        let o = Outbound {
            to: Address::new("s", "127.0.0.1", 2552),
            to_uid: Some(42),
            lane: Lane::Ordinary,
            protocol: ProtocolId(1000),
            manifest: 3,
            payload: Bytes::from_static(b"hello"),
        };
        let mut buf = BytesMut::new();
        let n = o.write_frame(&mut buf);
        assert_eq!(n, buf.len());
        assert_eq!(n, FRAME_HEADER_BYTES + o.frame_body_len());
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        let env = decode_envelope(buf.freeze().slice(4..4 + len)).unwrap();
        assert_eq!(env.protocol, 1000);
        assert_eq!(env.manifest, 3);
        assert_eq!(env.recipient_uid, 42);
        assert_eq!(&env.payload[..], b"hello");
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_envelope(Bytes::from(bytes));
        }
    }
}
