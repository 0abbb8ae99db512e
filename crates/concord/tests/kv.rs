//! The key-value store on in-process nodes over real sockets and its HTTP API: quorums
//! (W = 3 fails naming the replicas that answered while one is down; W = R = 2 work),
//! siblings of concurrent writes resolved by a write with the merged context, deletes,
//! read repair and anti-entropy of a replica made stale on purpose, bad requests, and the
//! access rules.

mod common;

use std::time::Duration;

use common::{fast_config, port_of, wait_for, wait_for_async};
use concord::kv::{KeyValueStore, KvStore};
use concord::remote::LinkFaults;
use concord::{Config, Node};
use serde_json::Value;

struct Member {
    node: Node,
    kv: KvStore,
}

impl Member {
    fn url(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.kv.http_addr().expect("the API is served")
        )
    }
}

async fn start(config: Config, first: bool) -> Member {
    let (layer, kv) = KeyValueStore::new();
    let node = Node::builder(config).layer(layer).start().await.unwrap();
    if first {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    Member { node, kv }
}

/// `n` nodes with the store (API on a port of the kernel's choosing), all Up; `tune`
/// adjusts each node's configuration.
async fn cluster(
    system: &str,
    n: usize,
    tune: impl Fn(&mut Config),
) -> (Vec<Member>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = |i: usize, seeds: &[u16]| {
        let mut c = fast_config(system, seeds);
        c.update_section(|kv: &mut concord::kv::KvConfig| {
            kv.http_port = Some(0);
            kv.request_timeout = Duration::from_secs(1);
        })
        .expect("the section parses");
        c.data_dir = dir.path().join(format!("n{i}")).display().to_string();
        tune(&mut c);
        c
    };
    let first = start(config(0, &[]), true).await;
    let seed = port_of(&first.node);
    let mut members = vec![first];
    for i in 1..n {
        members.push(start(config(i, &[seed]), false).await);
    }
    wait_for("all Up", || {
        members.iter().all(|m| {
            m.node
                .cluster()
                .view()
                .members_with_status(concord_core::MemberStatus::Up)
                .count()
                == n
        })
    })
    .await;
    // Every node has synchronised the segments its first ring gave it.
    for m in &members {
        wait_for_async("segments synchronised", || async {
            m.kv.status()
                .await
                .is_ok_and(|s| s.status.pending_segments == 0)
        })
        .await;
    }
    (members, dir)
}

async fn keys(m: &Member) -> u64 {
    m.kv.status().await.map(|s| s.status.keys).unwrap_or(0)
}

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

async fn put(url: String, body: &str, context: Option<&str>) -> reqwest::Response {
    let mut r = http().put(url).body(body.to_string());
    if let Some(c) = context {
        r = r.header("X-Concord-Context", c);
    }
    r.send().await.unwrap()
}

fn context_of(r: &reqwest::Response) -> Option<String> {
    r.headers()
        .get("x-concord-context")
        .map(|v| v.to_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reads_siblings_and_deletes_over_http() {
    let (m, _dir) = cluster("kv-http", 3, |_| {}).await;
    assert_eq!(
        put(m[0].url("/kv/cart%2Falice"), "book", None)
            .await
            .status(),
        204
    );
    let r = http().get(m[1].url("/kv/cart/alice")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let ctx = context_of(&r).expect("a context");
    assert_eq!(r.text().await.unwrap(), "book");

    // Two blind writes through different nodes: concurrent, so both are kept.
    assert_eq!(put(m[1].url("/kv/doc"), "from-1", None).await.status(), 204);
    assert_eq!(put(m[2].url("/kv/doc"), "from-2", None).await.status(), 204);
    let r = http().get(m[0].url("/kv/doc?r=all")).send().await.unwrap();
    assert_eq!(r.status(), 300);
    let ctx_doc = context_of(&r).unwrap();
    let v: Value = r.json().await.unwrap();
    let mut siblings: Vec<String> = v["siblings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            use base64::Engine as _;
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(s.as_str().unwrap())
                    .unwrap(),
            )
            .unwrap()
        })
        .collect();
    siblings.sort();
    assert_eq!(siblings, ["from-1", "from-2"]);
    // A write with the merged context resolves them.
    assert_eq!(
        put(m[0].url("/kv/doc"), "merged", Some(&ctx_doc))
            .await
            .status(),
        204
    );
    let r = http()
        .get(m[2].url("/kv/doc?r=quorum"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "merged");

    // Delete with the context; then 404.
    let r = http()
        .delete(m[2].url("/kv/cart%2Falice"))
        .header("X-Concord-Context", &ctx)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(
        http()
            .get(m[0].url("/kv/cart%2Falice"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    // Deleting without a context reads first; nothing there: 404.
    assert_eq!(
        http()
            .delete(m[0].url("/kv/never"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        http()
            .delete(m[0].url("/kv/doc"))
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    assert_eq!(
        http()
            .get(m[1].url("/kv/doc"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    // The library handle sees what HTTP wrote.
    assert_eq!(put(m[0].url("/kv/shared"), "x", None).await.status(), 204);
    let v = m[2].kv.get("shared", Default::default()).await.unwrap();
    assert_eq!(v.values, vec![b"x".to_vec()]);

    // Bad requests change nothing.
    let before = keys(&m[0]).await;
    assert_eq!(put(m[0].url("/kv/k?w=4"), "v", None).await.status(), 400);
    assert_eq!(put(m[0].url("/kv/k?n=0"), "v", None).await.status(), 400);
    assert_eq!(put(m[0].url("/kv/k?w=most"), "v", None).await.status(), 400);
    assert_eq!(
        put(m[0].url("/kv/k"), "v", Some("!!not-a-context"))
            .await
            .status(),
        400
    );
    let big = "x".repeat(600 * 1024);
    assert_eq!(put(m[0].url("/kv/k"), &big, None).await.status(), 413);
    let long_key = "k".repeat(2000);
    assert_eq!(
        put(m[0].url(&format!("/kv/{long_key}")), "v", None)
            .await
            .status(),
        400
    );
    assert_eq!(keys(&m[0]).await, before);

    // Status shows the ring: three members, each replicating every segment (N = 3).
    let s: Value = http()
        .get(m[0].url("/kv-status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(s["ring"].as_array().unwrap().len(), 3);
    assert!(s["ring"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["segments"] == 1024));
    // The management port serves it too.
    let mgmt = format!("http://{}/kv-status", m[0].node.management_addr().unwrap());
    assert_eq!(http().get(mgmt).send().await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_replica_down_w2_and_r2_work_and_w3_names_who_answered() {
    let (m, _dir) = cluster("kv-quorum", 3, |_| {}).await;
    assert_eq!(put(m[0].url("/kv/before"), "v1", None).await.status(), 204);
    m[2].node.stop().await;
    assert_eq!(put(m[0].url("/kv/k?w=2"), "v", None).await.status(), 204);
    let r = http().get(m[1].url("/kv/k?r=2")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = http().get(m[1].url("/kv/before?r=2")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "v1");
    let r = put(m[0].url("/kv/k3?w=3"), "v", None).await;
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["quorum"], "w");
    assert_eq!(v["needed"], 3);
    assert_eq!(v["counted"].as_array().unwrap().len(), 2, "{v}");
    let down = m[2].node.self_address().to_string();
    assert!(
        !v["counted"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == down.as_str()),
        "{v}"
    );
    assert!(
        v["message"].as_str().unwrap().contains("w=3 not reached"),
        "{v}"
    );
    let r = http().get(m[1].url("/kv/k?r=all")).send().await.unwrap();
    assert_eq!(r.status(), 503);
}

/// Cuts everything `a` and `b` send to `c` while `f` runs.
async fn cut_off<F: std::future::Future<Output = ()>>(a: &Member, b: &Member, c: &Member, f: F) {
    let block = LinkFaults {
        blackhole_outbound: true,
        ..Default::default()
    };
    let to = c.node.self_address().clone();
    a.node.transport().set_faults(to.clone(), block.clone());
    b.node.transport().set_faults(to, block);
    f.await;
    a.node.transport().clear_faults();
    b.node.transport().clear_faults();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_repairs_the_replica_that_missed_a_write() {
    // Anti-entropy effectively off: only the read can repair.
    let (m, _dir) = cluster("kv-repair", 3, |c| {
        c.update_section(|kv: &mut concord::kv::KvConfig| {
            kv.anti_entropy_interval = Duration::from_secs(3600)
        })
        .expect("the section parses")
    })
    .await;
    cut_off(&m[0], &m[1], &m[2], async {
        assert_eq!(put(m[0].url("/kv/stale"), "v", None).await.status(), 204);
    })
    .await;
    assert_eq!(keys(&m[2]).await, 0, "node 2 missed the write");
    let r = http()
        .get(m[1].url("/kv/stale?r=all"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_for_async("node 2 repaired by the read", || async {
        keys(&m[2]).await == 1
    })
    .await;
    let s = m[1].kv.status().await.unwrap();
    assert!(s.stats.read_repairs >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anti_entropy_repairs_keys_no_read_touches() {
    let (m, _dir) = cluster("kv-ae", 3, |c| {
        c.update_section(|kv: &mut concord::kv::KvConfig| {
            kv.anti_entropy_interval = Duration::from_millis(300)
        })
        .expect("the section parses")
    })
    .await;
    cut_off(&m[0], &m[1], &m[2], async {
        for i in 0..50 {
            assert_eq!(
                put(m[i % 2].url(&format!("/kv/ae-{i}")), "v", None)
                    .await
                    .status(),
                204
            );
        }
    })
    .await;
    assert!(keys(&m[2]).await < 50);
    wait_for_async("node 2 catches up by anti-entropy", || async {
        keys(&m[2]).await == 50
    })
    .await;
    let s = m[2].kv.status().await.unwrap();
    let repaired: u64 = s.stats.ae_keys_repaired;
    let mut total = repaired;
    for x in &m[..2] {
        total += x.kv.status().await.unwrap().stats.ae_keys_repaired;
    }
    assert!(total >= 50, "anti-entropy did the repair ({total})");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_obeys_the_management_access_rules() {
    let (m, _dir) = cluster("kv-access", 1, |c| {
        c.management.bearer_token = Some("s3cret".into());
        c.update_section(|kv: &mut concord::kv::KvConfig| {
            kv.n = 1;
            kv.r = "one".into();
            kv.w = "one".into();
        })
        .expect("the section parses");
    })
    .await;
    // Reads are data here: they need the token too.
    assert_eq!(
        http().get(m[0].url("/kv/k")).send().await.unwrap().status(),
        401
    );
    assert_eq!(put(m[0].url("/kv/k"), "v", None).await.status(), 401);
    let ok = http()
        .put(m[0].url("/kv/k"))
        .bearer_auth("s3cret")
        .body("v")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 204);
    let r = http()
        .get(m[0].url("/kv/k"))
        .bearer_auth("s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // A request naming another host (DNS rebinding) is refused.
    let r = http()
        .get(m[0].url("/kv/k"))
        .bearer_auth("s3cret")
        .header("Host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}
