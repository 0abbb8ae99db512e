//! The proxy half of [`crate::singleton::ClusterSingleton`] (Akka's
//! `ClusterSingletonProxy`, Pekko `ClusterSingletonProxy.scala`): finds the node running
//! the instance and delivers messages to it in the order they were sent. `Proxy` owns its
//! state; it reaches the machine only through the `Ctx` it is handed.
//!
//! The proxy follows the oldest Up member (with the role). When that changes it forgets
//! where the instance is and sends `Identify` to the new oldest every
//! `singleton-identification-interval` (1 s) until it answers with a running incarnation.
//! Meanwhile messages are buffered, at most `buffer-size` (1000): when full the oldest is
//! dropped and counted. A message that reaches a node whose instance has stopped comes
//! back (`Undelivered`) and is buffered again in its place, so nothing is delivered out of
//! order across a hand-over.

use std::collections::BTreeMap;

use crate::address::UniqueAddress;
use crate::member::MemberStatus;
use crate::membership_view::MembershipView;

use super::context::Ctx;
use super::event::SingletonEvent;
use super::message::SingletonBody;
use super::timer::SingletonTimer;

/// Counters of the proxy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Messages sent to the instance.
    pub delivered: u64,
    /// Messages dropped because the buffer was full.
    pub dropped: u64,
    /// Messages that came back from a stopped instance and were buffered again.
    pub returned: u64,
    /// Times the instance was found.
    pub identified: u64,
}

/// The proxy's state.
#[derive(Debug)]
pub(super) struct Proxy {
    buffer_size: usize,
    /// The oldest Up member: where the instance should be.
    oldest: Option<UniqueAddress>,
    /// Where the instance was found running.
    target: Option<UniqueAddress>,
    /// Buffered messages by sequence number: (payload, ask).
    buffer: BTreeMap<u64, (Vec<u8>, Option<u64>)>,
    next_seq: u64,
    pub(super) stats: ProxyStats,
}

impl Proxy {
    /// An empty proxy that buffers at most `buffer_size` messages.
    pub(super) fn new(buffer_size: usize) -> Self {
        Proxy {
            buffer_size,
            oldest: None,
            target: None,
            buffer: BTreeMap::new(),
            next_seq: 1,
            stats: ProxyStats::default(),
        }
    }

    /// Where the instance was found running.
    pub(super) fn target(&self) -> Option<&UniqueAddress> {
        self.target.as_ref()
    }

    /// Messages buffered, count.
    pub(super) fn buffered(&self) -> usize {
        self.buffer.len()
    }

    fn buffer(&mut self, cx: &mut Ctx<'_>, seq: u64, payload: Vec<u8>, ask: Option<u64>) {
        self.buffer.insert(seq, (payload, ask));
        while self.buffer.len() > self.buffer_size {
            if let Some((_, (_, ask))) = self.buffer.pop_first() {
                self.stats.dropped += 1;
                cx.emit(SingletonEvent::Dropped { ask });
            }
        }
    }

    fn start_identifying(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        self.target = None;
        self.identify(cx, now_ms);
    }

    /// Sends `Identify` to the oldest (unless the instance is known) and arms the next
    /// try after `singleton-identification-interval` (ms).
    pub(super) fn identify(&mut self, cx: &mut Ctx<'_>, now_ms: u64) {
        if self.target.is_some() {
            return;
        }
        if let Some(o) = self.oldest.clone() {
            cx.send(&o, SingletonBody::Identify);
        }
        let at = now_ms + cx.settings.singleton_identification_interval_ms;
        cx.out.timers.set(SingletonTimer::Identify, at);
    }

    /// Follows the oldest Up member (with the role); identifies anew when it changed.
    pub(super) fn membership(&mut self, cx: &mut Ctx<'_>, now_ms: u64, view: &MembershipView) {
        let role = cx.settings.role.as_deref();
        let oldest = view
            .members
            .values()
            .filter(|m| m.status == MemberStatus::Up)
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .min_by(|a, b| a.age_cmp(b))
            .map(|m| m.unique_address.clone());
        if oldest != self.oldest {
            self.oldest = oldest;
            self.start_identifying(cx, now_ms);
        }
    }

    /// The answer to `Identify` from `from`: a running incarnation there makes it the
    /// target, and the buffer is delivered to it in order.
    pub(super) fn identified(
        &mut self,
        cx: &mut Ctx<'_>,
        from: &UniqueAddress,
        incarnation: Option<u64>,
    ) {
        if incarnation.is_none() || self.target.is_some() {
            return;
        }
        if self.oldest.as_ref() != Some(from) {
            return;
        }
        cx.out.timers.cancel(&SingletonTimer::Identify);
        self.target = Some(from.clone());
        self.stats.identified += 1;
        for (seq, (payload, ask)) in std::mem::take(&mut self.buffer) {
            self.stats.delivered += 1;
            cx.send(from, SingletonBody::Deliver { seq, payload, ask });
        }
    }

    /// A message for the instance: sent to the target, or buffered while it is unknown.
    pub(super) fn tell(&mut self, cx: &mut Ctx<'_>, payload: Vec<u8>, ask: Option<u64>) {
        let seq = self.next_seq;
        self.next_seq += 1;
        match self.target.clone() {
            Some(t) => {
                self.stats.delivered += 1;
                cx.send(&t, SingletonBody::Deliver { seq, payload, ask });
            }
            None => self.buffer(cx, seq, payload, ask),
        }
    }

    /// Message `seq` came back from `from`, whose instance had stopped: buffered again in
    /// its place (and the instance identified anew), or sent to the newer target.
    pub(super) fn undelivered(
        &mut self,
        cx: &mut Ctx<'_>,
        now_ms: u64,
        from: &UniqueAddress,
        seq: u64,
        payload: Vec<u8>,
        ask: Option<u64>,
    ) {
        self.stats.returned += 1;
        if self.target.as_ref() == Some(from) {
            self.buffer(cx, seq, payload, ask);
            self.start_identifying(cx, now_ms);
        } else if let Some(t) = self.target.clone() {
            self.stats.delivered += 1;
            cx.send(&t, SingletonBody::Deliver { seq, payload, ask });
        } else {
            self.buffer(cx, seq, payload, ask);
        }
    }
}
