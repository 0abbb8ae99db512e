//! The outbound queue of one lane to one peer: frames are encoded by the sender straight
//! into the lane's buffer, and the lane's writer task takes the whole buffer at once and
//! writes it with one call. No per-message allocation or channel operation on this path.
//!
//! Bounded by `queue_size` frames (Akka's `outbound-*-queue-size`) and by `max_bytes` of
//! frames: when full, [`LaneQueue::push`] refuses (the caller counts a drop) and
//! [`LaneQueue::push_wait`] waits until the writer has taken the buffer.
//!
//! [`OutboundLane`] is a sender's handle on one such queue.

use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use concord_core::{Address, Lane, ProtocolId};
use tokio::sync::Notify;

use super::envelope::Frame;
use super::transport::{SendError, Transport};

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushError {
    /// The queue holds `queue_size` frames.
    Full,
    /// The lane's writer has stopped (idle, or the transport shut down).
    Closed,
}

#[derive(Debug)]
struct State {
    buf: BytesMut,
    frames: u64,
    closed: bool,
    /// The writer waits for frames (notify it on the next push).
    writer_waiting: bool,
    /// Senders waiting for room (notify them on the next take).
    waiting_for_room: usize,
}

/// The queue of one (peer, lane).
#[derive(Debug)]
pub(crate) struct LaneQueue {
    state: Mutex<State>,
    /// The writer waits here for frames.
    data: Notify,
    /// `push_wait` waits here for room.
    room: Notify,
    queue_size: u64,
    max_bytes: usize,
}

/// What the writer took from the queue.
pub(crate) struct Taken {
    pub(crate) frames: u64,
}

