//! [`JournalMessage`]: what the replicated journal's proposers and acceptors exchange.
//! Every request carries the proposer's request id; replies echo it.

use super::entry::{Ballot, Entry, StoredSnapshot};
use super::handoff::Need;
use super::holding::SegmentHolding;
use super::learn::LearnedLog;
use super::standing::Standing;
use super::stream::StreamEvent;
use super::unable::UnableReason;

/// A journal protocol message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalMessage {
    /// Phase 1a: promise `ballot` for `log`, and send its entries from `from` (at most
    /// `max_events` events' worth) and every entry after its committed prefix; with
    /// `snapshot`, also the snapshot kept, the page then starting after it if that is later.
    Prepare {
        /// Request id.
        request: u64,
        /// The log.
        log: String,
        /// The ballot.
        ballot: Ballot,
        /// First slot of the page wanted.
        from: u64,
        /// Events of the page, at most.
        max_events: u32,
        /// Send the snapshot kept too (a recovery that starts from the newest snapshot).
        snapshot: bool,
    },
    /// Phase 1b: the promise, with what the acceptor holds.
    Promise {
        /// Request id.
        request: u64,
        /// The highest sequence number known chosen with every one before it (0: none).
        committed: u64,
        /// Entries with slots from `page_from`, ascending.
        page: Vec<Entry>,
        /// The page's first slot: the prepare's `from`, or the slot after the snapshot sent
        /// if that is later (0: the prepare's `from`).
        page_from: u64,
        /// Every entry with a slot in `page_from ..= covered_to` is in `page`.
        covered_to: u64,
        /// Every entry with a slot above `committed` (its uncertain tail).
        tail: Vec<Entry>,
        /// The snapshot kept, if the prepare asked for it and there is one.
        snapshot: Option<StoredSnapshot>,
        /// The log's replica list in the acceptor's view of the ring, as a digest
        /// ([`super::replicas_digest`]; 0: not sent). A proposer counts the promise only
        /// if its own list has the same digest.
        replicas: u64,
    },
    /// Phase 2a: accept `writes` at `ballot`; every slot up to `committed` is chosen.
    Accept {
        /// Request id.
        request: u64,
        /// The log.
        log: String,
        /// The ballot.
        ballot: Ballot,
        /// Every slot up to this is chosen.
        committed: u64,
        /// Keep only the newest entry (durable state: one value per log).
        compact: bool,
        /// The writes (their `ballot` fields are ignored: stored at `ballot`).
        writes: Vec<Entry>,
    },
    /// Phase 2b: accepted.
    Accepted {
        /// Request id.
        request: u64,
        /// The log's replica list in the acceptor's view, as a digest (see
        /// [`JournalMessage::Promise`]; 0: not sent).
        replicas: u64,
    },
    /// Refused: the acceptor promised a higher ballot.
    Nack {
        /// Request id.
        request: u64,
        /// The ballot it promised.
        promised: Ballot,
    },
    /// Read entries from `from` (no promise).
    Read {
        /// Request id.
        request: u64,
        /// The log.
        log: String,
        /// First slot.
        from: u64,
        /// Events, at most.
        max_events: u32,
    },
    /// The entries read.
    ReadReply {
        /// Request id.
        request: u64,
        /// Entries from the read's `from`, ascending.
        page: Vec<Entry>,
        /// Every entry with a slot in `from ..= covered_to` is in `page`.
        covered_to: u64,
        /// The log's replica list in the acceptor's view, as a digest (as in
        /// [`JournalMessage::Accepted`]; 0: not stated, from a node of an earlier version).
        replicas: u64,
    },
    /// Keep `snapshot` if it is newer than the one kept.
    SaveSnapshot {
        /// Request id.
        request: u64,
        /// The log.
        log: String,
        /// The snapshot.
        snapshot: StoredSnapshot,
    },
    /// Send the snapshot kept.
    LoadSnapshot {
        /// Request id.
        request: u64,
        /// The log.
        log: String,
    },
    /// The snapshot kept.
    SnapshotReply {
        /// Request id.
        request: u64,
        /// It, if any.
        snapshot: Option<StoredSnapshot>,
        /// The log's replica list in the acceptor's view, as a digest (as in
        /// [`JournalMessage::Accepted`]; 0: not stated, from a node of an earlier version).
        replicas: u64,
    },
    /// Delete the committed entries ending at or before `to` (the tail stays).
    Delete {
        /// Request id.
        request: u64,
        /// The log.
        log: String,
        /// The last sequence number to delete.
        to: u64,
    },
    /// Done (save or delete).
    Done {
        /// Request id.
        request: u64,
        /// The log's replica list in the acceptor's view, as a digest (as in
        /// [`JournalMessage::Accepted`]; 0: not stated, from a node of an earlier version).
        replicas: u64,
    },
    /// The acceptor cannot answer (its storage failed, the segment is still being
    /// synchronised after a ring change, …: `reason`); counted as no answer.
    Unable {
        /// Request id.
        request: u64,
        /// Why.
        reason: UnableReason,
    },
    /// A new owner's copy of the records of one ring segment, from an old owner
    /// (`records` are raw storage records; `last` closes the segment).
    Handoff {
        /// The segment.
        segment: u16,
        /// The page's number (from 0).
        page: u32,
        /// Storage records (key, value).
        records: Vec<(Vec<u8>, Vec<u8>)>,
        /// The last page of the segment.
        last: bool,
        /// Where the sender stands for the segment (read with the last page).
        standing: Standing,
        /// With the last page of an incomplete copy: what it still owes
        /// ([`super::handoff::Need`]; at most [`super::handoff::MAX_NEEDS`]).
        needs: Vec<Need>,
    },
    /// The sender holds no record of these segments (each closed at once), standing so
    /// for each.
    HandoffEmpty {
        /// The segments and the sender's standing for each.
        segments: Vec<(u16, Standing)>,
        /// (segment, need) for each need of an incomplete one (at most
        /// [`super::handoff::MAX_NEEDS`] per segment).
        needs: Vec<(u16, Need)>,
    },
    /// Empty handoffs received.
    HandoffEmptyAck {
        /// The segments.
        segments: Vec<u16>,
    },
    /// A new replica asks for these segments (it waits for them before it answers about
    /// them): the receiver sends them whatever its own view of the ring.
    HandoffWanted {
        /// The segments.
        segments: Vec<u16>,
        /// What the new replica holds of some of them already, sent once per wait: their
        /// senders leave out what it would not change ([`super::holding`]; empty from a
        /// node of an earlier version).
        held: Vec<SegmentHolding>,
    },
    /// A handoff page merged.
    HandoffAck {
        /// The segment.
        segment: u16,
        /// The page's number.
        page: u32,
    },
    /// The operator gave up these replicas as lost for good: stop waiting for them
    /// ([`super::give_up`]; one-way, best effort).
    GiveUp {
        /// Their addresses (at most [`super::give_up::MAX_GIVE_UP`]).
        lost: Vec<crate::address::Address>,
    },
    /// The writer learned that these writes are chosen: index them in the events-by-type
    /// stream (one-way but acknowledged; see [`super::stream`]).
    Learn {
        /// The message's id (acknowledged by [`JournalMessage::LearnAck`]).
        id: u64,
        /// The logs' chosen writes.
        logs: Vec<LearnedLog>,
    },
    /// A learn applied (sent again until acknowledged).
    LearnAck {
        /// The learn's id.
        id: u64,
    },
    /// Read the events-by-type stream of the segments this node replicates.
    StreamRead {
        /// Request id.
        request: u64,
        /// The entity type.
        entity_type: String,
        /// First slice.
        slice_from: u16,
        /// Last slice.
        slice_to: u16,
        /// Events after this offset: stream time, ms.
        after_at_ms: u64,
        /// Events after this offset: ordering within the stream time.
        after_ordering: u64,
        /// Events up to this stream time only, ms.
        horizon_ms: u64,
        /// Events, at most.
        limit: u32,
    },
    /// The events read, and for which segments this node answered.
    StreamReply {
        /// Request id.
        request: u64,
        /// The segments answered for (this node replicates them and is not waiting for
        /// their handoff).
        segments: Vec<u16>,
        /// Events in offset order.
        events: Vec<StreamEvent>,
        /// True if more events follow the last one (the page hit its limit).
        full: bool,
    },
}

