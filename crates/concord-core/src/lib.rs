//! # concord-core
//!
//! The sans-IO heart of Concord: the Akka Cluster membership model as plain data and pure
//! state machines. No tokio, no sockets, no clock reads, no global randomness: callers pass
//! `now` (milliseconds) and seeds, feed messages in and poll messages, events and the next
//! deadline out. The `concord` crate drives it over TCP; simulators drive it in virtual time.
//!
//! Layers (see DESIGN.md): [`address`], [`member`], [`vector_clock`], [`reachability`],
//! [`gossip`], [`membership_state`] (convergence, leader, gossip peer choice), [`leader`]
//! (leader actions), [`events`] (domain events as a diff of states), [`failure_detector`]
//! (φ accrual), [`heartbeat_ring`], [`message`], [`settings`] and [`cluster_core`], the
//! node state machine that ties them together.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod cluster_core;
pub mod events;
pub mod failure_detector;
pub mod gossip;
pub mod heartbeat_ring;
pub mod leader;
pub mod member;
pub mod membership_state;
pub mod message;
pub mod reachability;
pub mod settings;
pub mod split_brain_resolver;
pub mod vector_clock;

pub use address::{Address, UniqueAddress};
pub use cluster_core::{ClusterCore, CommandError, CoreStats, ShutdownReason};
pub use events::{ClusterEvent, CurrentClusterState};
pub use gossip::{Gossip, GossipOverview};
pub use member::{Member, MemberStatus};
pub use membership_state::MembershipState;
pub use message::{ClusterMessage, Transmit};
pub use reachability::{Reachability, ReachabilityStatus};
pub use settings::{ClusterSettings, FailureDetectorSettings};
pub use vector_clock::{ClockOrdering, VectorClock};
