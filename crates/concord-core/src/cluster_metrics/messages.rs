//! The cluster-metrics protocol's messages: [`ClusterMetricsMessage`].

use super::entry::{EntryVersion, MetricsEntry};
use super::node_metrics::NodeMetrics;

/// A message of the cluster-metrics protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum ClusterMetricsMessage {
    /// A gossip round or its answer (what this version sends).
    Gossip(MetricsGossipMessage),
    /// The first version's message: every entry, full (see [`MetricsGossipEnvelope`]).
    /// Understood, and answered in kind, so that a rolling upgrade from that version keeps
    /// the metrics flowing both ways; never sent otherwise.
    Legacy(MetricsGossipEnvelope),
}

/// A gossip round (a digest, `reply` set), its answer, or the entries an answer asked for.
/// Every part is optional; see [`super::ClusterMetricsCollector`] for the exchange.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsGossipMessage {
    /// Entries the receiver lacks or holds older, at most one per node.
    pub entries: Vec<MetricsEntry>,
    /// The versions the sender holds.
    pub digest: Option<Digest>,
    /// Positions, in the digest the receiver last sent the sender, of the entries the sender
    /// wants (it holds them older, or not at all).
    pub want: Vec<u32>,
    /// Answer this message (set on a round and on a digest sent back for a round whose
    /// compact digest could not be read).
    pub reply: bool,
}

/// The versions a node holds, one per entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Digest {
    /// Each entry's uid and version, by uid: ~10 bytes an entry.
    Full(Vec<EntryVersion>),
    /// The versions alone, by uid (1–2 bytes an entry), and a hash of the uids
    /// ([`super::MetricsState::nodes_hash`]): readable by a receiver that holds entries of
    /// exactly the same nodes, which it checks by the hash — the usual case once every node
    /// knows every node.
    Compact {
        /// The hash of the uids the versions belong to.
        nodes: u64,
        /// The versions, in ascending uid order.
        sequences: Vec<u64>,
    },
}

impl Digest {
    /// Number of entries it lists.
    pub fn len(&self) -> usize {
        match self {
            Digest::Full(v) => v.len(),
            Digest::Compact { sequences, .. } => sequences.len(),
        }
    }

    /// Whether it lists none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The first version's message (Akka's `MetricsGossipEnvelope`): every entry the sender
/// held, with full names and both the latest sample and the average; and whether the
/// sender wants the receiver's in return.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsGossipEnvelope {
    /// The sender's entries (at most one per member).
    pub entries: Vec<NodeMetrics>,
    /// Answer with your entries.
    pub reply: bool,
}
