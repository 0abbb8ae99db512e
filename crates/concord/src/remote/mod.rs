//! Remoting: framed TCP between nodes, the handshake, associations and quarantine.
//!
//! - [`wire`]: protobuf messages generated from `proto/concord.proto`.
//! - [`codec`]: conversion between `concord-core` types and the wire, gzip of full gossip.
//! - [`transport`]: listener, per-peer outbound associations with reconnect backoff,
//!   handshake checks (cluster name, protocol version, quarantined incarnations).

pub mod codec;
pub mod transport;

/// Protobuf types generated from `proto/concord.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod wire {
    include!(concat!(env!("OUT_DIR"), "/concord.v1.rs"));
}

/// Version of the wire protocol; a peer with another version is refused.
pub const PROTOCOL_VERSION: u32 = 1;
