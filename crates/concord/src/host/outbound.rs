//! [`Outbound`]: where a host's transmits go at the end of each turn — the runtime's
//! protocol sender over the transport's lanes, or the simulator's network.

use std::sync::{Arc, Mutex};

use concord_core::{MembershipView, Transmit};

use super::effects::Backlog;
use super::trace::TraceContext;

/// Carries a host's transmits out.
pub trait Outbound<M>: Send {
    /// Sends one turn's transmits, in order; an implementation groups them per peer and
    /// lane and hands each group over at once (one lane lock, one write per peer). Takes
    /// them out of `transmits`.
    fn send(&mut self, transmits: &mut Vec<Transmit<M>>);

    /// Like [`Outbound::send`], each transmit at an index of `traces` (sorted by index)
    /// sent with that trace context; by default the contexts are dropped (the simulator).
    fn send_traced(&mut self, transmits: &mut Vec<Transmit<M>>, traces: &[(usize, TraceContext)]) {
        let _ = traces;
        self.send(transmits);
    }

    /// False while the host should take no new commands from its handles (an outbound
    /// backlog drains: backpressure reaches the callers instead of a drop).
    fn accepting(&self) -> bool {
        true
    }

    /// The membership changed: state kept per peer may be forgotten for non-members.
    fn membership(&mut self, _view: &MembershipView) {}

    /// What the sender holds back now (a sender that never holds anything back: nothing).
    fn backlog(&self) -> Backlog {
        Backlog::default()
    }
}

/// An [`Outbound`] that keeps what it is given, for whoever holds a clone (the simulator's
/// network takes from it; tests read it).
#[derive(Debug)]
pub struct Collect<M>(Arc<Mutex<Vec<Transmit<M>>>>);

impl<M> Clone for Collect<M> {
    fn clone(&self) -> Self {
        Collect(self.0.clone())
    }
}

impl<M> Default for Collect<M> {
    fn default() -> Self {
        Collect(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<M> Collect<M> {
    /// Takes everything sent so far, in order.
    pub fn take(&self) -> Vec<Transmit<M>> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl<M: Send> Outbound<M> for Collect<M> {
    fn send(&mut self, transmits: &mut Vec<Transmit<M>>) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .append(transmits);
    }
}
