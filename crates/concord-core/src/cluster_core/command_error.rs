//! [`CommandError`]: why a user command (join, leave, down) was refused.

use crate::address::Address;

/// Errors of user commands. None of them changes the node's state.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// No member has this address.
    #[error("member [{0}] not found")]
    UnknownMember(Address),
    /// The node is not a member of a cluster yet.
    #[error("this node is not a member of a cluster")]
    NotInCluster,
    /// The seed-node list was empty.
    #[error("the seed-node list is empty")]
    NoSeedNodes,
    /// A join target belongs to another cluster (system name).
    #[error("cannot join [{0}]: it belongs to another cluster than `{1}`")]
    OtherCluster(Address, String),
}
