//! The proxy half of [`super::ClusterSingleton`] (Akka's `ClusterSingletonProxy`): finds
//! the node running the instance and delivers messages to it in the order they were sent.
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

use super::{ClusterSingleton, SingletonBody, SingletonEvent, SingletonTimer};

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

    pub(super) fn target(&self) -> Option<&UniqueAddress> {
        self.target.as_ref()
    }

    pub(super) fn buffered(&self) -> usize {
        self.buffer.len()
    }
}

impl ClusterSingleton {
    fn buffer(&mut self, seq: u64, payload: Vec<u8>, ask: Option<u64>) {
        self.proxy.buffer.insert(seq, (payload, ask));
        while self.proxy.buffer.len() > self.proxy.buffer_size {
            if let Some((_, (_, ask))) = self.proxy.buffer.pop_first() {
                self.proxy.stats.dropped += 1;
                self.out.events.push_back(SingletonEvent::Dropped { ask });
            }
        }
    }

    fn start_identifying(&mut self, now_ms: u64) {
        self.proxy.target = None;
        self.proxy_identify(now_ms);
    }

    pub(super) fn proxy_identify(&mut self, now_ms: u64) {
        if self.proxy.target.is_some() {
            return;
        }
        if let Some(o) = self.proxy.oldest.clone() {
            self.send(&o, SingletonBody::Identify);
        }
        let at = now_ms + self.settings.singleton_identification_interval_ms;
        self.out.timers.set(SingletonTimer::Identify, at);
    }

    pub(super) fn proxy_membership(&mut self, now_ms: u64, view: &MembershipView) {
        let role = self.settings.role.as_deref();
        let oldest = view
            .members
            .values()
            .filter(|m| m.status == MemberStatus::Up)
            .filter(|m| role.is_none_or(|r| m.has_role(r)))
            .min_by(|a, b| a.age_cmp(b))
            .map(|m| m.unique_address.clone());
        if oldest != self.proxy.oldest {
            self.proxy.oldest = oldest;
            self.start_identifying(now_ms);
        }
    }

    pub(super) fn proxy_identified(
        &mut self,
        _now_ms: u64,
        from: &UniqueAddress,
        incarnation: Option<u64>,
    ) {
        if incarnation.is_none() || self.proxy.target.is_some() {
            return;
        }
        if self.proxy.oldest.as_ref() != Some(from) {
            return;
        }
        self.out.timers.cancel(&SingletonTimer::Identify);
        self.proxy.target = Some(from.clone());
        self.proxy.stats.identified += 1;
        for (seq, (payload, ask)) in std::mem::take(&mut self.proxy.buffer) {
            self.proxy.stats.delivered += 1;
            self.send(from, SingletonBody::Deliver { seq, payload, ask });
        }
    }

    pub(super) fn proxy_tell(&mut self, _now_ms: u64, payload: Vec<u8>, ask: Option<u64>) {
        let seq = self.proxy.next_seq;
        self.proxy.next_seq += 1;
        match self.proxy.target.clone() {
            Some(t) => {
                self.proxy.stats.delivered += 1;
                self.send(&t, SingletonBody::Deliver { seq, payload, ask });
            }
            None => self.buffer(seq, payload, ask),
        }
    }

    pub(super) fn proxy_undelivered(
        &mut self,
        now_ms: u64,
        from: &UniqueAddress,
        seq: u64,
        payload: Vec<u8>,
        ask: Option<u64>,
    ) {
        self.proxy.stats.returned += 1;
        if self.proxy.target.as_ref() == Some(from) {
            self.buffer(seq, payload, ask);
            self.start_identifying(now_ms);
        } else if let Some(t) = self.proxy.target.clone() {
            self.proxy.stats.delivered += 1;
            self.send(&t, SingletonBody::Deliver { seq, payload, ask });
        } else {
            self.buffer(seq, payload, ask);
        }
    }
}
