//! The version of the remoting wire protocol that both ends of a handshake must share.

/// Version of the wire protocol; a peer with another version is refused. Version 2: the
/// frame body is an `Envelope` (protocol id, manifest, payload, recipient uid) and the
/// handshake names the lane. Version 3: the cluster-secret challenge and the uid withheld
/// from unauthenticated peers.
pub const PROTOCOL_VERSION: u32 = 3;