impl JournalMessage {
    /// The request id and log of a request to an acceptor about one log (`None` for
    /// replies and handoff).
    pub fn request_log(&self) -> Option<(u64, &str)> {
        match self {
            JournalMessage::Prepare { request, log, .. }
            | JournalMessage::Accept { request, log, .. }
            | JournalMessage::Read { request, log, .. }
            | JournalMessage::SaveSnapshot { request, log, .. }
            | JournalMessage::LoadSnapshot { request, log }
            | JournalMessage::Delete { request, log, .. } => Some((*request, log.as_str())),
            _ => None,
        }
    }

    /// The digest of the answering replica's list for the log ([`super::replicas_digest`];
    /// 0: not stated), in an answer to a request of [`Self::request_log`] that states it:
    /// a promise, an accepted, a done, a read's or a snapshot load's answer (`None` for
    /// other messages).
    pub fn replicas_mut(&mut self) -> Option<&mut u64> {
        match self {
            JournalMessage::Promise { replicas, .. }
            | JournalMessage::Accepted { replicas, .. }
            | JournalMessage::Done { replicas, .. }
            | JournalMessage::ReadReply { replicas, .. }
            | JournalMessage::SnapshotReply { replicas, .. } => Some(replicas),
            _ => None,
        }
    }

    /// The request id of a reply (`None` for requests and handoff).
    pub fn reply_to(&self) -> Option<u64> {
        match self {
            JournalMessage::Promise { request, .. }
            | JournalMessage::Accepted { request, .. }
            | JournalMessage::Nack { request, .. }
            | JournalMessage::ReadReply { request, .. }
            | JournalMessage::SnapshotReply { request, .. }
            | JournalMessage::Done { request, .. }
            | JournalMessage::StreamReply { request, .. }
            | JournalMessage::Unable { request, .. } => Some(*request),
            _ => None,
        }
    }
}
