//! # concord-core
//!
//! The sans-IO heart of Concord: the Akka Cluster membership model as plain data and pure
//! state machines. No tokio, no sockets, no clock reads, no global randomness: callers pass
//! `now` (milliseconds) and seeds, feed messages in and poll messages, events and the next
//! deadline out. The `concord` crate drives it over TCP; simulators drive it in virtual time.
//!
//! Every protocol is a machine with the same sans-IO verbs ([`protocol::ProtocolMachine`]):
//! `handle_message`, `handle_membership`, `handle_timeout` in; `poll_transmit`,
//! `poll_event`, `poll_timeout` out; timers in a [`timers::TimerTable`]. The runtime routes
//! messages to machines by [`ProtocolId`] and carries them on [`Lane`]s; the simulator
//! (`concord-sim`) hosts several machines per node the same way.
//!
//! Membership (see DESIGN.md): [`address`], [`member`], [`vector_clock`], [`reachability`],
//! [`gossip`], [`membership_state`] (convergence, leader, gossip peer choice), [`leader`]
//! (leader actions), [`events`] (domain events as a diff of states), [`failure_detector`]
//! (φ accrual), [`heartbeat_ring`], [`split_brain_resolver`], [`message`], [`settings`],
//! [`cluster_core`] (the node state machine that ties them together), [`cluster_identity`]
//! (cluster identity and the membership record that prevents island clusters) and
//! [`membership_view`], the immutable view published to the layers above.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod cluster_core;
pub mod cluster_identity;
pub mod cluster_metrics;
pub mod ddata;
pub mod delivery;
pub mod events;
pub mod failure_detector;
pub mod gossip;
pub mod group;
pub mod heartbeat_ring;
pub mod kv;
pub mod leader;
pub mod member;
pub mod membership_state;
pub mod membership_view;
pub mod message;
pub mod outputs;
pub mod persistence;
pub mod protocol;
pub mod rate_limit;
pub mod reachability;
pub mod receptionist;
pub mod services;
pub mod settings;
pub mod sharding;
pub mod singleton;
pub mod split_brain_resolver;
#[cfg(test)]
mod test_views;
pub mod timers;
pub mod trace_context;
pub mod vector_clock;

pub use address::{Address, UniqueAddress};
pub use cluster_core::{
    ClusterCore, CommandError, CoreStats, LeaseRequest, SbrDecisionRecord, ShutdownReason,
};
pub use cluster_identity::{ClusterId, ClusterIdentity, IslandResolution, MembershipRecord};
pub use events::ClusterEvent;
pub use gossip::{Gossip, GossipOverview};
pub use member::{Member, MemberStatus};
pub use membership_state::MembershipState;
pub use membership_view::MembershipView;
pub use message::ClusterMessage;
pub use protocol::{Lane, MembershipChange, ProtocolId, ProtocolMachine, Transmit};
pub use reachability::{Reachability, ReachabilityStatus};
pub use settings::{ClusterSettings, FailureDetectorSettings};
pub use trace_context::TraceContext;
pub use vector_clock::{ClockOrdering, VectorClock};
