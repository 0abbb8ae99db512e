//! [`LayerEffects`]: what a layer supplies to its host besides the machine — its command
//! type, what each of the machine's events does, and what its background work reports — and
//! [`Effects`], what those handlers may touch while they run.

use std::sync::Arc;

use concord_core::{MembershipView, ProtocolMachine, UniqueAddress};
use futures_channel::mpsc;

use super::clock::Clock;
use super::spawn::{Spawner, Task};
use super::trace::TraceContext;

/// The message type of a layer's machine.
pub type MessageOf<E> = <<E as LayerEffects>::Machine as ProtocolMachine>::Message;
/// The event type of a layer's machine.
pub type EventOf<E> = <<E as LayerEffects>::Machine as ProtocolMachine>::Event;

/// A layer's part of its host (see the module docs of [`crate::host`]).
///
/// Handlers run on the host, one at a time, between the machine's inputs; they act on the
/// machine through [`Effects::machine`] (every message leaves through the machine's
/// transmits, so per-peer order is the machine's order), start background work with
/// [`Effects::spawn`] and learn its outcome as a [`LayerEffects::Completion`].
pub trait LayerEffects: Send + 'static {
    /// The sans-IO protocol machine.
    type Machine: ProtocolMachine<Message: Send + 'static, Event: Send + 'static> + Send + 'static;
    /// Requests from the layer's handles (typed; replies travel in the command's own
    /// one-shot channel).
    type Command: Send + 'static;
    /// Reports of the layer's background work (an entity batch ended, a lease was granted,
    /// a store read finished).
    type Completion: Send + 'static;

    /// The layer's name, for logs and metric labels.
    fn name(&self) -> &'static str;

    /// Handles one command from a handle.
    fn command(&mut self, fx: &mut Effects<'_, Self>, command: Self::Command);

    /// Handles one report of background work.
    fn completion(&mut self, fx: &mut Effects<'_, Self>, completion: Self::Completion);

    /// What one event of the machine does.
    fn event(&mut self, fx: &mut Effects<'_, Self>, event: EventOf<Self>);

    /// A message arrived, before the machine handles it (per-message metrics). `bytes` is
    /// its payload size.
    fn received(&mut self, _message: &MessageOf<Self>, _bytes: usize) {}

    /// The membership view changed (after the machine was told).
    fn membership(&mut self, _fx: &mut Effects<'_, Self>, _view: &Arc<MembershipView>) {}

    /// Housekeeping every [`LayerEffects::tick_interval_ms`]: metrics, forgotten callers,
    /// renewals.
    fn tick(&mut self, _fx: &mut Effects<'_, Self>) {}

    /// The housekeeping period, ms (`None`: no tick).
    fn tick_interval_ms(&self) -> Option<u64> {
        Some(1_000)
    }

    /// Called in each round of a flush before the machine's outputs are carried out: the
    /// key-value store commits the turn's writes here (one fsync for the whole turn), so
    /// nothing it sends or answers afterwards can claim a write that is not on disk.
    fn before_outputs(&mut self, _fx: &mut Effects<'_, Self>) {}

    /// True if the transmits and events the machine has queued when a flush begins may
    /// leave before [`LayerEffects::before_outputs`] (false): a machine that holds back
    /// everything that claims durability until its commit (the replicated journal: its
    /// requests go to the other replicas while its own disk syncs, and an answer whose
    /// majority is already on disk reaches its caller without waiting for this commit).
    fn sends_before_commit(&self) -> bool {
        false
    }

    /// Called once at the end of each flush, after the turn's transmits were handed to the
    /// outbound sender: the membership layer publishes the turn's view and event batch
    /// here, and carries out the machine's outputs that are not transmits or events
    /// (quarantines, lease requests). Transmits the machine queues here leave with the
    /// next flush.
    fn flushed(&mut self, _fx: &mut Effects<'_, Self>) {}

    /// The host stops (the node is gone): end what still runs.
    fn stopped(&mut self, _machine: &mut Self::Machine) {}

    /// The trace context to send `message` with when the input that caused it carried
    /// none (asked only while tracing is on): a layer that keeps contexts across inputs
    /// (sharding: an ask's, until its delivery) answers here. See [`super::trace`].
    fn trace_of(&self, _message: &MessageOf<Self>) -> Option<TraceContext> {
        None
    }
}

/// The sending end of a host's completion queue: background work reports here. Cheap to
/// clone; unbounded (each report stands for work the host itself started).
pub struct Completions<C> {
    tx: mpsc::UnboundedSender<C>,
}

impl<C> Clone for Completions<C> {
    fn clone(&self) -> Self {
        Completions {
            tx: self.tx.clone(),
        }
    }
}

impl<C> Completions<C> {
    /// A queue and its receiving end.
    pub fn channel() -> (Completions<C>, mpsc::UnboundedReceiver<C>) {
        let (tx, rx) = mpsc::unbounded();
        (Completions { tx }, rx)
    }

    /// Reports `completion`; false if the host has stopped.
    pub fn send(&self, completion: C) -> bool {
        self.tx.unbounded_send(completion).is_ok()
    }
}

/// What the host lends a layer's handlers: the machine, the time, the node, and the means
/// to start background work.
pub struct Effects<'a, E: LayerEffects + ?Sized> {
    /// The layer's machine.
    pub machine: &'a mut E::Machine,
    /// The time of the input being handled, ms.
    pub now_ms: u64,
    /// The outbound sender's backlog as the input began.
    pub backlog: Backlog,
    pub(super) env: &'a HostEnv<E::Completion>,
    pub(super) stop: &'a mut bool,
    pub(super) trace: &'a mut TraceState,
    pub(super) layer: &'static str,
}

/// The trace of the input being handled (see [`super::trace`]).
#[derive(Default)]
pub struct TraceState {
    /// The span of the traced input being handled.
    pub(super) span: Option<tracing::Span>,
    /// The context its outputs are sent with (the span's).
    pub(super) out: Option<TraceContext>,
}

/// What an outbound sender holds back (see [`crate::host::Outbound::backlog`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Messages waiting for room on their lane, count.
    pub queued: usize,
    /// Messages dropped because a backlog was full, count (since start).
    pub dropped: u64,
}

impl<E: LayerEffects + ?Sized> Effects<'_, E> {
    /// This node's unique address.
    pub fn node(&self) -> &UniqueAddress {
        &self.env.node
    }

    /// The machine and the host's environment at once (so a handler can act on the
    /// machine while it hands the completion queue or the spawner to work it starts).
    pub fn parts(&mut self) -> (&mut E::Machine, &HostEnv<E::Completion>) {
        (self.machine, self.env)
    }

    /// The node's clock (for work that reads the time later, off the host).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.env.clock
    }

    /// The completion queue, for background work to report to.
    pub fn completions(&self) -> &Completions<E::Completion> {
        &self.env.completions
    }

    /// Runs `task` concurrently (see [`Spawner::spawn`]).
    pub fn spawn(&self, task: Task) {
        self.env.spawner.spawn(task);
    }

    /// Runs blocking `work` away from the host (see [`Spawner::spawn_blocking`]).
    pub fn spawn_blocking(&self, work: Box<dyn FnOnce() + Send + 'static>) {
        self.env.spawner.spawn_blocking(work);
    }

    /// The spawner (for work that starts more work).
    pub fn spawner(&self) -> &Arc<dyn Spawner> {
        &self.env.spawner
    }

    /// Follows `trace` (a context a handle captured with the command being handled): the
    /// host opens a span for the command, child of it, and sends what the command caused
    /// with the span's context. `None` changes nothing.
    pub fn follow_trace(&mut self, trace: Option<TraceContext>) {
        let Some(parent) = trace.filter(TraceContext::sampled) else {
            return;
        };
        if self.trace.span.is_some() {
            return;
        }
        if let Some(tracer) = super::trace::tracer() {
            let node = self.env.node.address.to_string();
            let (span, out) = tracer.child(self.layer, "command", &node, &parent);
            self.trace.span = Some(span);
            self.trace.out = Some(out);
        }
    }

    /// The span of the traced input being handled, if it is traced (for work it starts:
    /// an entity handles the message in a child of it).
    pub fn trace_span(&self) -> Option<&tracing::Span> {
        self.trace.span.as_ref()
    }

    /// The context the traced input's outputs are sent with, if it is traced.
    pub fn trace_context(&self) -> Option<TraceContext> {
        self.trace.out
    }

    /// Asks the host to stop after this turn: the driver takes no further input, flushes
    /// once more and returns the host (the membership layer, on `Shutdown` or `Stop`; what
    /// it must still do asynchronously, such as closing remoting, its runner does after).
    pub fn stop(&mut self) {
        *self.stop = true;
    }
}

/// What a host runs in: the node, its clock, its spawner and the host's completion queue.
pub struct HostEnv<C> {
    /// This node's unique address.
    pub node: UniqueAddress,
    /// The node's one clock.
    pub clock: Arc<dyn Clock>,
    /// Where background work runs.
    pub spawner: Arc<dyn Spawner>,
    /// The host's completion queue.
    pub completions: Completions<C>,
}
