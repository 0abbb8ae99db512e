//! [`SimMessage`]: what travels on the simulated network.

use concord_core::{ClusterMessage, ProtocolId};

use crate::hosted::Payload;

/// A message on the simulated network.
// Membership messages carry a whole Gossip inline (with its cluster identity, ~230 bytes);
// boxing them would only move the allocation in a test harness.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum SimMessage {
    /// Membership ([`ProtocolId::MEMBERSHIP`]).
    Membership(ClusterMessage),
    /// A message of a hosted protocol.
    Protocol(ProtocolId, Payload),
}
