//! The node composition and the layer extension point: a layer's management routes are
//! merged (and `/cluster/shards/{name}` becomes its own), a protocol id cannot be
//! registered twice, and a node whose layer fails to start does not leave anything running.

mod common;

use std::sync::Arc;

use axum::routing::get;
use common::fast_config;
use concord::layer::{Layer, LayerContext, LayerError, LayerStarted};
use concord::management::DashboardPanel;
use concord::remote::{ProtocolRegistry, TransportSettings};
use concord::{Node, NodeError};
use concord_core::ProtocolId;

/// A layer that registers `protocol` (with the bench codec) and serves a shard route.
struct ShardsLayer {
    protocol: ProtocolId,
    fail_start: bool,
}

impl Layer for ShardsLayer {
    fn name(&self) -> &'static str {
        "shards-test"
    }

    fn register(
        &mut self,
        registry: &mut ProtocolRegistry,
        settings: &TransportSettings,
    ) -> Result<(), LayerError> {
        registry
            .register(
                self.protocol,
                Arc::new(common::bench_layer::RawCodec),
                settings.inbound_queue_size,
            )
            .map(|_| ())
            .map_err(|e| LayerError::DuplicateProtocol {
                layer: "shards-test",
                protocol: e.0,
            })
    }

    fn start(self: Box<Self>, ctx: LayerContext) -> Result<LayerStarted, LayerError> {
        if self.fail_start {
            return Err(LayerError::Start {
                layer: "shards-test",
                message: "refuses to start".into(),
            });
        }
        let me = ctx.cluster.self_address().to_string();
        let routes = axum::Router::new().route(
            "/cluster/shards/{name}",
            get(
                move |axum::extract::Path(name): axum::extract::Path<String>| async move {
                    format!("region {name} on {me}")
                },
            ),
        );
        let here = ctx.cluster.self_address().to_string();
        Ok(LayerStarted {
            routes: Some(routes),
            dashboard: vec![
                DashboardPanel::new("shards-test", move || {
                    let here = here.clone();
                    async move { serde_json::json!({ "region": here }) }
                }),
                // A panel that never answers holds back nothing else.
                DashboardPanel::new("stuck", std::future::pending::<serde_json::Value>),
            ],
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layers_routes_are_merged_and_replace_the_shards_placeholder() {
    let plain = Node::start(fast_config("compose", &[])).await.unwrap();
    let base = format!("http://{}", plain.management_addr().unwrap());
    let r = reqwest::get(format!("{base}/cluster/shards/carts"))
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["message"],
        "Shard Region carts is not started"
    );
    let r = reqwest::get(format!("{base}/no/such/route")).await.unwrap();
    assert_eq!(r.status(), 404);

    let with_layer = Node::builder(fast_config("compose", &[]))
        .layer(ShardsLayer {
            protocol: ProtocolId(ProtocolId::FIRST_APPLICATION_ID + 1),
            fail_start: false,
        })
        .start()
        .await
        .unwrap();
    let base = format!("http://{}", with_layer.management_addr().unwrap());
    let r = reqwest::get(format!("{base}/cluster/shards/carts"))
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.text().await.unwrap(),
        format!("region carts on {}", with_layer.self_address())
    );
    // The layer's protocol is counted per protocol in the metrics.
    let m = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(m.contains("protocol=\"app-1001\""), "{m}");
    // The layer's dashboard panel is shown under its name; one that never answers is
    // shown as loading while the rest of the dashboard goes on.
    let mut state = serde_json::Value::Null;
    for _ in 0..100 {
        state = reqwest::get(format!("{base}/dashboard/state"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if state["panels"]["shards-test"]["region"].is_string() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        state["panels"]["shards-test"]["region"],
        with_layer.self_address().to_string(),
        "{state}"
    );
    assert_eq!(
        state["panels"]["stuck"],
        serde_json::json!({"loading": true})
    );
    assert_eq!(state["self"], with_layer.self_address().to_string());
    plain.stop().await;
    with_layer.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protocol_id_registered_twice_is_refused() {
    let r = Node::builder(fast_config("dup", &[]))
        .layer(ShardsLayer {
            protocol: ProtocolId::MEMBERSHIP,
            fail_start: false,
        })
        .start()
        .await;
    match r {
        Err(NodeError::Layer(e)) => assert!(e.to_string().contains("already registered"), "{e}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("membership's id taken twice"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_layer_fails_to_start_leaves_nothing_running() {
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    let r = Node::builder(fast_config("fail", &[]))
        .layer(ShardsLayer {
            protocol: ProtocolId(ProtocolId::FIRST_APPLICATION_ID + 2),
            fail_start: true,
        })
        .start()
        .await;
    assert!(matches!(r, Err(NodeError::Layer(_))));
    // The daemon, the listener and every writer it had started end.
    common::wait_for("the failed node's tasks ended", || {
        metrics.num_alive_tasks() <= before
    })
    .await;
}
