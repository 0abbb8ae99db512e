//! [`MembershipSinks`]: where the membership layer's outputs go besides its transmits. It
//! is the only part of the membership layer's effects that differs between hosts: the
//! tokio runtime carries them to the transport, the handles' `watch` channels, the
//! coordinated shutdown and the metrics; the simulator records them on its node. When each
//! output happens is decided by [`super::MembershipEffects`] (and the core before it),
//! identically in both.

use std::sync::Arc;

use concord_core::{
    ClusterCore, ClusterEvent, ClusterMessage, MembershipView, ShutdownReason, UniqueAddress,
};

/// A turn's new membership view and its events, in the order the core produced them.
pub type Publication = (Arc<MembershipView>, Vec<ClusterEvent>);

/// The membership layer's outputs besides transmits, called in the order a turn produces
/// them (quarantines, coordinated shutdown, end of membership, then the turn's end).
pub trait MembershipSinks: Send {
    /// A message from a peer is about to be handled; `bytes` on the wire (0 when not
    /// known). For counters and the heartbeat round trip.
    fn received(&mut self, message: &ClusterMessage, bytes: usize);

    /// The core asks to quarantine `node` (`ClusterCore::poll_quarantine`): messages from
    /// and to that incarnation are refused from now on.
    fn quarantine(&mut self, node: &UniqueAddress);

    /// The core asks for the coordinated shutdown to start
    /// (`ClusterCore::poll_coordinated_shutdown`: Exiting, Down, or its own shutdown).
    fn start_coordinated_shutdown(&mut self, reason: ShutdownReason);

    /// Membership has ended on this node; may be called again, the first reason stands.
    fn ended(&mut self, reason: ShutdownReason);

    /// The end of a turn, at `now_ms`: `publication` is the new view and the turn's events
    /// when membership changed (state or events), `None` otherwise; `core` for counters.
    fn turn_ended(&mut self, core: &ClusterCore, now_ms: u64, publication: Option<Publication>);
}
