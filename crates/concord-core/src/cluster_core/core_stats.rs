//! [`CoreStats`]: the membership machine's counters an operator watches.

/// Counters an operator watches (exported as metrics by the runtime).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Gossip ticks (rounds) performed.
    pub gossip_rounds: u64,
    /// Full gossip envelopes sent.
    pub gossip_sent: u64,
    /// Gossip status messages sent.
    pub gossip_status_sent: u64,
    /// Full gossip envelopes received.
    pub gossip_received: u64,
    /// Gossip status messages received.
    pub gossip_status_received: u64,
    /// Heartbeat requests sent.
    pub heartbeats_sent: u64,
    /// Messages ignored (unknown sender, not for this incarnation, ...).
    pub ignored: u64,
    /// Split brain resolver decisions carried out by this node.
    pub sbr_decisions: u64,
    /// Of those, down-all decisions by cause: [`DecisionCause::Stable`](crate::split_brain_resolver::DecisionCause::Stable) (the down-all
    /// strategy, the membership-change guard), [`DecisionCause::Unstable`](crate::split_brain_resolver::DecisionCause::Unstable)
    /// (down-all-when-unstable) and [`DecisionCause::DoubleDecision`](crate::split_brain_resolver::DecisionCause::DoubleDecision), in that order.
    pub sbr_down_all: [u64; 3],
    /// Messages refused because the sender is not a member (gossip, status, heartbeats
    /// from a node outside this node's view; only InitJoin and Join may come from one).
    pub refused_non_member: u64,
    /// Gossip refused because a vector-clock counter was implausibly far ahead
    /// ([`crate::vector_clock::MAX_VECTOR_CLOCK_JUMP`]).
    pub implausible_clocks: u64,
    /// InitJoin and heartbeat requests from non-members dropped by the rate limit
    /// ([`JOIN_REQUESTS_PER_SECOND`](super::JOIN_REQUESTS_PER_SECOND), burst
    /// [`JOIN_REQUEST_BURST`](super::JOIN_REQUEST_BURST)), and admissions it
    /// refused: Joins, gossip from a non-member taken as its Join, and gossip from a member
    /// not yet Up carrying members this node did not hold (one count per refused message).
    pub join_requests_throttled: u64,
    /// Times `seed-node-timeout` passed without this node forming a new cluster because its
    /// membership record shows it was a member of one
    /// ([`crate::cluster_identity::may_join_self_after_seed_timeout`]).
    pub self_joins_refused: u64,
}
