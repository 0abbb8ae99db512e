//! Remoting: lanes of framed TCP between nodes, the handshake, the envelope that carries
//! every protocol's messages, routing by protocol id, quarantine and fault injection.
//!
//! - [`wire`]: protobuf messages generated from `proto/concord.proto`.
//! - [`envelope`]: [`Outbound`] messages and the frame around them.
//! - [`registry`]: [`ProtocolRegistry`] and the [`Codec`] a layer registers with its
//!   protocol id; inbound messages arrive on the layer's own queue as [`Inbound`].
//! - [`sender`]: [`ProtocolSender`], a codec plus the transport.
//! - [`membership_codec`]: the membership protocol's codec; [`gossip_wire`]: the wire form
//!   of the gossip state (address table, gzip, bounded decompression).
//! - [`transport`]: [`Transport`], the handle; [`settings`], [`stats`], [`faults`].
//! - `handshake`, `admission` (who may hold a handshake place: per source address, a
//!   reserve for members), `outbound_lane` (a bounded queue per peer and lane that senders encode
//!   into), `association` (its writer: one connection, one write per batch), `inbound`
//!   (accept, read, route a batch per read).

mod admission;
mod association;
pub mod cluster_secret;
pub mod envelope;
pub mod faults;
#[cfg(test)]
mod fuzz_tests;
pub mod gossip_wire;
mod handshake;
mod inbound;
pub(crate) mod log_limit;
pub mod membership_codec;
mod outbound_lane;
pub mod registry;
pub mod sender;
pub mod settings;
pub mod stats;
mod stream;
pub mod transport;

/// Protobuf types generated from `proto/concord.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod wire {
    include!(concat!(env!("OUT_DIR"), "/concord.v1.rs"));
}

pub use envelope::{Frame, Outbound};
pub use faults::LinkFaults;
pub use registry::{Codec, DecodeError, Inbound, ProtocolRegistry};
pub use sender::ProtocolSender;
pub use settings::TransportSettings;
pub use stats::TransportStats;
pub use transport::{OutboundLane, SendError, Transport, TransportError, TransportEvent};

/// Version of the wire protocol; a peer with another version is refused. Version 2: the
/// frame body is an `Envelope` (protocol id, manifest, payload, recipient uid) and the
/// handshake names the lane. Version 3: the cluster-secret challenge and the uid withheld
/// from unauthenticated peers.
pub const PROTOCOL_VERSION: u32 = 3;
