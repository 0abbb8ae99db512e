//! [`LayerHost`]: the one driver of every protocol layer, without I/O. It owns the
//! layer's machine and effects and everything around them that used to be copied into
//! each layer's driver task: the node's clock, the membership feed, the next deadline, the
//! periodic tick, the batching of inputs into turns with one send of transmits per turn,
//! the outbound sender, typed commands and the completion queue of background work.
//!
//! A driver (the tokio runtime's `runtime::drive`, or the simulator) only moves inputs in
//! and time forward: it calls [`LayerHost::handle`] for each ready input — up to
//! [`INPUTS_PER_TURN`] — then [`LayerHost::flush`] once, and waits for the next input or
//! [`LayerHost::next_deadline`].

use std::sync::Arc;

use concord_core::{MembershipChange, MembershipView, ProtocolMachine, Transmit, UniqueAddress};
use futures_channel::mpsc::UnboundedReceiver;

use super::clock::Clock;
use super::effects::{Completions, Effects, HostEnv, LayerEffects, MessageOf, TraceState};
use super::input::{HostInput, MembershipInput};
use super::outbound::Outbound;
use super::spawn::Spawner;
use super::trace::{self, TraceContext};

/// Inputs a driver hands a host before one flush (one send per peer for many messages).
pub const INPUTS_PER_TURN: usize = 256;

/// Counters of one host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Inputs handled.
    pub inputs: u64,
    /// Flushes (turns).
    pub turns: u64,
    /// Transmits sent.
    pub transmits: u64,
}

/// The effects of a turn at `now` (a macro, not a method: it borrows the host's fields one
/// by one, so the host may use its other fields meanwhile).
macro_rules! effects_at {
    ($host:ident, $now:expr) => {
        Effects::<E> {
            machine: &mut $host.machine,
            now_ms: $now,
            backlog: $host.outbound.backlog(),
            env: &$host.env,
            stop: &mut $host.stop,
            trace: &mut $host.trace,
            layer: $host.effects.name(),
        }
    };
}

/// The host of one layer; see the module docs.
pub struct LayerHost<E: LayerEffects> {
    machine: E::Machine,
    effects: E,
    env: HostEnv<E::Completion>,
    outbound: Box<dyn Outbound<MessageOf<E>>>,
    completions: Option<UnboundedReceiver<E::Completion>>,
    view: Option<Arc<MembershipView>>,
    next_tick_ms: Option<u64>,
    transmits: Vec<Transmit<MessageOf<E>>>,
    /// The trace contexts of `transmits`: (index, context), by index.
    transmit_traces: Vec<(usize, TraceContext)>,
    trace: TraceState,
    stop: bool,
    stats: HostStats,
}

impl<E: LayerEffects> LayerHost<E> {
    /// A host of `machine` with `effects` on `node`, reading `clock`, running background
    /// work on `spawner` and sending through `outbound`.
    pub fn new(
        machine: E::Machine,
        effects: E,
        node: UniqueAddress,
        clock: Arc<dyn Clock>,
        spawner: Arc<dyn Spawner>,
        outbound: Box<dyn Outbound<MessageOf<E>>>,
    ) -> Self {
        let (completions, rx) = Completions::channel();
        let now = clock.now_ms();
        let next_tick_ms = effects
            .tick_interval_ms()
            .map(|i| now.saturating_add(i.max(1)));
        LayerHost {
            machine,
            effects,
            env: HostEnv {
                node,
                clock,
                spawner,
                completions,
            },
            outbound,
            completions: Some(rx),
            view: None,
            next_tick_ms,
            transmits: Vec::new(),
            transmit_traces: Vec::new(),
            trace: TraceState::default(),
            stop: false,
            stats: HostStats::default(),
        }
    }

    /// The clock now, ms.
    pub fn now(&self) -> u64 {
        self.env.clock.now_ms()
    }

