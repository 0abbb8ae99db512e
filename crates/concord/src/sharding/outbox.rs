//! [`Outboxes`]: how the sharding driver sends without losing user messages and without
//! ever waiting. Each peer's ordinary lane is tried first; a frame the lane has no room
//! for goes into that peer's backlog, which a flush task drains with
//! [`crate::remote::OutboundLane::send_all_wait`] — in order, before anything newer for
//! that peer. While backlogs hold more than [`BACKPRESSURE_FRAMES`], the driver takes no
//! new `tell`/`ask` from its handles (their callers wait): backpressure reaches the
//! application instead of a drop. Inbound messages keep flowing meanwhile, so two nodes
//! sending to each other never deadlock. A backlog is bounded ([`MAX_BACKLOG`]); beyond it
//! frames are dropped and counted (only a peer that stopped reading gets there).

use std::collections::{HashMap, VecDeque};

use concord_core::{Address, Lane, Transmit};

use super::codec::ShardingCodec;
use crate::remote::{Frame, OutboundLane, ProtocolSender};

/// Backlogged frames above which new requests from the handles wait.
pub(crate) const BACKPRESSURE_FRAMES: usize = 4_096;
/// Most frames held for one peer; more are dropped (counted).
pub(crate) const MAX_BACKLOG: usize = 200_000;

/// The backlog of one peer.
struct Outbox {
    lane: OutboundLane,
    backlog: VecDeque<Frame>,
    flushing: bool,
}

/// Every peer's backlog.
pub(crate) struct Outboxes {
    sender: ProtocolSender<ShardingCodec>,
    peers: HashMap<Address, Outbox>,
    backlogged: usize,
    /// Frames dropped because a backlog was full.
    pub(crate) dropped: u64,
}

/// A flush task's report: the peer it drained.
pub(crate) struct Flushed(pub(crate) Address);

impl Outboxes {
    pub(crate) fn new(sender: ProtocolSender<ShardingCodec>) -> Self {
        Outboxes {
            sender,
            peers: HashMap::new(),
            backlogged: 0,
            dropped: 0,
        }
    }

    /// The sender (for replies sent straight from entity tasks).
    pub(crate) fn sender(&self) -> &ProtocolSender<ShardingCodec> {
        &self.sender
    }

    /// True while the handles may hand in new requests.
    pub(crate) fn accepting(&self) -> bool {
        self.backlogged < BACKPRESSURE_FRAMES
    }

    /// Frames waiting in backlogs.
    pub(crate) fn backlogged(&self) -> usize {
        self.backlogged
    }

    /// Sends `transmits` (grouped by peer, each peer's in order, one lock of its lane per
    /// group); returns the peers whose backlog needs a flush task started.
    pub(crate) fn send_all(
        &mut self,
        transmits: Vec<Transmit<concord_core::sharding::ShardingMessage>>,
    ) -> Vec<Address> {
        let mut groups: Vec<(Address, VecDeque<Frame>)> = Vec::new();
        for t in &transmits {
            let (to, _, frame) = self.sender.encode(t).into_parts();
            match groups.iter_mut().find(|(a, _)| *a == to) {
                Some((_, g)) => g.push_back(frame),
                None => groups.push((to, VecDeque::from([frame]))),
            }
        }
        let transport = self.sender.transport().clone();
        let mut flush = Vec::new();
        for (to, mut frames) in groups {
            let ob = self.peers.entry(to.clone()).or_insert_with(|| Outbox {
                lane: transport.outbound_lane(&to, Lane::Ordinary),
                backlog: VecDeque::new(),
                flushing: false,
            });
            if ob.lane.is_closed() {
                ob.lane = transport.outbound_lane(&to, Lane::Ordinary);
            }
            if ob.backlog.is_empty() && !ob.flushing {
                ob.lane.try_send_all(&mut frames);
                if frames.is_empty() {
                    continue;
                }
            }
            let room = MAX_BACKLOG.saturating_sub(ob.backlog.len());
            if frames.len() > room {
                self.dropped += (frames.len() - room) as u64;
                frames.truncate(room);
            }
            self.backlogged += frames.len();
            ob.backlog.extend(frames);
            if !ob.flushing && !ob.backlog.is_empty() {
                ob.flushing = true;
                flush.push(to);
            }
        }
        flush
    }

    /// Takes `to`'s backlog for a flush task: (the lane handle, the frames).
    pub(crate) fn take_backlog(&mut self, to: &Address) -> Option<(OutboundLane, VecDeque<Frame>)> {
        let transport = self.sender.transport().clone();
        let ob = self.peers.get_mut(to)?;
        let frames = std::mem::take(&mut ob.backlog);
        self.backlogged = self.backlogged.saturating_sub(frames.len());
        Some((transport.outbound_lane(to, Lane::Ordinary), frames))
    }

    /// A flush task finished `to`; returns true if more arrived meanwhile (flush again).
    pub(crate) fn flushed(&mut self, to: &Address) -> bool {
        match self.peers.get_mut(to) {
            Some(ob) if !ob.backlog.is_empty() => true,
            Some(ob) => {
                ob.flushing = false;
                false
            }
            None => false,
        }
    }

    /// Forgets peers that left (their lanes and backlogs).
    pub(crate) fn retain(&mut self, keep: impl Fn(&Address) -> bool) {
        let mut gone = 0;
        self.peers.retain(|a, ob| {
            let k = keep(a);
            if !k {
                gone += ob.backlog.len();
            }
            k
        });
        self.backlogged = self.backlogged.saturating_sub(gone);
    }
}

/// Drains `frames` into `lane` (waiting for room), then reports back.
pub(crate) async fn flush(lane: OutboundLane, frames: VecDeque<Frame>, to: Address) -> Flushed {
    let _ = lane.send_all_wait(frames).await;
    Flushed(to)
}
