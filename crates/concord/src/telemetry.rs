//! Distributed tracing with OpenTelemetry (docs/TRACING.md): `[tracing]`, the
//! `tracing-opentelemetry` layer that exports the node's spans with OTLP over HTTP, and the
//! [`HostTracer`] that carries W3C trace context across nodes in the remoting envelope
//! (see [`crate::host::trace`]).
//!
//! Off by default. When on, a span that an application opens around a call into Concord
//! (`ShardRegion::ask`, `tell`, …) is continued on every node the message travels to:
//! `sharding command` where the message is accepted, `sharding receive` where the
//! coordinator allocates its shard or the region that hosts it receives it, and
//! `entity handle` around the entity's handler. Sampling is OpenTelemetry's parent-based
//! trace-id-ratio sampler: a trace whose root is not sampled costs one check per send and
//! carries nothing.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource;
use serde::{Deserialize, Serialize};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::registry::LookupSpan;

use crate::config::{Config, ConfigError, ConfigSection};
use crate::host::trace::{self, HostTracer, TraceContext};

/// `[tracing]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct TracingConfig {
    /// Export spans and carry trace context between nodes (false).
    pub enabled: bool,
    /// The OTLP/HTTP traces endpoint ("http://127.0.0.1:4318/v1/traces").
    pub endpoint: String,
    /// The share of traces sampled, from 0 to 1 (1.0); a trace started elsewhere follows
    /// its parent's decision.
    pub sampling_ratio: f64,
    /// The `service.name` resource attribute ("concord").
    pub service_name: String,
    /// Timeout of one export ("10s").
    #[serde(with = "crate::config::duration::required")]
    pub export_timeout: Duration,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            enabled: false,
            endpoint: "http://127.0.0.1:4318/v1/traces".into(),
            sampling_ratio: 1.0,
            service_name: "concord".into(),
            export_timeout: Duration::from_secs(10),
        }
    }
}

impl ConfigSection for TracingConfig {
    const KEY: &'static str = "tracing";

    fn validate(&self, _config: &Config) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(ConfigError::new(
                "tracing.sampling-ratio",
                "must be from 0 to 1",
            ));
        }
        if self.enabled
            && !self.endpoint.starts_with("http://")
            && !self.endpoint.starts_with("https://")
        {
            return Err(ConfigError::new(
                "tracing.endpoint",
                "must be an http:// or https:// URL",
            ));
        }
        Ok(())
    }
}

/// The running exporter: flush it before the process exits ([`Telemetry::shutdown`]).
pub struct Telemetry {
    provider: SdkTracerProvider,
}

impl Telemetry {
    /// Stops carrying trace context, exports what is still buffered and stops the
    /// exporter.
    pub fn shutdown(&self) {
        trace::disable();
        let _ = self.provider.force_flush();
        let _ = self.provider.shutdown();
    }
}

/// The `tracing` layer that hands spans to OpenTelemetry, filtered by [`exported`].
pub type OtelLayer<S> = tracing_subscriber::filter::Filtered<
    tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
    tracing_subscriber::filter::FilterFn,
    S,
>;

/// What the OpenTelemetry layer sees: every event, an application's spans, and Concord's
/// trace spans (named `concord.*`) — not the spans Concord's own code runs in for
/// logging (`node`, `layer`, `singleton`, …), which would otherwise be long-lived sampled
/// roots that every send inside them continues.
pub fn exported(meta: &tracing::Metadata<'_>) -> bool {
    !meta.is_span() || !meta.target().starts_with("concord") || meta.name().starts_with("concord.")
}

/// A failure to set tracing up.
#[derive(Debug, thiserror::Error)]
#[error("tracing: {0}")]
pub struct TelemetryError(String);

/// The layer to add to the process's `tracing` subscriber when `config.enabled`, exporting
/// to `config.endpoint` with OTLP over HTTP (protobuf), with the [`Telemetry`] to shut down
/// at exit; `None` when tracing is off. Installs the trace-context hooks (once per process).
///
/// # Errors
/// The exporter cannot be built (a malformed endpoint).
pub fn otlp_layer<S>(
    config: &TracingConfig,
) -> Result<Option<(OtelLayer<S>, Telemetry)>, TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    if !config.enabled {
        return Ok(None);
    }
    // The exporter's HTTP client (rustls for https://) needs the process's crypto provider.
    crate::tls::install_default_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(config.endpoint.clone())
        .with_timeout(config.export_timeout)
        .build()
        .map_err(|e| TelemetryError(e.to_string()))?;
    Ok(Some(layer_with_exporter(config, exporter, false)))
}

