//! Distributed tracing through the layers' hosts: the W3C trace context a message carries
//! across nodes ([`TraceContext`], the remoting envelope's optional `trace` field), and the
//! process-wide hooks the runtime's OpenTelemetry set-up installs (`crate::telemetry`):
//! [`current`] (the context of the caller's span, captured when a handle sends) and the
//! [`HostTracer`] (a span per traced input on each node).
//!
//! With tracing off — the default, and always in the simulator — no hook is installed:
//! [`current`] is one atomic load returning `None`, no envelope carries a context and no
//! host does anything different.
//!
//! A host that handles an input carrying a context (a command whose handle captured one,
//! or a message that arrived with one) opens a span for it, child of that context, and
//! drains the machine's outputs at once: every transmit the input caused carries the new
//! span's context, and every event is handled inside the span (sharding hands it to the
//! entity, which handles the message in a child span). Outputs caused later by another
//! input (a reply that waited for a write) carry a context only where the layer keeps one
//! ([`super::LayerEffects::trace_of`]: sharding, for the delivery of an ask).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

pub use concord_core::TraceContext;

/// Opens the span of a traced input on this node.
pub trait HostTracer: Send + Sync {
    /// A span for `what` (`"receive"`, `"command"`) of `layer` on `node` (its address),
    /// child of `parent`, and the context its children (on other nodes) are sent with.
    fn child(
        &self,
        layer: &'static str,
        what: &'static str,
        node: &str,
        parent: &TraceContext,
    ) -> (tracing::Span, TraceContext);

    /// The context of the caller's current span, if it is sampled.
    fn current(&self) -> Option<TraceContext>;
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static TRACER: OnceLock<Arc<dyn HostTracer>> = OnceLock::new();

/// Installs the process's tracer (once: the first one stays). Returns false if one was
/// already installed.
pub fn install(tracer: Arc<dyn HostTracer>) -> bool {
    let ok = TRACER.set(tracer).is_ok();
    ENABLED.store(true, Ordering::Release);
    ok
}

/// Stops carrying trace context (the exporter shut down); [`install`] is not undone: the
/// tracer stays, unused.
pub fn disable() {
    ENABLED.store(false, Ordering::Release);
}

/// True once a tracer is installed (and tracing not [`disable`]d).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

/// The installed tracer.
pub fn tracer() -> Option<&'static Arc<dyn HostTracer>> {
    if enabled() {
        TRACER.get()
    } else {
        None
    }
}

/// The context of the caller's current span when tracing is on and it is sampled: what a
/// handle sends with a message.
pub fn current() -> Option<TraceContext> {
    tracer().and_then(|t| t.current())
}
