//! The envelope every frame carries: one message of one protocol — [`Frame`] (protocol id,
//! manifest, recipient uid, payload) and [`Outbound`] (a frame plus its destination and
//! lane) on the way out, [`wire::Envelope`] on the wire — and the length prefix around it.
//!
//! Frame: 4-byte big-endian length, then the protobuf `Envelope`. See `remote.proto`.

use bytes::{Bytes, BytesMut};
use concord_core::{Address, Lane, ProtocolId};
use prost::Message;

use super::wire;
use concord_core::TraceContext;

/// Bytes of the length prefix of a frame.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Upper bound of what an envelope adds to its payload (tags, lengths, ids, a trace
/// context), bytes.
pub const ENVELOPE_OVERHEAD_MAX: usize = 64;

/// The contents of one envelope: a message of a protocol, already in the protocol's
/// encoding (see [`super::registry::Codec`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// The protocol.
    pub protocol: ProtocolId,
    /// The message type within the protocol.
    pub manifest: u32,
    /// The incarnation it is for; 0: whichever has the address.
    pub recipient_uid: u64,
    /// The encoded message.
    pub payload: Bytes,
    /// The W3C trace context of a traced message (field 5; absent when not tracing).
    pub trace: Option<TraceContext>,
}

/// Field keys of `Envelope` (field number << 3 | wire type).
const KEY_PROTOCOL: u8 = 1 << 3; // varint
const KEY_MANIFEST: u8 = 2 << 3; // varint
const KEY_PAYLOAD: u8 = (3 << 3) | 2; // length-delimited
const KEY_RECIPIENT_UID: u8 = (4 << 3) | 1; // fixed64
const KEY_TRACE: u8 = (5 << 3) | 2; // length-delimited

impl Frame {
    /// Size of the frame body (the encoded envelope), bytes.
    pub fn body_len(&self) -> usize {
        use prost::encoding::encoded_len_varint;
        let mut n = 0;
        if self.protocol.0 != 0 {
            n += 1 + encoded_len_varint(u64::from(self.protocol.0));
        }
        if self.manifest != 0 {
            n += 1 + encoded_len_varint(u64::from(self.manifest));
        }
        if !self.payload.is_empty() {
            n += 1 + encoded_len_varint(self.payload.len() as u64) + self.payload.len();
        }
        if self.recipient_uid != 0 {
            n += 1 + 8;
        }
        if self.trace.is_some() {
            n += 2 + TraceContext::WIRE_BYTES;
        }
        n
    }

    /// Appends the frame (length prefix + envelope) to `buf`; returns its total size. The
    /// envelope is written field by field, byte for byte what prost writes for
    /// [`wire::Envelope`] (a test checks it), without building the message.
    pub fn write(self, buf: &mut BytesMut) -> usize {
        // The length prefix and every field before the payload go onto the stack first,
        // so a frame is three appends (head, payload, uid), not one per byte; the length
        // follows from the head, so it is not computed beforehand.
        let mut head = [0u8; HEAD_MAX];
        let mut at = FRAME_HEADER_BYTES;
        if self.protocol.0 != 0 {
            head[at] = KEY_PROTOCOL;
            at = put_varint(&mut head, at + 1, u64::from(self.protocol.0));
        }
        if self.manifest != 0 {
            head[at] = KEY_MANIFEST;
            at = put_varint(&mut head, at + 1, u64::from(self.manifest));
        }
        if !self.payload.is_empty() {
            head[at] = KEY_PAYLOAD;
            at = put_varint(&mut head, at + 1, self.payload.len() as u64);
        }
        let uid_bytes = if self.recipient_uid != 0 { 9 } else { 0 };
        let trace_bytes = if self.trace.is_some() {
            2 + TraceContext::WIRE_BYTES
        } else {
            0
        };
        let total = at + self.payload.len() + uid_bytes + trace_bytes;
        // Lanes limit frames to a few MiB, far below u32::MAX.
        let len = u32::try_from(total - FRAME_HEADER_BYTES).unwrap_or(u32::MAX);
        head[..FRAME_HEADER_BYTES].copy_from_slice(&len.to_be_bytes());
        buf.reserve(total);
        buf.extend_from_slice(&head[..at]);
        buf.extend_from_slice(&self.payload);
        if uid_bytes != 0 {
            let mut uid = [KEY_RECIPIENT_UID; 9];
            uid[1..].copy_from_slice(&self.recipient_uid.to_le_bytes());
            buf.extend_from_slice(&uid);
        }
        if let Some(t) = self.trace {
            buf.extend_from_slice(&[KEY_TRACE, TraceContext::WIRE_BYTES as u8]);
            buf.extend_from_slice(&t.to_bytes());
        }
        total
    }
}

/// Largest head [`Frame::write`] puts before the payload: the length prefix, then three
/// keys with a varint each (protocol and manifest ≤ 5 bytes, the payload's length ≤ 10).
const HEAD_MAX: usize = FRAME_HEADER_BYTES + (1 + 5) + (1 + 5) + (1 + 10);

