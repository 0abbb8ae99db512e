//! Distributed tracing across nodes: three in-process nodes over real sockets, tracing on
//! (the OpenTelemetry layer with an in-memory exporter); an ask from inside an
//! application's span, sent through the second node to entities the coordinator (on the
//! first, the oldest) allocates, yields one trace whose spans name all three nodes — the
//! command where the ask was accepted, the coordinator's allocation, the delivery and the
//! entity's handling — each span's parent in the same trace; a key-value write through the
//! second node yields one trace naming the coordinator and both other replicas.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{fast_config, port_of, wait_for};
use concord::kv::{KeyValueStore, KvStore};
use concord::sharding::{Entity, EntityContext, ShardRegion, Sharding};
use concord::telemetry::TracingConfig;
use concord::{Config, Node};
use concord_core::kv::WriteOptions;
use opentelemetry::trace::{SpanId, TraceId};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Keeps every exported span.
#[derive(Clone, Debug, Default)]
struct Collect(Arc<Mutex<Vec<SpanData>>>);

impl SpanExporter for Collect {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(batch);
        Ok(())
    }
}

/// Answers with the address of the node it runs on.
struct Where {
    node: String,
}

impl Entity for Where {
    type Message = String;
    type Reply = String;
    type State = ();

    async fn handle(&mut self, _ctx: &mut EntityContext, _message: String) -> String {
        self.node.clone()
    }
}

async fn start(
    mut c: Config,
    first: bool,
    data: &std::path::Path,
) -> (Node, ShardRegion<Where>, KvStore) {
    c.update_section(|s: &mut concord::sharding::ShardingConfig| {
        s.number_of_shards = 1000;
    })
    .unwrap();
    c.data_dir = data.display().to_string();
    let (kv_layer, kv) = KeyValueStore::new();
    let mut sharding = Sharding::new();
    let here = Arc::new(Mutex::new(String::new()));
    let h = here.clone();
    let region = sharding.init(
        "where",
        move |_: &str, _: Option<()>| Where {
            node: h.lock().unwrap().clone(),
        },
        None,
    );
    let node = Node::builder(c)
        .layer(sharding)
        .layer(kv_layer)
        .start()
        .await
        .unwrap();
    *here.lock().unwrap() = node.self_address().to_string();
    if first {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    (node, region, kv)
}

/// The spans of trace `id` exported so far.
fn spans_of(spans: &Collect, id: TraceId) -> Vec<SpanData> {
    spans
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.span_context.trace_id() == id)
        .cloned()
        .collect()
}

fn trace_id_of(span: &tracing::Span) -> TraceId {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.context().span().span_context().trace_id()
}

