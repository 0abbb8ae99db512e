//! [`SingletonEvent`]: what the singleton machine asks of its runtime or tells it (start
//! and stop the instance, the lease, deliveries and replies, the end of the hand-over in
//! `cluster-exiting`).

use crate::address::UniqueAddress;

/// What the singleton machine asks of its runtime, or tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SingletonEvent {
    /// Start the instance (this node is the oldest, the previous one has stopped).
    StartInstance {
        /// A number unique to this start of the instance.
        incarnation: u64,
    },
    /// Stop the instance: let it finish what it has, then report
    /// [`ClusterSingleton::instance_terminated`].
    ///
    /// [`ClusterSingleton::instance_terminated`]: crate::singleton::ClusterSingleton::instance_terminated
    StopInstance,
    /// Acquire the singleton's lease and report [`ClusterSingleton::lease_result`].
    ///
    /// [`ClusterSingleton::lease_result`]: crate::singleton::ClusterSingleton::lease_result
    AcquireLease,
    /// Release the lease.
    ReleaseLease,
    /// A message for the running instance.
    Deliver {
        /// The sender's node.
        from: UniqueAddress,
        /// The encoded message.
        payload: Vec<u8>,
        /// Set for an ask: pass it to [`ClusterSingleton::reply`].
        ///
        /// [`ClusterSingleton::reply`]: crate::singleton::ClusterSingleton::reply
        ask: Option<u64>,
    },
    /// A reply to this node's ask.
    Reply {
        /// The ask.
        ask: u64,
        /// The encoded reply.
        payload: Vec<u8>,
    },
    /// The proxy's buffer was full: the oldest message was dropped (an ask fails).
    Dropped {
        /// The dropped message's ask, if any.
        ask: Option<u64>,
    },
    /// The hand-over of a leaving node is done (or there was nothing to hand over): the
    /// `cluster-exiting` phase may go on.
    ExitingDone,
    /// The manager could not complete a hand-over within its retries and started over
    /// (Akka's `ClusterSingletonManagerIsStuck`).
    Stuck,
}
