//! [`ReplicaId`]: the identity of one replica, the uid of a node incarnation.

use crate::address::UniqueAddress;

/// A replica: the uid of one node incarnation (random, 64 bits, like Riak's actor ids). A
/// restarted node is a new replica.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct ReplicaId(pub u64);

impl From<&UniqueAddress> for ReplicaId {
    fn from(u: &UniqueAddress) -> Self {
        ReplicaId(u.uid)
    }
}

impl std::fmt::Display for ReplicaId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}
