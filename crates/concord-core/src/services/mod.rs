//! Partitioned services: the **pure placement logic** of the original spec's
//! "Partitioning" (cluster-specification-original.md, `GossipState.partitions` /
//! `pending`, "Leader Actions", "Partitioning"; research notes
//! persistence-delivery-services.md §3.1).
//!
//! A partitioned service is named by a [`PartitionPath`] (`"a/b/c"`) and wants a number
//! of instances (its N-value) given by its [`InstancePolicy`]: a fixed N, or a
//! fault-tolerance function `n => f` (N = f + 1) optionally raised by scaling wishes
//! from metrics within [`ScalingBounds`].
//!
//! Where this code sits: **only the leader** changes the partition table. On each leader
//! step ([`leader_step`]) it evaluates the registered services' policies against the Up
//! members that offer them ([`demand`]), computes the target table with [`place`] from the
//! current table and the ring (stable: joins move nothing, a leaving or crashed node only
//! re-places its own instances; new instances spread round the ring in the spec's circular
//! fashion), optionally refines it with the load-aware, opt-in [`rebalance()`] (cluster
//! metrics), and derives the moves with [`pending_changes`]. The [`ServicesMachine`]
//! gossips the resulting [`ServicesState`] (the [`PartitionTable`] and the
//! [`PartitionChange`]s, versioned) to every node, carries each move out by the spec's
//! graceful handoff (steps 1–6: the leader sets the pending change, N1 initializes N2, N2
//! answers ready, N1's instance stops, the leader updates the table, all nodes converge),
//! and routes service messages by the table with [`Router`] (round robin, random,
//! consistent hashing, adaptive to cluster metrics, broadcast), keeping each sending node's
//! order across moves. The placement functions are plain data and pure, deterministic
//! functions (the same inputs give the same table on every node), property-tested; the
//! machine is sans-IO (the runtime is `concord::services`).

mod handoff;
pub mod hosting;
pub mod instance_policy;
pub mod leader_actions;
pub mod machine;
pub mod message;
pub mod partition_path;
pub mod partition_table;
pub mod placement;
pub mod rebalance;
mod removal_margin;
pub mod routing;
pub mod scaling;
pub mod services_state;
mod state_gossip;

#[cfg(test)]
mod leader_actions_tests;
#[cfg(test)]
mod machine_tests;
#[cfg(test)]
mod tests;

pub use hosting::{
    RegisterError, SendOutcome, ServicesDrop, ServicesEvent, ServicesSettings, ServicesStats,
};
pub use instance_policy::{FaultTolerance, InstancePolicy, ScalingBounds, ScalingBoundsError};
pub use leader_actions::{leader_step, live_nodes, ring_of, LeaderInput, LoadAware, NodeOffer};
pub use machine::ServicesMachine;
pub use message::{ServicesMessage, MAX_FORWARD_HOPS};
pub use partition_path::{PartitionPath, PartitionPathError, MAX_PATH_LEN};
pub use partition_table::{PartitionChange, PartitionChangeStatus, PartitionTable};
pub use placement::{demand, pending_changes, place, sorted_ring};
pub use rebalance::rebalance;
pub use routing::{Router, RoutingLogic};
pub use scaling::ScalingTracker;
pub use services_state::ServicesState;
