//! The messages of the partitioned-services protocol
//! ([`ProtocolId::SERVICES`](crate::protocol::ProtocolId::SERVICES)): state gossip, the
//! nodes' reports to the leader, the graceful handoff of the spec (steps 1–6) and the
//! service messages themselves with the markers that keep per-sender order across a move.
//!
//! Spec: cluster-specification-original.md, "Handoff" — "1. The leader sets a pending
//! change for N1 to handoff to N2. 2. N1 initializes N2. 3. N2 creates the partition
//! instance and then responds ready to N1. 4. N1 marks the change as Complete. 5. The
//! leader updates the partition table. 6. All nodes eventually see the new partition
//! table"; and "messages will be forwarded ... and buffered" (see [`super::machine`]).

use serde::{Deserialize, Serialize};

use super::{PartitionChange, PartitionPath, ServicesState};
use crate::address::UniqueAddress;

/// A message passed on more often than this is dropped (a loop between nodes that
/// disagree about a move cannot bounce it for ever).
pub const MAX_FORWARD_HOPS: u8 = 3;

/// One message of the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServicesMessage {
    /// Gossip digest: the sender's `(version, writer)`. A receiver with a newer state
    /// answers with [`ServicesMessage::State`]; one with an older state answers with its
    /// own `Status` so that the sender pushes.
    Status {
        /// The sender's state version.
        version: u64,
        /// Its writer.
        writer: Option<UniqueAddress>,
    },
    /// A whole state (pushed by the leader on each write, or answering a `Status`).
    State(ServicesState),
    /// A node's report to the leader, every gossip interval: the paths it offers (has
    /// registered), the mailbox depth of each instance it runs (messages waiting), whether
    /// it is draining (shutting down: placed nowhere, its instances handed off), and its
    /// state's digest.
    Report {
        /// Registered paths.
        offers: Vec<PartitionPath>,
        /// Local instances' waiting messages.
        depths: Vec<(PartitionPath, u32)>,
        /// Shutting down.
        draining: bool,
        /// The sender's state version.
        #[serde(default)]
        version: u64,
        /// Its writer.
        #[serde(default)]
        writer: Option<UniqueAddress>,
    },
    /// Handoff step 2: the old host (N1) initializes the new one (N2) for the change
    /// written in state `version`.
    Prepare {
        /// The partition.
        path: PartitionPath,
        /// The state version that holds the change.
        version: u64,
    },
    /// Handoff step 3: N2 is ready (buffers for the path).
    Ready {
        /// The partition.
        path: PartitionPath,
    },
    /// N1's instance has stopped: N2 starts its instance; what N1 buffered follows on the
    /// same lane as [`ServicesMessage::Forward`]s.
    HandOver {
        /// The partition.
        path: PartitionPath,
    },
    /// Handoff step 4, to the leader: the change is done (sent by N1, or by N2 for a
    /// change without a previous host), repeated until the leader's state shows it.
    Complete {
        /// The change.
        change: PartitionChange,
    },
    /// A service message from its sending node.
    Deliver {
        /// The partition.
        path: PartitionPath,
        /// The message, encoded by the service's type.
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
        /// Set on the first message the sender sends here after its messages for `path`
        /// went to `hold_for` before: hold this sender's messages until `hold_for` says
        /// it has passed on everything the sender sent it ([`ServicesMessage::Drained`]).
        hold_for: Option<UniqueAddress>,
    },
    /// A service message passed on by a node that no longer hosts the path.
    Forward {
        /// The partition.
        path: PartitionPath,
        /// The node that sent it first.
        sender: UniqueAddress,
        /// The message.
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
        /// How many times it has been passed on before (dropped beyond
        /// [`MAX_FORWARD_HOPS`]).
        hops: u8,
    },
    /// From a sending node to the host it used before: "my next messages for `path` go to
    /// `next`" (on the same lane as those messages, so it arrives after them).
    Flush {
        /// The partition.
        path: PartitionPath,
        /// Where the sender's messages go now.
        next: UniqueAddress,
    },
    /// The answer to an ask, from the instance's node to the asking node.
    Reply {
        /// The asker's correlation id.
        id: u64,
        /// The encoded answer (empty when `error` is set).
        #[serde(with = "serde_bytes")]
        payload: Vec<u8>,
        /// Why there is no answer.
        error: Option<String>,
    },
    /// From the previous host to `next`: every message of `sender` for `path` has been
    /// passed on (or delivered before the handoff), so its held messages may go.
    Drained {
        /// The partition.
        path: PartitionPath,
        /// The sending node.
        sender: UniqueAddress,
    },
}

impl ServicesMessage {
    /// The message's name, for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            ServicesMessage::Status { .. } => "status",
            ServicesMessage::State(_) => "state",
            ServicesMessage::Report { .. } => "report",
            ServicesMessage::Prepare { .. } => "prepare",
            ServicesMessage::Ready { .. } => "ready",
            ServicesMessage::HandOver { .. } => "hand-over",
            ServicesMessage::Complete { .. } => "complete",
            ServicesMessage::Deliver { .. } => "deliver",
            ServicesMessage::Forward { .. } => "forward",
            ServicesMessage::Flush { .. } => "flush",
            ServicesMessage::Drained { .. } => "drained",
            ServicesMessage::Reply { .. } => "reply",
        }
    }
}