impl LaneQueue {
    /// A queue of at most `queue_size` frames and `max_bytes` bytes (at least one frame is
    /// always accepted into an empty queue).
    pub(crate) fn new(queue_size: usize, max_bytes: usize, initial_bytes: usize) -> Self {
        LaneQueue {
            state: Mutex::new(State {
                buf: BytesMut::with_capacity(initial_bytes),
                frames: 0,
                closed: false,
                writer_waiting: false,
                waiting_for_room: 0,
            }),
            data: Notify::new(),
            room: Notify::new(),
            queue_size: queue_size.max(1) as u64,
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes `o` into the queue without waiting.
    pub(crate) fn push(&self, o: Frame) -> Result<(), (PushError, Frame)> {
        self.push_or_wait(o, false)
    }

    /// Like `push`; when full and `wait`, registers as waiting for room (under the lock,
    /// so the next take cannot miss it).
    fn push_or_wait(&self, o: Frame, wait: bool) -> Result<(), (PushError, Frame)> {
        let wake_writer = {
            let mut s = self.lock();
            if s.closed {
                return Err((PushError::Closed, o));
            }
            if s.frames >= self.queue_size || (s.frames > 0 && s.buf.len() >= self.max_bytes) {
                if wait {
                    s.waiting_for_room += 1;
                }
                return Err((PushError::Full, o));
            }
            o.write(&mut s.buf);
            s.frames += 1;
            std::mem::take(&mut s.writer_waiting)
        };
        if wake_writer {
            self.data.notify_one();
        }
        Ok(())
    }

    /// Encodes `o` into the queue, waiting while it is full; `Err` if the lane closed.
    pub(crate) async fn push_wait(&self, o: Frame) -> Result<(), (PushError, Frame)> {
        // A sender that never waits would keep its worker thread from the lane's writer
        // (often woken onto the same thread): take part in tokio's cooperative budget.
        tokio::task::coop::consume_budget().await;
        let mut o = match self.push(o) {
            Err((PushError::Full, back)) => back,
            done => return done,
        };
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match self.push_or_wait(o, true) {
                Ok(()) => return Ok(()),
                Err((PushError::Full, back)) => {
                    o = back;
                    room.await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Encodes as many frames of `frames` as fit into the queue, in order, under one lock,
    /// without waiting; the rest stay in `frames`. `Err` if the lane closed.
    pub(crate) fn try_push_all(
        &self,
        frames: &mut std::collections::VecDeque<Frame>,
    ) -> Result<(), PushError> {
        let wake_writer = {
            let mut s = self.lock();
            if s.closed {
                return Err(PushError::Closed);
            }
            let mut pushed = false;
            while s.frames < self.queue_size && (s.frames == 0 || s.buf.len() < self.max_bytes) {
                let Some(f) = frames.pop_front() else { break };
                f.write(&mut s.buf);
                s.frames += 1;
                pushed = true;
            }
            pushed && std::mem::take(&mut s.writer_waiting)
        };
        if wake_writer {
            self.data.notify_one();
        }
        Ok(())
    }

    /// Encodes the frames of `frames` into the queue in order, under one lock, waiting
    /// while it is full; `Err` (with the frames not queued) if the lane closed.
    pub(crate) async fn push_all_wait(
        &self,
        frames: &mut std::collections::VecDeque<Frame>,
    ) -> Result<(), PushError> {
        tokio::task::coop::consume_budget().await;
        loop {
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            let wake_writer = {
                let mut s = self.lock();
                if s.closed {
                    return Err(PushError::Closed);
                }
                let mut pushed = false;
                while s.frames < self.queue_size && (s.frames == 0 || s.buf.len() < self.max_bytes)
                {
                    let Some(f) = frames.pop_front() else { break };
                    f.write(&mut s.buf);
                    s.frames += 1;
                    pushed = true;
                }
                if !frames.is_empty() {
                    s.waiting_for_room += 1;
                }
                pushed && std::mem::take(&mut s.writer_waiting)
            };
            if wake_writer {
                self.data.notify_one();
            }
            if frames.is_empty() {
                return Ok(());
            }
            room.await;
        }
    }

    /// Moves every queued frame into `out` (which the writer then writes and clears);
    /// `None` if the queue is empty.
    pub(crate) fn take(&self, out: &mut BytesMut) -> Option<Taken> {
        let (taken, waiters) = {
            let mut s = self.lock();
            if s.frames == 0 {
                return None;
            }
            out.clear();
            std::mem::swap(&mut s.buf, out);
            let frames = std::mem::take(&mut s.frames);
            (Taken { frames }, std::mem::take(&mut s.waiting_for_room))
        };
        if waiters > 0 {
            self.room.notify_waiters();
        }
        Some(taken)
    }

    /// Drops everything queued; returns the number of frames dropped.
    pub(crate) fn clear(&self) -> u64 {
        let n = {
            let mut s = self.lock();
            s.buf.clear();
            std::mem::take(&mut s.frames)
        };
        self.room.notify_waiters();
        n
    }

    /// Frames and bytes queued.
    pub(crate) fn queued(&self) -> (u64, usize) {
        let s = self.lock();
        (s.frames, s.buf.len())
    }

    /// Most frames the queue holds (`outbound-*-queue-size`).
    pub(crate) fn queue_size(&self) -> u64 {
        self.queue_size
    }

    /// True if nothing is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().frames == 0
    }

    /// Closes the queue if it is empty (its writer idled out and no sender holds a handle
    /// on it); false if frames arrived meanwhile.
    pub(crate) fn close_if_empty(&self) -> bool {
        let mut s = self.lock();
        if s.frames == 0 {
            s.closed = true;
        }
        s.closed
    }

    /// Closes the queue (the transport shut down); returns the frames dropped.
    pub(crate) fn close(&self) -> u64 {
        let n = {
            let mut s = self.lock();
            s.closed = true;
            s.buf.clear();
            std::mem::take(&mut s.frames)
        };
        self.room.notify_waiters();
        self.data.notify_one();
        n
    }

    /// True once closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Waits until frames are queued (or the queue closed).
    pub(crate) async fn wait_for_data(&self) {
        let data = self.data.notified();
        tokio::pin!(data);
        data.as_mut().enable();
        {
            let mut s = self.lock();
            if s.frames > 0 || s.closed {
                return;
            }
            s.writer_waiting = true;
        }
        data.await;
    }
}

/// A sender's handle on the queue of one peer and lane (see [`Transport::outbound_lane`]):
/// while it is held, the lane stays open (its connection may still close when idle).
/// Frames too large for the lane, or for a link with injected faults, take the general
/// path of [`Transport::send`].
pub struct OutboundLane {
    pub(super) transport: Transport,
    pub(super) to: Address,
    pub(super) lane: Lane,
    pub(super) queue: Arc<LaneQueue>,
}

impl OutboundLane {
    /// Like [`Transport::send`], to this handle's peer and lane.
    pub fn send(&self, frame: Frame) {
        let Ok(Some((lane, frame))) = self.transport.prepare(&self.to, self.lane, frame) else {
            return;
        };
        if lane != self.lane {
            self.transport.enqueue(&self.to, lane, frame);
        } else if self.queue.push(frame).is_err() {
            self.transport.inner.stats.dropped(lane, 1);
        }
    }

    /// Like [`OutboundLane::send`], but a frame the lane's queue has no room for comes
    /// back instead of being dropped, for a sender that keeps its own backlog and must not
    /// wait (a layer's driver that also has to read its inbound messages). Frames that
    /// must go elsewhere (too large for the lane, faults injected) take the general path.
    pub fn try_send(&self, frame: Frame) -> Result<(), Frame> {
        let t = &self.transport;
        if t.inner.faults.get(&self.to).is_some() {
            self.send(frame);
            return Ok(());
        }
        let lane = match t.lane_for(self.lane, &frame) {
            Ok(l) => l,
            Err(e) => {
                t.too_large(&self.to, &frame, e);
                return Ok(());
            }
        };
        let (protocol, bytes) = (frame.protocol, frame.payload.len() as u64);
        if lane != self.lane {
            t.count_out(protocol, 1, bytes);
            t.enqueue(&self.to, lane, frame);
            return Ok(());
        }
        match self.queue.push(frame) {
            Ok(()) => {
                t.count_out(protocol, 1, bytes);
                Ok(())
            }
            Err((PushError::Full, back)) => Err(back),
            Err((PushError::Closed, _)) => {
                t.inner.stats.dropped(lane, 1);
                Ok(())
            }
        }
    }

    /// Like [`OutboundLane::try_send`] for every frame of `frames`, in order, under one
    /// lock of the lane's queue: the frames that do not fit stay in `frames` (the first of
    /// them is the first that did not fit).
    pub fn try_send_all(&self, frames: &mut std::collections::VecDeque<Frame>) {
        let t = &self.transport;
        if t.inner.faults.get(&self.to).is_some() {
            for f in frames.drain(..) {
                self.send(f);
            }
            return;
        }
        let mut batch = std::collections::VecDeque::new();
        while let Some(frame) = frames.pop_front() {
            match t.lane_for(self.lane, &frame) {
                Ok(l) if l == self.lane => batch.push_back(frame),
                Ok(l) => {
                    // A large frame: everything before it goes first, in order.
                    self.push_counted(&mut batch);
                    if !batch.is_empty() {
                        batch.push_back(frame);
                        break;
                    }
                    t.count_out(frame.protocol, 1, frame.payload.len() as u64);
                    t.enqueue(&self.to, l, frame);
                }
                Err(e) => t.too_large(&self.to, &frame, e),
            }
        }
        self.push_counted(&mut batch);
        // What did not fit goes back in front, in order.
        while let Some(f) = batch.pop_back() {
            frames.push_front(f);
        }
    }

    /// Pushes what fits of `batch` (counting it); the rest stays in `batch`.
    fn push_counted(&self, batch: &mut std::collections::VecDeque<Frame>) {
        let t = &self.transport;
        let total = batch.len();
        let sizes: Vec<(ProtocolId, u64)> = batch
            .iter()
            .map(|f| (f.protocol, f.payload.len() as u64))
            .collect();
        if self.queue.try_push_all(batch).is_err() {
            t.inner.stats.dropped(self.lane, batch.len() as u64);
            batch.clear();
            return;
        }
        for (p, b) in sizes.into_iter().take(total - batch.len()) {
            t.count_out(p, 1, b);
        }
    }

    /// True if the lane's queue is closed (the transport shut down): a sender holding this
    /// handle should take a new one.
    pub fn is_closed(&self) -> bool {
        self.queue.is_closed()
    }

    /// Queues every frame of `frames` in order, waiting while the lane is full: one lock
    /// per batch instead of one per message, for senders of many messages (a region
    /// forwarding its buffer, a replicator's gossip). Frames that must go elsewhere (too
    /// large for the lane, faults injected) take the general path.
    pub async fn send_all_wait(
        &self,
        frames: impl IntoIterator<Item = Frame>,
    ) -> Result<(), SendError> {
        let t = &self.transport;
        let frames = frames.into_iter();
        let mut batch = std::collections::VecDeque::with_capacity(frames.size_hint().0);
        if t.inner.faults.get(&self.to).is_some() {
            for frame in frames {
                if let Some((lane, frame)) = t.prepare(&self.to, self.lane, frame)? {
                    t.enqueue(&self.to, lane, frame);
                }
            }
            return Ok(());
        }
        // Counted once per run of frames of one protocol.
        let mut run: Option<(ProtocolId, u64, u64)> = None;
        for frame in frames {
            let lane = match t.lane_for(self.lane, &frame) {
                Ok(l) => l,
                Err(e) => {
                    t.too_large(&self.to, &frame, e.clone());
                    return Err(e);
                }
            };
            match &mut run {
                Some((p, n, b)) if *p == frame.protocol => {
                    *n += 1;
                    *b += frame.payload.len() as u64;
                }
                _ => {
                    if let Some((p, n, b)) = run.take() {
                        t.count_out(p, n, b);
                    }
                    run = Some((frame.protocol, 1, frame.payload.len() as u64));
                }
            }
            if lane == self.lane {
                batch.push_back(frame);
            } else {
                t.enqueue(&self.to, lane, frame);
            }
        }
        if let Some((p, n, b)) = run {
            t.count_out(p, n, b);
        }
        self.queue
            .push_all_wait(&mut batch)
            .await
            .map_err(|_| SendError::Shutdown)
    }

    /// Like [`Transport::send_wait`], to this handle's peer and lane.
    pub async fn send_wait(&self, frame: Frame) -> Result<(), SendError> {
        let Some((lane, frame)) = self.transport.prepare(&self.to, self.lane, frame)? else {
            return Ok(());
        };
        if lane != self.lane {
            self.transport.enqueue(&self.to, lane, frame);
            return Ok(());
        }
        // A held queue closes only when the transport shuts down.
        self.queue
            .push_wait(frame)
            .await
            .map_err(|_| SendError::Shutdown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use concord_core::ProtocolId;
    use std::sync::Arc;

    fn o(n: u8) -> Frame {
        Frame {
            protocol: ProtocolId(1000),
            manifest: 1,
            recipient_uid: 1,
            payload: Bytes::from(vec![n; 3]),
            trace: None,
        }
    }

    #[tokio::test]
    async fn bounded_push_take_and_waiting_for_room() {
        let q = Arc::new(LaneQueue::new(2, 1 << 20, 64));
        assert!(q.push(o(1)).is_ok());
        assert!(q.push(o(2)).is_ok());
        assert_eq!(q.push(o(3)).unwrap_err().0, PushError::Full);
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move { q.push_wait(o(3)).await.is_ok() })
        };
        let mut out = BytesMut::new();
        assert_eq!(q.take(&mut out).unwrap().frames, 2);
        assert!(!out.is_empty());
        assert!(waiter.await.unwrap(), "room after the take");
        q.wait_for_data().await;
        assert_eq!(q.take(&mut out).unwrap().frames, 1);
        assert!(q.take(&mut out).is_none());
        assert!(q.close_if_empty());
        assert_eq!(q.push(o(4)).unwrap_err().0, PushError::Closed);
    }

    #[test]
    fn the_byte_bound_holds_whatever_the_frame_count() {
        let q = LaneQueue::new(1000, 100, 64);
        let big = |n| Frame {
            payload: Bytes::from(vec![n; 60]),
            ..o(n)
        };
        assert!(q.push(big(1)).is_ok(), "an empty queue takes a frame");
        assert!(q.push(big(2)).is_ok(), "under 100 bytes");
        assert_eq!(q.push(big(3)).unwrap_err().0, PushError::Full);
        let mut out = BytesMut::new();
        assert_eq!(q.take(&mut out).unwrap().frames, 2);
        assert!(q.push(big(3)).is_ok());
    }
}