/// Writes `v` as a protobuf varint into `out` from `at`; returns the index after it.
/// `out` has room: callers size it for the largest varint of the field.
fn put_varint(out: &mut [u8; HEAD_MAX], mut at: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        out[at] = (v as u8) | 0x80;
        v >>= 7;
        at += 1;
    }
    out[at] = v as u8;
    at + 1
}

/// A message on its way to a peer: destination, lane and the envelope's contents.
#[derive(Clone, Debug, PartialEq)]
pub struct Outbound {
    /// Destination address.
    pub to: Address,
    /// Destination incarnation, when known: another incarnation at `to` drops it.
    pub to_uid: Option<u64>,
    /// The lane; the transport moves a frame above `maximum-frame-size` to the large lane.
    pub lane: Lane,
    /// The protocol.
    pub protocol: ProtocolId,
    /// The message type within the protocol.
    pub manifest: u32,
    /// The encoded message.
    pub payload: Bytes,
    /// The trace context to send it with (absent when not tracing).
    pub trace: Option<TraceContext>,
}

impl Outbound {
    /// The envelope's contents.
    pub fn frame(&self) -> Frame {
        Frame {
            protocol: self.protocol,
            manifest: self.manifest,
            recipient_uid: self.to_uid.unwrap_or(0),
            payload: self.payload.clone(),
            trace: self.trace,
        }
    }

    /// Destination, lane and the envelope's contents.
    pub fn into_parts(self) -> (Address, Lane, Frame) {
        let frame = Frame {
            protocol: self.protocol,
            manifest: self.manifest,
            recipient_uid: self.to_uid.unwrap_or(0),
            payload: self.payload,
            trace: self.trace,
        };
        (self.to, self.lane, frame)
    }
}

/// Decodes a frame body into an envelope (the payload is a slice of `frame`, not a copy).
pub fn decode_envelope(frame: Bytes) -> Result<wire::Envelope, prost::DecodeError> {
    wire::Envelope::decode(frame)
}

/// Decodes the envelope in `frames[start..end]` in place: the same result as
/// [`decode_envelope`] on that slice, with the payload as one slice of `frames`.
pub fn decode_envelope_at(
    frames: &Bytes,
    start: usize,
    end: usize,
) -> Result<wire::Envelope, prost::DecodeError> {
    match decode_envelope_head_at(frames, start, end) {
        Ok(head) => Ok(wire::Envelope {
            protocol: head.protocol,
            manifest: head.manifest,
            recipient_uid: head.recipient_uid,
            payload: frames.slice(head.payload),
            trace: head
                .trace
                .map(|t| Bytes::copy_from_slice(&t.to_bytes()))
                .unwrap_or_default(),
        }),
        // The generated decoder reports why.
        Err(_) => wire::Envelope::decode(frames.get(start..end).unwrap_or(&[0xff_u8])),
    }
}

/// An envelope read in place: its fields, and where its payload lies in the frames it was
/// read from (byte offsets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvelopeHead {
    /// The protocol id.
    pub protocol: u32,
    /// The message type within the protocol.
    pub manifest: u32,
    /// The recipient's incarnation (0: any).
    pub recipient_uid: u64,
    /// The payload's offsets in the frames.
    pub payload: std::ops::Range<usize>,
    /// The trace context, when the envelope carries a valid one.
    pub trace: Option<TraceContext>,
}

/// Decodes the envelope in `frames[start..end]` without copying or slicing anything: the
/// inbound hot path, which hands each payload to its codec as a borrowed range of the read
/// chunk (a reference-counted slice only for a codec that keeps payloads). Accepts and
/// refuses exactly what [`decode_envelope`] does on that slice.
///
/// # Errors
/// [`MalformedEnvelope`] if the bytes are not an envelope (or the range is outside
/// `frames`).
pub fn decode_envelope_head_at(
    frames: &[u8],
    start: usize,
    end: usize,
) -> Result<EnvelopeHead, MalformedEnvelope> {
    use prost::encoding::{check_wire_type, decode_key, decode_varint, skip_field};
    use prost::encoding::{DecodeContext, WireType};

    let mut head = EnvelopeHead {
        protocol: 0,
        manifest: 0,
        recipient_uid: 0,
        payload: end..end,
        trace: None,
    };
    let Some(mut buf) = frames.get(start..end) else {
        return Err(MalformedEnvelope(None));
    };
    while !buf.is_empty() {
        let (tag, wire_type) = decode_key(&mut buf)?;
        match tag {
            1 | 2 => {
                check_wire_type(WireType::Varint, wire_type)?;
                let v = decode_varint(&mut buf)?;
                if tag == 1 {
                    head.protocol = v as u32;
                } else {
                    head.manifest = v as u32;
                }
            }
            4 => {
                check_wire_type(WireType::SixtyFourBit, wire_type)?;
                let Some((uid, rest)) = buf.split_first_chunk::<8>() else {
                    return Err(MalformedEnvelope(None));
                };
                head.recipient_uid = u64::from_le_bytes(*uid);
                buf = rest;
            }
            3 => {
                check_wire_type(WireType::LengthDelimited, wire_type)?;
                let len = decode_varint(&mut buf)?;
                let Some(len) = usize::try_from(len).ok().filter(|l| *l <= buf.len()) else {
                    return Err(MalformedEnvelope(None));
                };
                let at = end - buf.len();
                head.payload = at..at + len;
                buf = &buf[len..];
            }
            5 => {
                check_wire_type(WireType::LengthDelimited, wire_type)?;
                let len = decode_varint(&mut buf)?;
                let Some(len) = usize::try_from(len).ok().filter(|l| *l <= buf.len()) else {
                    return Err(MalformedEnvelope(None));
                };
                // An invalid context is ignored, as W3C asks; the message is not.
                head.trace = TraceContext::from_bytes(&buf[..len]);
                buf = &buf[len..];
            }
            _ => skip_field(wire_type, tag, &mut buf, DecodeContext::default())?,
        }
    }
    Ok(head)
}

