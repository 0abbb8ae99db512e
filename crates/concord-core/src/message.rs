//! The cluster membership protocol's messages ([`ClusterMessage`]), exchanged between
//! nodes on the control lane under [`crate::ProtocolId::MEMBERSHIP`].
//!
//! The sender of every message is the [`UniqueAddress`] the transport authenticated in its
//! handshake, so messages do not repeat it. Spec: cluster-specification.md, "Seed Nodes"
//! (InitJoin / Join / Welcome), "Gossip Protocol" (envelope and status), "Failure Detector"
//! (request/reply heartbeats).

use std::collections::BTreeSet;

use crate::address::UniqueAddress;
use crate::cluster_identity::ClusterIdentity;
use crate::gossip::Gossip;
use crate::vector_clock::VectorClock;

/// A message of the cluster membership protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterMessage {
    /// "Are you in a cluster I can join?" — sent to seed nodes; also sent by a member to
    /// its seed nodes outside its cluster (island probe, see [`crate::cluster_identity`]).
    InitJoin {
        /// The sender's cluster, when it is a member of one that has an identity.
        cluster: Option<ClusterIdentity>,
    },
    /// "Yes, join me." Reply to [`ClusterMessage::InitJoin`] from a member.
    InitJoinAck {
        /// The replier's cluster, when it has an identity (older versions send none).
        cluster: Option<ClusterIdentity>,
    },
    /// "No." Reply to [`ClusterMessage::InitJoin`] from a node that is not (or no longer) a member.
    InitJoinNack,
    /// Request to join the receiver's cluster.
    Join {
        /// Roles of the joining node.
        roles: BTreeSet<String>,
        /// Application version of the joining node.
        app_version: String,
    },
    /// Reply to [`ClusterMessage::Join`]: the joining node is now a Joining member; here is the state.
    Welcome {
        /// The receiver's latest gossip, containing the joining node.
        gossip: Gossip,
    },
    /// Full gossip state, addressed to one incarnation.
    GossipEnvelope {
        /// Intended receiver; an old incarnation at the same address ignores it.
        to: UniqueAddress,
        /// The state.
        gossip: Gossip,
    },
    /// Small gossip digest sent instead of the state when the peer has seen it.
    GossipStatus {
        /// Sender's gossip version.
        version: VectorClock,
        /// Digest of the sender's seen set.
        seen_digest: u64,
    },
    /// Heartbeat request.
    Heartbeat {
        /// Sequence number of the request.
        sequence_nr: u64,
        /// Sender's clock at sending, ms.
        creation_time_ms: u64,
    },
    /// Heartbeat reply; feeds the sender's failure detector.
    HeartbeatRsp {
        /// Sequence number of the request.
        sequence_nr: u64,
        /// `creation_time_ms` of the request, echoed.
        creation_time_ms: u64,
    },
}

impl ClusterMessage {
    /// Whether this is gossip (a full envelope or a status digest).
    pub fn is_gossip(&self) -> bool {
        matches!(
            self,
            ClusterMessage::GossipEnvelope { .. } | ClusterMessage::GossipStatus { .. }
        )
    }

    /// Message kind, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ClusterMessage::InitJoin { .. } => "InitJoin",
            ClusterMessage::InitJoinAck { .. } => "InitJoinAck",
            ClusterMessage::InitJoinNack => "InitJoinNack",
            ClusterMessage::Join { .. } => "Join",
            ClusterMessage::Welcome { .. } => "Welcome",
            ClusterMessage::GossipEnvelope { .. } => "GossipEnvelope",
            ClusterMessage::GossipStatus { .. } => "GossipStatus",
            ClusterMessage::Heartbeat { .. } => "Heartbeat",
            ClusterMessage::HeartbeatRsp { .. } => "HeartbeatRsp",
        }
    }
}
