//! [`KvMessage`]: what the key-value store's nodes say to each other.
//!
//! - Coordinated requests: `Forward`/`ForwardReply` (a write taken by a node that holds no
//!   replica of the key, coordinated by one that does), `Put`/`PutReply` (the coordinator's
//!   resulting version, merged by each other replica — or fallback — of the key),
//!   `Get`/`GetReply`; `Repair` (read repair: the merged version for a replica that answered
//!   an older one), `Reap` (remove a fully acknowledged tombstone).
//! - Anti-entropy between two replicas of the same groups (initiator I, responder R):
//!   I→R `AeGroups` (I's group hashes), R→I `AeBuckets` (the leaves of the groups that
//!   differ), I→R `AeKeys` (I's key digests in the differing buckets), R→I `AeObjects`
//!   (R's versions I lacks, and the keys R wants), I→R `AeWanted` (I's versions of those).
//! - Handoff of a group this node holds but no longer owns (hinted writes, ownership
//!   moves): `Handoff` pages to every owner, `HandoffAck` once a page is stored.

use crate::ddata::VersionVector;
use crate::kv::api::KvError;
use crate::kv::object::Versioned;

/// The hash of one (segment, n) group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupHash {
    /// Segment.
    pub segment: u16,
    /// Replication factor.
    pub n: u8,
    /// XOR of its leaves.
    pub hash: u64,
}

/// The leaves of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupBuckets {
    /// Segment.
    pub segment: u16,
    /// Replication factor.
    pub n: u8,
    /// Non-zero leaves: (bucket, hash).
    pub buckets: Vec<(u8, u64)>,
}

/// The keys of one bucket of a group, with their digests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketKeys {
    /// Segment.
    pub segment: u16,
    /// Replication factor.
    pub n: u8,
    /// Bucket.
    pub bucket: u8,
    /// (key, digest of its object).
    pub keys: Vec<(String, u64)>,
}

/// A message of the key-value store protocol.
#[derive(Clone, Debug, PartialEq)]
pub enum KvMessage {
    /// Coordinate this write (the sender holds no replica of the key) and answer with
    /// `ForwardReply`.
    Forward {
        /// The sender's request.
        request: u64,
        /// The key.
        key: String,
        /// The value; `None` deletes.
        value: Option<Vec<u8>>,
        /// The client's context.
        context: VersionVector,
        /// Replication factor.
        n: u8,
        /// Write quorum (replicas).
        w: u8,
    },
    /// The outcome of a forwarded write.
    ForwardReply {
        /// The sender's request.
        request: u64,
        /// The outcome.
        result: Result<(), KvError>,
    },
    /// Merge the coordinator's resulting version of `key` and answer.
    Put {
        /// The coordinator's request.
        request: u64,
        /// The key.
        key: String,
        /// The version after the write.
        object: Versioned,
    },
    /// A replica's answer to `Put`.
    PutReply {
        /// The request.
        request: u64,
        /// `Err`: why the replica did not store it.
        result: Result<(), String>,
    },
    /// Read `key` and answer.
    Get {
        /// The coordinator's request.
        request: u64,
        /// The key.
        key: String,
    },
    /// A replica's answer to `Get`.
    GetReply {
        /// The request.
        request: u64,
        /// Its version (`None`: it has none), or why it could not read.
        result: Result<Option<Versioned>, String>,
        /// False while the replica has not yet synchronised the key's segment since it
        /// became one of its owners (its "not found" proves nothing).
        complete: bool,
    },
    /// Read repair: merge this version of `key`.
    Repair {
        /// The key.
        key: String,
        /// The version.
        object: Versioned,
    },
    /// Remove `key` if it is a tombstone `clock` has seen all of.
    Reap {
        /// The key.
        key: String,
        /// The clock of the acknowledged tombstone.
        clock: VersionVector,
    },
    /// Anti-entropy, I→R: I's non-empty groups shared with R.
    AeGroups {
        /// The exchange.
        session: u64,
        /// Group hashes.
        groups: Vec<GroupHash>,
    },
    /// Anti-entropy, R→I: the leaves of the shared groups whose hashes differ.
    AeBuckets {
        /// The exchange.
        session: u64,
        /// R's leaves of differing groups (in segment order).
        groups: Vec<GroupBuckets>,
        /// More groups differ than are listed.
        truncated: bool,
    },
    /// Anti-entropy, I→R: I's key digests in the buckets that differ.
    AeKeys {
        /// The exchange.
        session: u64,
        /// Buckets with I's keys (possibly none).
        buckets: Vec<BucketKeys>,
    },
    /// Anti-entropy, R→I: R's versions that I lacks or holds differently, and the keys
    /// R wants I's versions of.
    AeObjects {
        /// The exchange.
        session: u64,
        /// (key, version).
        objects: Vec<(String, Versioned)>,
        /// Keys R wants.
        want: Vec<String>,
    },
    /// Anti-entropy, I→R: I's versions of the keys R wanted; ends the exchange.
    AeWanted {
        /// The exchange.
        session: u64,
        /// (key, version).
        objects: Vec<(String, Versioned)>,
    },
    /// Handoff: merge these versions, then acknowledge.
    Handoff {
        /// The handoff page.
        session: u64,
        /// (key, version).
        objects: Vec<(String, Versioned)>,
    },
    /// Handoff: the page is stored (or why not).
    HandoffAck {
        /// The handoff page.
        session: u64,
        /// `Err`: why the page was not stored.
        result: Result<(), String>,
    },
}

impl KvMessage {
    /// A short name, for logs and metrics.
    pub fn name(&self) -> &'static str {
        match self {
            KvMessage::Forward { .. } => "forward",
            KvMessage::ForwardReply { .. } => "forward-reply",
            KvMessage::Put { .. } => "put",
            KvMessage::PutReply { .. } => "put-reply",
            KvMessage::Get { .. } => "get",
            KvMessage::GetReply { .. } => "get-reply",
            KvMessage::Repair { .. } => "repair",
            KvMessage::Reap { .. } => "reap",
            KvMessage::AeGroups { .. } => "ae-groups",
            KvMessage::AeBuckets { .. } => "ae-buckets",
            KvMessage::AeKeys { .. } => "ae-keys",
            KvMessage::AeObjects { .. } => "ae-objects",
            KvMessage::AeWanted { .. } => "ae-wanted",
            KvMessage::Handoff { .. } => "handoff",
            KvMessage::HandoffAck { .. } => "handoff-ack",
        }
    }
}
