//! [`BackloggedOutbound`]: the runtime's [`Outbound`] for a layer that must not drop user
//! messages for want of lane room and must never wait (sharding). Each peer's ordinary
//! lane is tried first; what the lane has no room for goes into that peer's backlog, which
//! a flush task drains with [`crate::remote::OutboundLane::send_all_wait`] — in order,
//! before anything newer for that peer. While backlogs hold more than
//! [`BACKPRESSURE_FRAMES`], the host takes no new command from its handles (their callers
//! wait): backpressure reaches the application instead of a drop. Inbound messages keep
//! flowing meanwhile, so two nodes sending to each other never deadlock. A backlog is
//! bounded ([`MAX_BACKLOG`]); beyond it frames are dropped and counted (only a peer that
//! stopped reading gets there). A flush task that finishes wakes the host's loop, so a host
//! that stopped taking commands takes them again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use concord_core::{Address, Lane, MembershipView, Transmit};
use tokio::sync::Notify;

use crate::host::{Backlog, Outbound};
use crate::remote::{Codec, Frame, OutboundLane, ProtocolSender};
use concord_core::TraceContext;

/// Backlogged frames above which the host takes no new commands.
pub const BACKPRESSURE_FRAMES: usize = 4_096;
/// Most frames held for one peer; more are dropped (counted).
pub const MAX_BACKLOG: usize = 200_000;

/// The backlog of one peer, shared with its flush task.
struct PeerBacklog {
    frames: VecDeque<Frame>,
    flushing: bool,
}

struct Peer {
    lane: OutboundLane,
    backlog: Arc<Mutex<PeerBacklog>>,
}

/// Counters shared with the flush tasks.
#[derive(Default)]
struct Shared {
    backlogged: AtomicUsize,
    dropped: AtomicU64,
}

/// See the module docs.
pub struct BackloggedOutbound<C: Codec> {
    sender: ProtocolSender<C>,
    peers: HashMap<Address, Peer>,
    shared: Arc<Shared>,
    wake: Arc<Notify>,
}

impl<C: Codec> BackloggedOutbound<C> {
    /// Sends with `sender`; a finished flush notifies `wake` (the host loop's wake-up).
    pub fn new(sender: ProtocolSender<C>, wake: Arc<Notify>) -> Self {
        BackloggedOutbound {
            sender,
            peers: HashMap::new(),
            shared: Arc::default(),
            wake,
        }
    }

    fn lock(b: &Mutex<PeerBacklog>) -> std::sync::MutexGuard<'_, PeerBacklog> {
        b.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the flush task of one peer's backlog.
    fn start_flush(
        shared: Arc<Shared>,
        wake: Arc<Notify>,
        lane: OutboundLane,
        backlog: Arc<Mutex<PeerBacklog>>,
    ) {
        tokio::spawn(async move {
            loop {
                let frames = {
                    let mut b = Self::lock(&backlog);
                    if b.frames.is_empty() {
                        b.flushing = false;
                        break;
                    }
                    std::mem::take(&mut b.frames)
                };
                let n = frames.len();
                let _ = lane.send_all_wait(frames).await;
                shared.backlogged.fetch_sub(n, Ordering::Relaxed);
            }
            wake.notify_one();
        });
    }
}

impl<C: Codec> Outbound<C::Message> for BackloggedOutbound<C> {
    fn send(&mut self, transmits: &mut Vec<Transmit<C::Message>>) {
        self.send_traced(transmits, &[]);
    }

    fn send_traced(
        &mut self,
        transmits: &mut Vec<Transmit<C::Message>>,
        traces: &[(usize, TraceContext)],
    ) {
        // Grouped by peer, each peer's in order, one lock of its lane per group.
        let mut groups: Vec<(Address, VecDeque<Frame>)> = Vec::new();
        let mut traces = traces.iter().peekable();
        for (i, t) in transmits.drain(..).enumerate() {
            let mut o = self.sender.encode(&t);
            if traces.peek().is_some_and(|(at, _)| *at == i) {
                o.trace = traces.next().map(|(_, c)| *c);
            }
            let (to, _, frame) = o.into_parts();
            match groups.iter_mut().find(|(a, _)| *a == to) {
                Some((_, g)) => g.push_back(frame),
                None => groups.push((to, VecDeque::from([frame]))),
            }
        }
        let transport = self.sender.transport().clone();
        for (to, mut frames) in groups {
            let peer = self.peers.entry(to.clone()).or_insert_with(|| Peer {
                lane: transport.outbound_lane(&to, Lane::Ordinary),
                backlog: Arc::new(Mutex::new(PeerBacklog {
                    frames: VecDeque::new(),
                    flushing: false,
                })),
            });
            if peer.lane.is_closed() {
                peer.lane = transport.outbound_lane(&to, Lane::Ordinary);
            }
            let start = {
                let mut b = Self::lock(&peer.backlog);
                if b.frames.is_empty() && !b.flushing {
                    peer.lane.try_send_all(&mut frames);
                    if frames.is_empty() {
                        continue;
                    }
                }
                let room = MAX_BACKLOG.saturating_sub(b.frames.len());
                if frames.len() > room {
                    self.shared
                        .dropped
                        .fetch_add((frames.len() - room) as u64, Ordering::Relaxed);
                    frames.truncate(room);
                }
                self.shared
                    .backlogged
                    .fetch_add(frames.len(), Ordering::Relaxed);
                b.frames.extend(frames);
                let start = !b.flushing && !b.frames.is_empty();
                b.flushing |= start;
                start
            };
            if start {
                let lane = transport.outbound_lane(&to, Lane::Ordinary);
                Self::start_flush(
                    self.shared.clone(),
                    self.wake.clone(),
                    lane,
                    peer.backlog.clone(),
                );
            }
        }
    }

    fn accepting(&self) -> bool {
        self.shared.backlogged.load(Ordering::Relaxed) < BACKPRESSURE_FRAMES
    }

    fn membership(&mut self, view: &MembershipView) {
        // Forget peers that left (their lanes and backlogs).
        let shared = &self.shared;
        self.peers.retain(|a, p| {
            let keep = view.members.keys().any(|u| u.address == *a);
            if !keep {
                let gone = std::mem::take(&mut Self::lock(&p.backlog).frames).len();
                shared.backlogged.fetch_sub(gone, Ordering::Relaxed);
            }
            keep
        });
    }

    fn backlog(&self) -> Backlog {
        Backlog {
            queued: self.shared.backlogged.load(Ordering::Relaxed),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
        }
    }
}
