//! The boundary between the transport and a protocol: a [`Codec`] turns a protocol's
//! messages into a manifest (message type number) and bytes and back; decoded messages
//! arrive at the protocol's host as [`Inbound`] batches. No I/O here: the layer host and
//! the simulator use these types without the tokio runtime.

use bytes::Bytes;
use concord_core::UniqueAddress;

/// Why bytes from the network could not be turned into a message.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// A message type (manifest) this build does not know. Counted and dropped; the
    /// connection stays open.
    #[error("unknown manifest {0}")]
    UnknownManifest(u32),
    /// Not a valid protobuf message.
    #[error("malformed protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// A required field is missing.
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    /// An address index points outside the address table.
    #[error("address index {0} out of range")]
    BadIndex(u32),
    /// A port outside 1..=65535.
    #[error("invalid port {0}")]
    BadPort(u32),
    /// Unknown enum value.
    #[error("unknown {0} value {1}")]
    BadEnum(&'static str, i32),
    /// The gzip payload is corrupt.
    #[error("bad gzip payload: {0}")]
    Gzip(String),
    /// The gzip payload inflates beyond the limit, bytes (`maximum-decompressed-gossip-size`;
    /// a decompression bomb). Counted apart from other malformed input.
    #[error("gzip payload inflates beyond {0} bytes")]
    DecompressedTooLarge(usize),
    /// Any other reason a protocol's codec refuses the bytes.
    #[error("{0}")]
    Invalid(String),
}

/// A protocol's encoding of its messages: a manifest (message type number) and bytes.
/// Implementations must never panic on any input to `decode`.
pub trait Codec: Send + Sync + 'static {
    /// The protocol's message type.
    type Message: Send + 'static;

    /// The manifest and bytes of `message`.
    fn encode(&self, message: &Self::Message) -> (u32, Bytes);

    /// The message of type `manifest` in `payload`, borrowed from the connection's read
    /// buffer for the call; [`DecodeError::UnknownManifest`] for a type this build does not
    /// know.
    fn decode(&self, manifest: u32, payload: &[u8]) -> Result<Self::Message, DecodeError>;

    /// True if the messages keep parts of their payload (an entity's message, a stored
    /// value): the transport then hands each payload over owned ([`Codec::decode_owned`],
    /// one reference-counted slice of the read buffer per message). False by default: the
    /// transport calls [`Codec::decode`] on the borrowed bytes, and no reference count
    /// moves per message.
    const KEEPS_PAYLOAD: bool = false;

    /// The same from an owned buffer: what the transport calls when
    /// [`Codec::KEEPS_PAYLOAD`] is set, and only then (a codec that overrides this method
    /// must set it, or the transport calls [`Codec::decode`] instead). By default it borrows ([`Codec::decode`]); a codec
    /// whose messages keep parts of the payload overrides it to keep them without a copy,
    /// as zero-copy slices of `payload` — which is itself a slice of the connection's read
    /// buffer, so a message that keeps it for long should copy it
    /// (`Bytes::copy_from_slice`), or it keeps that whole buffer alive.
    fn decode_owned(&self, manifest: u32, payload: Bytes) -> Result<Self::Message, DecodeError> {
        self.decode(manifest, &payload)
    }
}

/// Messages of one protocol received from one authenticated peer in one read, in the
/// order they were sent.
#[derive(Debug)]
pub struct Inbound<M> {
    /// The sender, as established by the handshake.
    pub from: UniqueAddress,
    /// The messages with their payload sizes, bytes.
    pub messages: Vec<(M, usize)>,
    /// The trace contexts of the traced messages among them: (index in `messages`,
    /// context), by index; empty when none is traced (always with tracing off).
    pub traces: Vec<(usize, concord_core::TraceContext)>,
}

/// Default largest decompressed gossip accepted, bytes: 4 × the default
/// `maximum-frame-size` (gossip of 2400 members is 184 KB before compression; see
/// docs/BENCHMARKS.md). Protects against gzip bombs.
pub const DEFAULT_MAX_DECOMPRESSED_GOSSIP_BYTES: usize = 1024 * 1024;