fn attr(s: &SpanData, key: &str) -> Option<String> {
    s.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_ask_across_three_nodes_is_one_trace_naming_all_three() {
    let spans = Collect::default();
    let config = TracingConfig {
        enabled: true,
        ..TracingConfig::default()
    };
    let (layer, telemetry) = concord::telemetry::layer_with_exporter(&config, spans.clone(), true);
    tracing_subscriber::registry()
        .with(layer)
        .try_init()
        .expect("the test's subscriber");

    let dir = tempfile::tempdir().unwrap();
    let (first, _, _) = start(fast_config("traced", &[]), true, &dir.path().join("1")).await;
    let seed = port_of(&first);
    let (second, region, kv) =
        start(fast_config("traced", &[seed]), false, &dir.path().join("2")).await;
    let (third, _, _) = start(fast_config("traced", &[seed]), false, &dir.path().join("3")).await;
    let nodes = [&first, &second, &third];
    wait_for("3 Up everywhere", || {
        nodes.iter().all(|n| {
            n.cluster()
                .view()
                .members_with_status(concord_core::MemberStatus::Up)
                .count()
                == 3
        })
    })
    .await;
    let names: BTreeSet<String> = nodes.iter().map(|n| n.self_address().to_string()).collect();
    let second_addr = second.self_address().to_string();

    // Every region registered with the coordinator first (until then it allocates shards
    // to the regions it knows): untraced asks until entities answer from all three nodes.
    // Bounded by time, not by a count of asks: on a fast machine hundreds of asks can be
    // answered before the other regions have registered.
    let mut answered = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut i = 0u64;
    while answered != names && std::time::Instant::now() < deadline {
        let answer = region
            .entity_ref(format!("warm-{i}"))
            .ask(&"where are you".to_string(), Duration::from_secs(10))
            .await
            .expect("the ask is answered");
        answered.insert(answer);
        i += 1;
        if i.is_multiple_of(50) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(answered, names, "entities run on every node");

    // Asks through the second node to new entities until one, handled on another node,
    // has a trace that crosses all three: the shard allocated by the coordinator on the
    // first (the oldest; its state written to every node), the entity started elsewhere.
    // (An entity may land on the second node itself, and a region that asks the
    // coordinator again later — the coordinator not registered yet — does so outside the
    // ask's turn: those traces name fewer nodes.)
    let mut found = None;
    let mut tried = Vec::new();
    for i in 0..100 {
        let entity = format!("e{i}");
        let root = tracing::info_span!("application request", entity = %entity);
        let trace_id = trace_id_of(&root);
        let answer = region
            .entity_ref(&entity)
            .ask(&"where are you".to_string(), Duration::from_secs(10))
            .instrument(root)
            .await
            .expect("the ask is answered");
        // Every span of the ask ended (and was exported, one by one) before the answer
        // left the entity's node.
        let crossed: BTreeSet<String> = spans_of(&spans, trace_id)
            .iter()
            .filter_map(|s| attr(s, "node"))
            .collect();
        if answer != second_addr && crossed == names {
            found = Some((entity, trace_id, answer));
            break;
        }
        tried.push((answer, crossed.len()));
    }
    let (entity, trace_id, handled_on) = found.unwrap_or_else(|| {
        panic!("no ask's trace crossed all three nodes: (answering node, nodes in its trace) {tried:?}")
    });
    let trace_spans = || spans_of(&spans, trace_id);
    let all = trace_spans();
    let named: BTreeSet<String> = all.iter().filter_map(|s| attr(s, "node")).collect();
    eprintln!("trace of {entity}: {} spans", all.len());
    let by_name: BTreeMap<String, Vec<String>> = all.iter().fold(BTreeMap::new(), |mut m, s| {
        m.entry(s.name.to_string())
            .or_default()
            .push(attr(s, "node").unwrap_or_default());
        m
    });
    eprintln!("spans by name (nodes): {by_name:?}");
    assert_eq!(
        named, names,
        "the trace of {entity} names every node: {by_name:?}"
    );
    assert!(by_name.contains_key("application request"), "{by_name:?}");
    assert_eq!(
        by_name.get("sharding command").map(Vec::as_slice),
        Some(&[second.self_address().to_string()][..]),
        "accepted on the second node: {by_name:?}"
    );
    assert!(
        by_name
            .get("entity handle")
            .is_some_and(|n| n == &vec![handled_on.clone()]),
        "handled where it answered from: {by_name:?}"
    );
    // One tree: every span's parent is a span of the trace (the root has none).
    let ids: std::collections::HashSet<SpanId> =
        all.iter().map(|s| s.span_context.span_id()).collect();
    for s in &all {
        assert!(
            s.parent_span_id == SpanId::INVALID || ids.contains(&s.parent_span_id),
            "{} has a parent outside the trace: {by_name:?}",
            s.name
        );
    }
    assert_ne!(trace_id, TraceId::INVALID);

    // Key-value coordination: a write through the second node (N = 3) reaches the
    // replicas on the other two inside the same trace.
    let root = tracing::info_span!("application write");
    let write_trace = trace_id_of(&root);
    kv.put("traced-key", b"v".to_vec(), None, WriteOptions::default())
        .instrument(root)
        .await
        .expect("the write succeeds");
    // Each replica's span ends before it answers; W = 2 answers may come before the third.
    let write_nodes = || -> BTreeSet<String> {
        spans_of(&spans, write_trace)
            .iter()
            .filter_map(|s| attr(s, "node"))
            .collect()
    };
    common::wait_for_async("the write's trace to name every replica", || async {
        write_nodes() == names
    })
    .await;

    // An ask outside any span carries nothing (its spans, if any, would have ended — and
    // been exported, one by one — before the answer came back).
    let known: std::collections::HashSet<TraceId> = spans
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.span_context.trace_id())
        .chain([write_trace])
        .collect();
    region
        .entity_ref(&entity)
        .ask(&"again".to_string(), Duration::from_secs(10))
        .await
        .unwrap();
    let new: Vec<String> = spans
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|s| !known.contains(&s.span_context.trace_id()))
        .map(|s| s.name.to_string())
        .collect();
    assert!(new.is_empty(), "no span without a sampled parent: {new:?}");
    for n in nodes {
        n.stop().await;
    }
    telemetry.shutdown();
}
