//! Protocol machines hosted next to the membership machine of a simulated node, routed by
//! [`ProtocolId`] like the runtime routes envelopes.
//!
//! Any [`ProtocolMachine`] whose messages are `Clone + Debug + Send` can be hosted: it is
//! wrapped in [`Hosted`], which erases the message type for the simulated network
//! ([`Payload`]) and keeps the machine's events for the test to read.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use concord_core::{
    MembershipChange, MembershipView, ProtocolId, ProtocolMachine, Transmit, UniqueAddress,
};

/// A message of a hosted protocol in flight: any cloneable value (duplication on the
/// simulated network clones it).
pub trait SimPayload: Any + Send + Debug {
    /// A boxed copy.
    fn clone_box(&self) -> Payload;
    /// For downcasting to the protocol's message type.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Any + Send + Debug + Clone> SimPayload for T {
    fn clone_box(&self) -> Payload {
        Box::new(self.clone())
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// A type-erased message of a hosted protocol.
pub type Payload = Box<dyn SimPayload>;

impl Clone for Payload {
    fn clone(&self) -> Self {
        self.as_ref().clone_box()
    }
}

/// What the simulator needs of a hosted machine (implemented by [`Hosted`]).
pub trait HostedMachine {
    /// The protocol its messages carry.
    fn protocol(&self) -> ProtocolId;
    /// Delivers a message; false (and nothing changes) if it is not of this protocol's
    /// message type (the runtime's "unknown message": counted and dropped).
    fn deliver(&mut self, now_ms: u64, from: &UniqueAddress, payload: Payload) -> bool;
    /// The membership view changed.
    fn membership(&mut self, now_ms: u64, view: &Arc<MembershipView>, change: MembershipChange);
    /// Time passed.
    fn timeout(&mut self, now_ms: u64);
    /// Its next deadline, ms.
    fn next_timeout(&self) -> Option<u64>;
    /// Moves its transmits into `out` and keeps its events.
    fn drain(&mut self, out: &mut Vec<Transmit<Payload>>);
    /// Coordinated shutdown's `cluster-exiting` phase runs on this node: start the
    /// machine's exiting work (called again until it returns true, then the node may
    /// complete its exit).
    fn exiting(&mut self, now_ms: u64) -> bool;
    /// For [`crate::Simulation::machine`].
    fn as_any(&self) -> &dyn Any;
    /// For [`crate::Simulation::with_machine`].
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// The `cluster-exiting` work of a hosted machine: returns true once done.
pub type ExitingTask<M> = Box<dyn FnMut(&mut M, u64) -> bool>;

/// A hosted machine and the events it has emitted so far.
pub struct Hosted<M: ProtocolMachine> {
    /// The machine.
    pub machine: M,
    /// Every event it emitted, in order.
    pub events: Vec<M::Event>,
    exiting: Option<ExitingTask<M>>,
}

impl<M: ProtocolMachine> Hosted<M> {
    /// Wraps `machine`.
    pub fn new(machine: M) -> Self {
        Hosted {
            machine,
            events: Vec::new(),
            exiting: None,
        }
    }

    /// Adds work the machine does in the `cluster-exiting` phase (like a runtime layer's
    /// coordinated-shutdown task): called until it returns true.
    pub fn with_exiting(mut self, task: impl FnMut(&mut M, u64) -> bool + 'static) -> Self {
        self.exiting = Some(Box::new(task));
        self
    }
}

impl<M> HostedMachine for Hosted<M>
where
    M: ProtocolMachine + 'static,
    M::Message: Any + Send + Debug + Clone,
    M::Event: 'static,
{
    fn protocol(&self) -> ProtocolId {
        self.machine.protocol()
    }

    fn deliver(&mut self, now_ms: u64, from: &UniqueAddress, payload: Payload) -> bool {
        match payload.into_any().downcast::<M::Message>() {
            Ok(m) => {
                self.machine.handle_message(now_ms, from, *m);
                true
            }
            Err(_) => false,
        }
    }

    fn membership(&mut self, now_ms: u64, view: &Arc<MembershipView>, change: MembershipChange) {
        self.machine.handle_membership(now_ms, view, change);
    }

    fn timeout(&mut self, now_ms: u64) {
        self.machine.handle_timeout(now_ms);
    }

    fn next_timeout(&self) -> Option<u64> {
        self.machine.poll_timeout()
    }

    fn drain(&mut self, out: &mut Vec<Transmit<Payload>>) {
        while let Some(t) = self.machine.poll_transmit() {
            out.push(t.map(|m| Box::new(m) as Payload));
        }
        while let Some(e) = self.machine.poll_event() {
            self.events.push(e);
        }
    }

    fn exiting(&mut self, now_ms: u64) -> bool {
        match &mut self.exiting {
            Some(task) => task(&mut self.machine, now_ms),
            None => true,
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Builds the hosted machines of a node when it starts (again after a restart).
pub type MachineFactory = Box<dyn Fn(&UniqueAddress, u64) -> Box<dyn HostedMachine>>;
