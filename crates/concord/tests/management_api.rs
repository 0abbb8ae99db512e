//! The management routes added for bootstrap and operations: the contact point, full
//! cluster shutdown, the domain-events stream, the shards placeholder, and the protection
//! of write routes (read-only, bearer token). In-process nodes on real sockets.

mod common;

use std::time::Duration;

use common::{fast_config as config, port_of, start_first, wait_for, wait_self_up};
use concord::Node;
use concord_core::MemberStatus;
use serde_json::Value;

fn base(c: &Node) -> String {
    format!("http://{}", c.management_addr().unwrap())
}

/// Every member is still Up (a refused write changed nothing).
fn unchanged_all_up(c: &Node) -> bool {
    c.cluster()
        .view()
        .members
        .values()
        .all(|m| m.status == MemberStatus::Up)
}

/// `GET url` as JSON.
async fn get_json(http: &reqwest::Client, url: String) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contact_point_shutdown_shards_and_domain_events() {
    let a = start_first(config("routes", &[])).await;
    let b = Node::start(config("routes", &[])).await.unwrap();
    let http = reqwest::Client::new();

    // A node in no cluster reports no seed nodes.
    let v = get_json(&http, format!("{}/bootstrap/seed-nodes", base(&b))).await;
    assert_eq!(v["selfNode"], b.self_address().to_string());
    assert_eq!(v["seedNodes"], serde_json::json!([]));

    wait_self_up(&a).await;
    let v = get_json(&http, format!("{}/bootstrap/seed-nodes", base(&a))).await;
    let seeds = v["seedNodes"].as_array().unwrap();
    assert_eq!(seeds.len(), 1);
    assert_eq!(seeds[0]["node"], a.self_address().to_string());
    assert_eq!(
        seeds[0]["nodeUid"].as_u64(),
        Some(a.cluster().self_unique_address().uid)
    );
    assert_eq!(seeds[0]["status"], "Up");

    // Domain events: subscribe (MemberUp only), then b joins; the stream shows MemberUp of b.
    let bad = http
        .get(format!("{}/cluster/domain-events?type=Bogus", base(&a)))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let mut sse = http
        .get(format!("{}/cluster/domain-events?type=MemberUp", base(&a)))
        .send()
        .await
        .unwrap();
    assert_eq!(sse.status(), 200);
    assert!(sse.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    b.cluster().join(a.self_address().clone()).await.unwrap();
    let want = b.self_address().to_string();
    let text = tokio::time::timeout(Duration::from_secs(20), async {
        let mut text = String::new();
        while !text.contains(&want) {
            match sse.chunk().await.unwrap() {
                Some(c) => text.push_str(&String::from_utf8_lossy(&c)),
                None => break,
            }
        }
        text
    })
    .await
    .expect("MemberUp of b on the stream");
    assert!(text.contains("event: MemberUp"), "{text}");
    assert!(text.contains("\"type\":\"MemberUp\""), "{text}");
    assert!(!text.contains("MemberJoined"), "filtered out: {text}");

    // Metrics an operator watches, in Prometheus text.
    let m = http
        .get(format!("{}/metrics", base(&a)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for name in [
        "concord_cluster_members{",
        "concord_cluster_unreachable_members",
        "concord_cluster_is_leader",
        "concord_cluster_convergence",
        "concord_cluster_gossip_bytes_out_total",
        "concord_cluster_gossip_bytes_in_total",
        "concord_cluster_messages_sent_total",
        "concord_cluster_messages_received_total",
    ] {
        assert!(m.contains(name), "{name} missing from /metrics:\n{m}");
    }

    // Shards: not started.
    let r = http
        .get(format!("{}/cluster/shards/carts", base(&a)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(
        r.json::<Value>().await.unwrap()["message"],
        "Shard Region carts is not started"
    );

    // PUT /cluster: a bad operation changes nothing; prepare-for-full-shutdown works.
    for form in [vec![("operation", "explode")], vec![]] {
        let r = http
            .put(format!("{}/cluster", base(&a)))
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    }
    assert!(unchanged_all_up(&a), "nothing changed");
    let r = http
        .put(format!("{}/cluster", base(&a)))
        .form(&[("operation", "prepare-for-full-shutdown")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    wait_for("both ReadyForShutdown", || {
        let v = a.cluster().view();
        v.members.len() == 2
            && v.members
                .values()
                .all(|m| m.status == MemberStatus::ReadyForShutdown)
    })
    .await;
    // DELETE of an unknown member: 404.
    let r = http
        .delete(format!("{}/cluster/members/127.0.0.1:1", base(&a)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_routes_are_refused_when_read_only_or_without_the_token() {
    let mut ro = config("guard", &[]);
    ro.management.read_only = Some(true);
    let ro = start_first(ro).await;
    let mut tok = config("guard", &[port_of(&ro)]);
    tok.management.bearer_token = Some("s3cret".into());
    let tok = Node::start(tok).await.unwrap();
    wait_self_up(&ro).await;
    wait_self_up(&tok).await;
    let http = reqwest::Client::new();
    let target = tok.self_address().to_string();

    // Read-only: every write is 403, nothing changes; reads and the contact point work.
    let writes = [
        http.put(format!("{}/cluster/members/{target}", base(&ro)))
            .form(&[("operation", "Down")]),
        http.delete(format!("{}/cluster/members/{target}", base(&ro))),
        http.post(format!("{}/cluster/members", base(&ro)))
            .form(&[("address", target.as_str())]),
        http.put(format!("{}/cluster", base(&ro)))
            .form(&[("operation", "prepare-for-full-shutdown")]),
    ];
    for w in writes {
        assert_eq!(w.send().await.unwrap().status(), 403);
    }
    for path in [
        "/cluster/members",
        "/bootstrap/seed-nodes",
        "/ready",
        "/alive",
        "/metrics",
    ] {
        let r = http
            .get(format!("{}{path}", base(&ro)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    assert!(unchanged_all_up(&ro), "nothing changed");

    // Bearer token: missing or wrong → 401; right → done.
    let url = format!("{}/cluster/members/{}", base(&tok), ro.self_address());
    let none = http
        .put(&url)
        .form(&[("operation", "Leave")])
        .send()
        .await
        .unwrap();
    assert_eq!(none.status(), 401);
    let wrong = http
        .put(&url)
        .bearer_auth("nope")
        .form(&[("operation", "Leave")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(unchanged_all_up(&ro), "nothing changed");
    let client =
        common::client::ManagementClient::new(&base(&tok)).with_token(Some("s3cret".into()));
    client
        .operation(&ro.self_address().to_string(), "Leave")
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(20), ro.terminated())
        .await
        .unwrap();
    assert_eq!(reason, concord_core::ShutdownReason::Removed);
    tok.stop().await;
}

#[test]
fn read_only_default_is_safe() {
    let mut m = concord::config::ManagementConfig::default();
    assert!(!m.effective_read_only(), "loopback: writable");
    m.hostname = "0.0.0.0".into();
    assert!(
        m.effective_read_only(),
        "all interfaces, no token: read-only"
    );
    m.bearer_token = Some("t".into());
    assert!(!m.effective_read_only(), "token protects writes");
    m.read_only = Some(true);
    assert!(m.effective_read_only(), "explicit wins");
}