    /// The node's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.env.clock
    }

    /// This node's unique address.
    pub fn node(&self) -> &UniqueAddress {
        &self.env.node
    }

    /// The layer's name.
    pub fn name(&self) -> &'static str {
        self.effects.name()
    }

    /// The machine.
    pub fn machine(&self) -> &E::Machine {
        &self.machine
    }

    /// The layer's effects.
    pub fn effects(&self) -> &E {
        &self.effects
    }

    /// The latest membership view the host was given.
    pub fn view(&self) -> Option<&Arc<MembershipView>> {
        self.view.as_ref()
    }

    /// Counters.
    pub fn stats(&self) -> HostStats {
        self.stats
    }

    /// A sender into the host's completion queue.
    pub fn completions(&self) -> Completions<E::Completion> {
        self.env.completions.clone()
    }

    /// The receiving end of the completion queue, for the driver to wait on (once).
    pub fn take_completions(&mut self) -> Option<UnboundedReceiver<E::Completion>> {
        self.completions.take()
    }

    /// True once the layer asked to stop ([`Effects::stop`]) or [`LayerHost::stop`] ran.
    pub fn is_stopped(&self) -> bool {
        self.stop
    }

    /// True while commands may be taken (see [`Outbound::accepting`]).
    pub fn accepting_commands(&self) -> bool {
        self.outbound.accepting()
    }

    /// The earliest time the host must get [`HostInput::Timeout`], ms: the machine's next
    /// timer or the next tick.
    pub fn next_deadline(&self) -> Option<u64> {
        match (self.machine.poll_timeout(), self.next_tick_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs `f` with the machine and the effects at the clock's time (a command given by
    /// hand: tests, the simulator). Flush afterwards.
    pub fn with<T>(&mut self, f: impl FnOnce(&mut E, &mut Effects<'_, E>) -> T) -> T {
        let now = self.now();
        let mut fx = effects_at!(self, now);
        f(&mut self.effects, &mut fx)
    }

    /// Handles one input (its outputs wait for [`LayerHost::flush`]).
    pub fn handle(&mut self, input: HostInput<E>) {
        self.stats.inputs += 1;
        let now = self.now();
        let mut fx = effects_at!(self, now);
        match input {
            HostInput::Inbound(batch) if !batch.traces.is_empty() && trace::enabled() => {
                self.handle_traced_inbound(now, batch);
            }
            HostInput::Inbound(batch) => {
                for (message, bytes) in batch.messages {
                    self.effects.received(&message, bytes);
                    ProtocolMachine::handle_message(fx.machine, now, &batch.from, message);
                }
            }
            HostInput::Membership(m) => {
                match &m {
                    MembershipInput::CurrentClusterState(view) => fx.machine.handle_membership(
                        now,
                        view,
                        MembershipChange::CurrentClusterState,
                    ),
                    MembershipInput::Event(view, event) => {
                        fx.machine
                            .handle_membership(now, view, MembershipChange::Event(event))
                    }
                }
                let view = m.view().clone();
                self.outbound.membership(&view);
                self.effects.membership(&mut fx, &view);
                self.view = Some(view);
            }
            HostInput::Command(c) => self.effects.command(&mut fx, c),
            HostInput::Completion(c) => self.effects.completion(&mut fx, c),
            HostInput::Timeout => {
                if fx.machine.poll_timeout().is_some_and(|t| t <= now) {
                    fx.machine.handle_timeout(now);
                }
                if self.next_tick_ms.is_some_and(|t| t <= now) {
                    self.next_tick_ms = self
                        .effects
                        .tick_interval_ms()
                        .map(|i| now.saturating_add(i.max(1)));
                    self.effects.tick(&mut fx);
                }
            }
        }
        if self.trace.span.is_some() {
            // The input followed a trace (`Effects::follow_trace`): its span is open.
            self.drain_traced(now);
        }
    }

    /// Handles a batch of which some messages carry a trace context: each traced one in a
    /// span of its own (see [`trace`]).
    fn handle_traced_inbound(
        &mut self,
        now: u64,
        batch: crate::remote::codec::Inbound<MessageOf<E>>,
    ) {
        let from = batch.from;
        let mut traces = batch.traces.into_iter().peekable();
        for (i, (message, bytes)) in batch.messages.into_iter().enumerate() {
            let t = match traces.peek() {
                Some((at, t)) if *at == i => {
                    let t = *t;
                    traces.next();
                    Some(t).filter(TraceContext::sampled)
                }
                _ => None,
            };
            self.effects.received(&message, bytes);
            match t {
                None => ProtocolMachine::handle_message(&mut self.machine, now, &from, message),
                Some(t) => self.traced(now, "receive", t, |m| {
                    ProtocolMachine::handle_message(m, now, &from, message);
                }),
            }
        }
    }

    /// Handles a traced input: opens its span (child of `parent`), runs `handle` on the
    /// machine inside it, then carries out what the machine has to say at once — each
    /// round as [`LayerHost::flush`] does (the layer's commit first), transmits tagged with
    /// the span's context (they leave with the turn), events handled inside the span.
    fn traced(
        &mut self,
        now: u64,
        what: &'static str,
        parent: TraceContext,
        handle: impl FnOnce(&mut E::Machine),
    ) {
        let Some(tracer) = trace::tracer() else {
            handle(&mut self.machine);
            return;
        };
        let node = self.env.node.address.to_string();
        // What earlier inputs of the turn caused is not this trace's.
        self.drain(now, None);
        let (span, out) = tracer.child(self.effects.name(), what, &node, &parent);
        self.trace.span = Some(span.clone());
        self.trace.out = Some(out);
        {
            let _entered = span.enter();
            handle(&mut self.machine);
        }
        self.drain_traced(now);
    }

    /// Carries out, inside the open span of a traced input, what the machine has to say
    /// now (see [`LayerHost::traced`]), then closes the span.
    fn drain_traced(&mut self, now: u64) {
        let (Some(span), Some(out)) = (self.trace.span.clone(), self.trace.out) else {
            return;
        };
        {
            let _entered = span.enter();
            self.drain(now, Some(out));
        }
        self.trace.span = None;
        self.trace.out = None;
    }

    /// Carries out what the machine has to say now, each round as [`LayerHost::flush`]
    /// does (the layer's commit first); transmits wait for the turn's send, tagged with
    /// `tag`.
    fn drain(&mut self, now: u64, tag: Option<TraceContext>) {
        loop {
            let mut fx = effects_at!(self, now);
            self.effects.before_outputs(&mut fx);
            let mut any = false;
            while let Some(t) = self.machine.poll_transmit() {
                any = true;
                if let Some(c) = tag {
                    self.transmit_traces.push((self.transmits.len(), c));
                }
                self.transmits.push(t);
            }
            while let Some(e) = self.machine.poll_event() {
                any = true;
                let mut fx = effects_at!(self, now);
                self.effects.event(&mut fx, e);
            }
            if !any {
                break;
            }
        }
    }

    /// Hands the turn's transmits to the outbound sender, each with its trace context: the
    /// one its input carried, or the layer's ([`LayerEffects::trace_of`]) while tracing is on.
    fn send_transmits(&mut self) {
        if self.transmits.is_empty() {
            return;
        }
        self.stats.transmits += self.transmits.len() as u64;
        if !trace::enabled() {
            self.outbound.send(&mut self.transmits);
            self.transmits.clear();
            return;
        }
        let mut traces = std::mem::take(&mut self.transmit_traces);
        let mut tagged = traces.iter().map(|(i, _)| *i).peekable();
        let mut more = Vec::new();
        for (i, t) in self.transmits.iter().enumerate() {
            if tagged.peek() == Some(&i) {
                tagged.next();
                continue;
            }
            if let Some(c) = self.effects.trace_of(&t.message) {
                more.push((i, c));
            }
        }
        if !more.is_empty() {
            traces.extend(more);
            traces.sort_by_key(|(i, _)| *i);
        }
        if traces.is_empty() {
            self.outbound.send(&mut self.transmits);
        } else {
            self.outbound.send_traced(&mut self.transmits, &traces);
        }
        self.transmits.clear();
    }

    /// Carries the turn's outputs out: every event to the effects (which may give the
    /// machine more to do) until the machine has nothing more to say, then every transmit
    /// of the turn to the outbound sender at once, then [`LayerEffects::flushed`].
    pub fn flush(&mut self) {
        self.stats.turns += 1;
        let now = self.now();
        if self.effects.sends_before_commit() {
            while let Some(t) = self.machine.poll_transmit() {
                self.transmits.push(t);
            }
            self.send_transmits();
            while let Some(e) = self.machine.poll_event() {
                let mut fx = effects_at!(self, now);
                self.effects.event(&mut fx, e);
            }
        }
        self.drain(now, None);
        self.send_transmits();
        let mut fx = effects_at!(self, now);
        self.effects.flushed(&mut fx);
    }

    /// Stops the host: the layer ends what still runs ([`LayerEffects::stopped`]).
    pub fn stop(&mut self) {
        self.stop = true;
        self.effects.stopped(&mut self.machine);
    }

    /// The machine and the effects, for what a layer does after its host stopped (the
    /// membership layer closes remoting and answers `Shutdown`).
    pub fn into_parts(self) -> (E::Machine, E) {
        (self.machine, self.effects)
    }
}