/// Like [`otlp_layer`] with another exporter (a test's in-memory one): `simple` exports
/// each span as it ends instead of in batches.
pub fn layer_with_exporter<S, E>(
    config: &TracingConfig,
    exporter: E,
    simple: bool,
) -> (OtelLayer<S>, Telemetry)
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    E: SpanExporter + 'static,
{
    let builder = SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sampling_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        );
    let provider = if simple {
        builder.with_simple_exporter(exporter).build()
    } else {
        builder.with_batch_exporter(exporter).build()
    };
    let tracer = provider.tracer("concord");
    trace::install(Arc::new(OtelHostTracer));
    (
        // Nothing at every enter and exit of every span (a layer's host enters its span
        // at each poll), sampled or not: no busy/idle times, and no OpenTelemetry context
        // attached to the thread (parents come from `tracing`'s span tree and the remote
        // contexts set explicitly).
        tracing_subscriber::Layer::with_filter(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_tracked_inactivity(false)
                .with_context_activation(false),
            tracing_subscriber::filter::FilterFn::new(
                exported as fn(&tracing::Metadata<'_>) -> bool,
            ),
        ),
        Telemetry { provider },
    )
}

/// The [`HostTracer`] over `tracing-opentelemetry`.
struct OtelHostTracer;

/// A span's trace context as [`HostTracer::current`] found it the first time.
struct CachedTrace(Option<TraceContext>);

fn to_context(sc: &SpanContext) -> Option<TraceContext> {
    sc.is_valid().then(|| TraceContext {
        trace_id: sc.trace_id().to_bytes(),
        span_id: sc.span_id().to_bytes(),
        flags: sc.trace_flags().to_u8(),
    })
}

impl HostTracer for OtelHostTracer {
    fn child(
        &self,
        layer: &'static str,
        what: &'static str,
        node: &str,
        parent: &TraceContext,
    ) -> (tracing::Span, TraceContext) {
        let span = tracing::info_span!(
            "concord.layer",
            otel.name = format!("{layer} {what}"),
            layer,
            node,
        );
        let remote = SpanContext::new(
            TraceId::from_bytes(parent.trace_id),
            SpanId::from_bytes(parent.span_id),
            TraceFlags::new(parent.flags),
            true,
            TraceState::default(),
        );
        let _ = span.set_parent(Context::new().with_remote_span_context(remote));
        let out = to_context(span.context().span().span_context()).unwrap_or(*parent);
        (span, out)
    }

    /// Asked on every send while tracing is on: the span's answer is kept in its
    /// extensions after the first time (an OpenTelemetry span's context is fixed once it
    /// started), so a send from inside an unsampled trace costs a lookup, not the building
    /// of an OpenTelemetry context.
    fn current(&self) -> Option<TraceContext> {
        tracing::dispatcher::get_default(|d| {
            let id = d.current_span().id()?.clone();
            let registry = d.downcast_ref::<tracing_subscriber::Registry>()?;
            let span = registry.span(&id)?;
            if let Some(CachedTrace(c)) = span.extensions().get::<CachedTrace>() {
                return *c;
            }
            let c = to_context(tracing::Span::current().context().span().span_context())
                .filter(TraceContext::sampled);
            span.extensions_mut().insert(CachedTrace(c));
            c
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_refuses_a_ratio_outside_0_to_1_and_a_bad_endpoint() {
        let c = Config::default();
        let mut t = TracingConfig::default();
        assert!(t.validate(&c).is_ok());
        t.sampling_ratio = 1.5;
        assert!(t.validate(&c).is_err());
        t.sampling_ratio = 0.0;
        t.enabled = true;
        t.endpoint = "udp://x".into();
        assert!(t.validate(&c).is_err());
    }
}
