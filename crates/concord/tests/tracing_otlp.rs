//! The OTLP export path of `[tracing]` (`concord::telemetry::otlp_layer`): spans reach an
//! OTLP/HTTP endpoint — here an in-process receiver on a port the kernel picks — as
//! protobuf `POST /v1/traces`, from the batch exporter's own thread.

use std::sync::{Arc, Mutex};

use axum::routing::post;
use concord::telemetry::TracingConfig;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// A request the receiver got: its content type and body size, bytes.
type Post = (Option<String>, usize);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_to_an_otlp_http_endpoint() {
    let received: Arc<Mutex<Vec<Post>>> = Arc::default();
    let r = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let r = r.clone();
                async move {
                    let ct = headers
                        .get(axum::http::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .map(String::from);
                    r.lock().unwrap().push((ct, body.len()));
                    ""
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let config = TracingConfig {
        enabled: true,
        endpoint: format!("http://{addr}/v1/traces"),
        ..TracingConfig::default()
    };
    let (layer, telemetry) = concord::telemetry::otlp_layer(&config)
        .expect("the exporter builds")
        .expect("tracing is on");
    tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .expect("the test's subscriber");
    {
        let span = tracing::info_span!(target: "app", "application request");
        let _g = span.enter();
        tracing::info!(target: "app", "inside");
    }
    // Flushes the batch from the exporter's thread (blocking HTTP), off the runtime's.
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
    let got = received.lock().unwrap().clone();
    assert!(!got.is_empty(), "a batch was posted");
    assert!(
        got.iter()
            .all(|(ct, n)| ct.as_deref() == Some("application/x-protobuf") && *n > 0),
        "{got:?}"
    );
    assert!(
        !concord::host::trace::enabled(),
        "shutdown stops carrying trace context"
    );
}
