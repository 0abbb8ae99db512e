//! Remoting: lanes of framed TCP between nodes, the handshake, the envelope that carries
//! every protocol's messages, routing by protocol id, quarantine and fault injection.
//!
//! - [`wire`]: protobuf messages generated from the layers' schemas (`remote/remote.proto` and one `.proto` per protocol in its layer's folder).
//! - [`envelope`]: [`Outbound`] messages and the frame around them.
//! - [`registry`]: [`ProtocolRegistry`] and the [`Codec`] a layer registers with its
//!   protocol id; inbound messages arrive on the layer's own queue as [`Inbound`].
//! - [`sender`]: [`ProtocolSender`], a codec plus the transport.
//! - `address_wire`: the wire form of addresses every protocol's codec shares. Remoting
//!   knows envelopes, lanes and protocol ids only: the membership protocol's codec and the
//!   gossip's wire form live in [`crate::cluster`].
//! - [`transport`]: [`Transport`], the handle; [`settings`], [`stats`], [`faults`].
//! - `handshake`, `admission` (who may hold a handshake place: per source address, a
//!   reserve for members), `outbound_lane` (a bounded queue per peer and lane that senders encode
//!   into), `association` (its writer: one connection, one write per batch), `inbound`
//!   (accept, read, route a batch per read).

pub(crate) mod address_wire;
#[cfg(feature = "runtime")]
mod admission;
#[cfg(feature = "runtime")]
mod association;
#[cfg(feature = "runtime")]
pub mod cluster_secret;
pub mod codec;
pub mod envelope;
#[cfg(feature = "runtime")]
pub mod faults;
#[cfg(all(test, feature = "runtime"))]
mod fuzz_tests;
#[cfg(feature = "runtime")]
mod handshake;
#[cfg(feature = "runtime")]
mod inbound;
#[cfg(feature = "runtime")]
mod inbound_limits;
pub(crate) mod log_limit;
#[cfg(feature = "runtime")]
mod outbound_lane;
#[cfg(feature = "runtime")]
pub mod registry;
#[cfg(feature = "runtime")]
pub mod sender;
#[cfg(feature = "runtime")]
pub mod settings;
#[cfg(feature = "runtime")]
pub mod stats;
#[cfg(feature = "runtime")]
mod stream;
#[cfg(feature = "runtime")]
pub mod transport;
#[cfg(feature = "runtime")]
mod transport_state;
mod version;
pub mod wire;

pub use codec::{Codec, DecodeError, Inbound};
pub use envelope::{Frame, Outbound};
#[cfg(feature = "runtime")]
pub use faults::LinkFaults;
#[cfg(feature = "runtime")]
pub use outbound_lane::OutboundLane;
#[cfg(feature = "runtime")]
pub use registry::ProtocolRegistry;
#[cfg(feature = "runtime")]
pub use sender::ProtocolSender;
#[cfg(feature = "runtime")]
pub use settings::TransportSettings;
#[cfg(feature = "runtime")]
pub use stats::TransportStats;
#[cfg(feature = "runtime")]
pub use transport::{SendError, Transport, TransportError, TransportEvent};
pub use version::PROTOCOL_VERSION;