/// Bytes that are not an envelope: the decoder's error, or `None` for a field that runs
/// past the frame's end.
#[derive(Debug, thiserror::Error)]
#[error("malformed envelope{}", .0.as_ref().map(|e| format!(": {e}")).unwrap_or_else(|| ": a field runs past the frame's end".into()))]
pub struct MalformedEnvelope(Option<prost::DecodeError>);

impl From<prost::DecodeError> for MalformedEnvelope {
    fn from(e: prost::DecodeError) -> Self {
        MalformedEnvelope(Some(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn frames_round_trip() {
        let f = Frame {
            protocol: ProtocolId(1000),
            manifest: 3,
            recipient_uid: 42,
            payload: Bytes::from_static(b"hello"),
            trace: None,
        };
        let body = f.body_len();
        let mut buf = BytesMut::new();
        let n = f.write(&mut buf);
        assert_eq!(n, buf.len());
        assert_eq!(n, FRAME_HEADER_BYTES + body);
        assert!(body <= 5 + ENVELOPE_OVERHEAD_MAX);
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

        #[test]
        fn decoding_in_place_equals_the_generated_decoder(
            prefix in proptest::collection::vec(any::<u8>(), 0..8),
            body in proptest::collection::vec(any::<u8>(), 0..128),
        ) {
            let mut all = prefix.clone();
            all.extend_from_slice(&body);
            let frames = Bytes::from(all);
            let a = decode_envelope_at(&frames, prefix.len(), frames.len());
            let b = decode_envelope(Bytes::from(body));
            prop_assert_eq!(a.is_ok(), b.is_ok());
            if let (Ok(a), Ok(b)) = (a, b) {
                prop_assert_eq!(a, b);
            }
        }

        #[test]
        fn encoded_frames_decode_in_place(protocol in any::<u32>(), manifest in any::<u32>(), uid in any::<u64>(), payload in proptest::collection::vec(any::<u8>(), 0..300)) {
            let f = Frame { protocol: ProtocolId(protocol), manifest, recipient_uid: uid, payload: Bytes::from(payload.clone()), trace: None };
            let mut buf = BytesMut::new();
            let n = f.write(&mut buf);
            let frames = buf.freeze();
            let env = decode_envelope_at(&frames, FRAME_HEADER_BYTES, n).unwrap();
            prop_assert_eq!((env.protocol, env.manifest, env.recipient_uid), (protocol, manifest, uid));
            prop_assert_eq!(&env.payload[..], &payload[..]);
        }

        #[test]
        fn writing_by_hand_gives_prosts_bytes(protocol in any::<u32>(), manifest in any::<u32>(), uid in any::<u64>(), payload in proptest::collection::vec(any::<u8>(), 0..300), ids in any::<(u128, u64, u8)>()) {
            let trace = TraceContext::from_bytes(&[&ids.0.to_le_bytes()[..], &ids.1.to_le_bytes()[..], &[ids.2]].concat());
            let f = Frame { protocol: ProtocolId(protocol), manifest, recipient_uid: uid, payload: Bytes::from(payload.clone()), trace };
            let body_len = f.body_len();
            let mut buf = BytesMut::new();
            let n = f.write(&mut buf);
            let env = wire::Envelope { protocol, manifest, payload: Bytes::from(payload), recipient_uid: uid, trace: trace.map(|t| Bytes::copy_from_slice(&t.to_bytes())).unwrap_or_default() };
            prop_assert_eq!(&buf[FRAME_HEADER_BYTES..], &env.encode_to_vec()[..]);
            let head = decode_envelope_head_at(&buf, FRAME_HEADER_BYTES, buf.len()).unwrap();
            prop_assert_eq!(head.trace, trace);
            prop_assert_eq!(n, buf.len());
            prop_assert_eq!(&buf[..FRAME_HEADER_BYTES], &(body_len as u32).to_be_bytes()[..]);
        }

        #[test]
        fn the_overhead_bound_holds(protocol in any::<u32>(), manifest in any::<u32>(), uid in any::<u64>(), len in 0usize..70_000) {
            let f = Frame { protocol: ProtocolId(protocol), manifest, recipient_uid: uid, payload: Bytes::from(vec![0; len]), trace: None };
            prop_assert!(f.body_len() <= len + ENVELOPE_OVERHEAD_MAX);
        }
    }
}
