//! What reaches the membership layer's host besides peers' messages: [`Command`]s from
//! the `Cluster` handles, the coordinated shutdown's tasks and the simulator, and
//! [`MembershipCompletion`]s of what runs asynchronously (lease requests, the transport).

use concord_core::{Address, CommandError};
use futures_channel::oneshot;

/// Where a command's result goes.
pub type Reply = oneshot::Sender<Result<(), CommandError>>;

/// Requests from the `Cluster` handles, the coordinated shutdown's tasks and the
/// simulator.
pub enum Command {
    /// Join the cluster of the node at this address (`ClusterCore::join`).
    Join(Address, Reply),
    /// Join via these seed nodes (`ClusterCore::join_seed_nodes`).
    JoinSeedNodes(Vec<Address>, Reply),
    /// Graceful leave of the member at this address (`ClusterCore::leave`).
    Leave(Address, Reply),
    /// Mark the member at this address Down (`ClusterCore::down`).
    Down(Address, Reply),
    /// `ClusterCore::prepare_for_full_cluster_shutdown`.
    PrepareForFullShutdown(Reply),
    /// Replaces the island probe's extra targets (`ClusterCore::set_island_probe_targets`).
    IslandProbeTargets(Vec<Address>),
    /// The `cluster-exiting` phase is over (`ClusterCore::exiting_completed`).
    ExitingCompleted(oneshot::Sender<()>),
    /// The `cluster-shutdown` phase: the host stops after this turn's outputs, then the
    /// runner drains and closes remoting and answers on the channel.
    Shutdown(oneshot::Sender<()>),
    /// Abrupt stop (like a crash): the host stops, remoting closes without draining.
    Stop,
}

/// What the membership host learns from asynchronous work and the transport.
#[derive(Debug)]
pub enum MembershipCompletion {
    /// A lease acquisition ended: granted or not (`ClusterCore::handle_lease_result`).
    LeaseResult(bool),
    /// A peer refused our handshake because this incarnation is quarantined
    /// (`ClusterCore::handle_quarantined_by_peer`).
    QuarantinedBy(Address),
}

/// How the host ended, for its runner: what it does with remoting afterwards.
pub enum Exit {
    /// `Command::Shutdown`: drain, close, answer.
    Shutdown(oneshot::Sender<()>),
    /// `Command::Stop`, or a queue the host needs closed: close at once.
    Stop,
}
