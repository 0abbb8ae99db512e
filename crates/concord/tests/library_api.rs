//! The library API and the management HTTP API, with in-process nodes on real sockets.

mod common;

use std::time::Duration;

use std::collections::BTreeMap;

use common::{count_status, fast_config, port_of, start_first, wait_for, wait_self_up};
use concord::{Node, SubscriptionItem};
use concord_core::{ClusterEvent, MemberStatus, UniqueAddress};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_nodes_form_a_cluster_and_subscribers_get_snapshot_then_events() {
    let a = start_first(fast_config("lib", &[])).await;
    wait_self_up(&a).await;
    let mut sub = a.cluster().subscribe();
    let Some(SubscriptionItem::CurrentClusterState(first)) = sub.recv().await else {
        panic!("the view comes first");
    };
    assert_eq!(first.members.len(), 1);
    let b = Node::start(fast_config("lib", &[port_of(&a)]))
        .await
        .unwrap();
    let c = Node::start(fast_config("lib", &[port_of(&a)]))
        .await
        .unwrap();
    let mut up = std::collections::BTreeSet::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while up.len() < 2 {
            if let Some(ClusterEvent::MemberUp(m)) = sub.next_event().await {
                up.insert(m.address().clone());
            }
        }
    })
    .await
    .expect("MemberUp for b and c");
    assert!(up.contains(b.self_address()) && up.contains(c.self_address()));

    // Leave through the library: c runs its coordinated shutdown and terminates by itself.
    c.cluster().leave(c.self_address().clone()).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(20), c.terminated())
        .await
        .unwrap();
    assert_eq!(reason, concord_core::ShutdownReason::Removed);
    assert_eq!(
        c.cluster().membership_ended(),
        Some(concord_core::ShutdownReason::Removed),
        "it saw its own removal before it stopped"
    );
    wait_for("c gone from a's view", || {
        a.cluster().view().members.len() == 2
    })
    .await;

    // Commands on unknown members are refused and change nothing.
    let unknown = concord_core::Address::new("lib", "127.0.0.1", 1);
    assert!(a.cluster().down(unknown).await.is_err());
    assert_eq!(a.cluster().view().members.len(), 2);
    a.stop().await;
    b.stop().await;
}

/// Applies what a subscriber receives to its own member table, as an application would.
fn apply(members: &mut BTreeMap<UniqueAddress, MemberStatus>, item: &SubscriptionItem) {
    match item {
        SubscriptionItem::CurrentClusterState(v) => {
            *members = v
                .members
                .values()
                .map(|m| (m.unique_address.clone(), m.status))
                .collect();
        }
        SubscriptionItem::Event(ClusterEvent::MemberRemoved { member, .. }) => {
            members.remove(&member.unique_address);
        }
        SubscriptionItem::Event(e) => {
            if let Some(m) = e.member() {
                if !matches!(
                    e,
                    ClusterEvent::UnreachableMember(_) | ClusterEvent::ReachableMember(_)
                ) {
                    members.insert(m.unique_address.clone(), m.status);
                }
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_stops_reading_gets_a_fresh_view_then_events_and_ends_equal() {
    // One event batch of room: joining three nodes publishes many more.
    let mut config = fast_config("lag", &[]);
    config.cluster.event_buffer_size = 1;
    let a = start_first(config).await;
    wait_self_up(&a).await;
    let mut sub = a.cluster().subscribe();
    let mut members = BTreeMap::new();
    let first = sub.recv().await.unwrap();
    apply(&mut members, &first);
    // The subscriber stops reading while three nodes join and come Up.
    let others: Vec<Node> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(
                Node::start(fast_config("lag", &[port_of(&a)]))
                    .await
                    .unwrap(),
            );
        }
        v
    };
    wait_for("4 members Up", || count_status(&a, MemberStatus::Up) == 4).await;
    // Reading again: a fresh view (the events it missed are gone), then events.
    let mut saw_resync = false;
    let node_members = |a: &Node| -> BTreeMap<UniqueAddress, MemberStatus> {
        a.cluster()
            .view()
            .members
            .values()
            .map(|m| (m.unique_address.clone(), m.status))
            .collect()
    };
    tokio::time::timeout(Duration::from_secs(20), async {
        while members != node_members(&a) || !saw_resync {
            let item = sub.recv().await.expect("the node is running");
            if matches!(item, SubscriptionItem::CurrentClusterState(_)) {
                saw_resync = true;
            }
            apply(&mut members, &item);
        }
    })
    .await
    .expect("the subscriber catches up");
    assert!(sub.resyncs() >= 1, "it lagged and was resynced");
    assert_eq!(members.len(), 4);
    assert_eq!(
        sub.view().members.keys().collect::<Vec<_>>(),
        a.cluster().view().members.keys().collect::<Vec<_>>(),
        "its view equals the node's view"
    );
    for n in others {
        n.stop().await;
    }
    a.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn management_api_routes_answer_in_akka_shapes() {
    let a = start_first(fast_config("mgmt", &[])).await;
    let b = Node::start(fast_config("mgmt", &[])).await.unwrap();
    let base = format!("http://{}", a.management_addr().unwrap());
    let base_b = format!("http://{}", b.management_addr().unwrap());
    let http = reqwest::Client::new();

    // b is not in a cluster: not ready, explains why.
    let r = http.get(format!("{base_b}/ready")).send().await.unwrap();
    assert_eq!(r.status(), 500);
    assert!(r.text().await.unwrap().contains("not a member"));
    assert_eq!(
        http.get(format!("{base_b}/alive"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    wait_self_up(&a).await;
    let r = http.get(format!("{base}/ready")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "OK");
    // An application's readiness check not met: not ready, named; met: ready again.
    let warm = a.readiness_checks().register("cache-warm");
    let r = http.get(format!("{base}/ready")).send().await.unwrap();
    assert_eq!(r.status(), 500);
    assert!(r.text().await.unwrap().contains("cache-warm"));
    warm.set(true);
    let r = http.get(format!("{base}/ready")).send().await.unwrap();
    assert_eq!(r.status(), 200);

    // POST /cluster/members joins b (told through b's API) to a.
    let r = http
        .post(format!("{base_b}/cluster/members"))
        .form(&[("address", a.self_address().to_string())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["message"],
        format!("Joining {}", a.self_address())
    );
    wait_for("b Up on a", || count_status(&a, MemberStatus::Up) == 2).await;

    let v: serde_json::Value = http
        .get(format!("{base}/cluster/members"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["selfNode"], a.self_address().to_string());
    let lowest = a.self_address().min(b.self_address()).to_string();
    assert_eq!(v["leader"], lowest, "leader is the lowest address");
    assert_eq!(v["oldest"], a.self_address().to_string());
    assert!(v["unreachable"].as_array().unwrap().is_empty());
    let members = v["members"].as_array().unwrap();
    assert_eq!(members.len(), 2);
    assert!(
        members[0]["node"].as_str().unwrap() < members[1]["node"].as_str().unwrap(),
        "sorted by node"
    );
    assert!(members[0]["nodeUid"].is_string(), "nodeUid is a string");
    assert_eq!(members[0]["status"], "Up");

    // GET one member: full address, host:port, unknown.
    let one = http
        .get(format!("{base}/cluster/members/{}", b.self_address()))
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), 200);
    assert_eq!(
        one.json::<serde_json::Value>().await.unwrap()["node"],
        b.self_address().to_string()
    );
    let hp = http
        .get(format!("{base}/cluster/members/127.0.0.1:{}", port_of(&b)))
        .send()
        .await
        .unwrap();
    assert_eq!(hp.status(), 200);
    let missing = http
        .get(format!("{base}/cluster/members/127.0.0.1:1"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert!(
        missing.json::<serde_json::Value>().await.unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("not found")
    );

    // PUT: bad operation → 400, unknown member → 404, changes nothing.
    let bad = http
        .put(format!("{base}/cluster/members/{}", b.self_address()))
        .form(&[("operation", "Explode")])
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(
        bad.json::<serde_json::Value>().await.unwrap()["message"],
        "Operation not supported"
    );
    let join_op = http
        .put(format!("{base}/cluster/members/{}", b.self_address()))
        .form(&[("operation", "Join")])
        .send()
        .await
        .unwrap();
    assert_eq!(join_op.status(), 400);
    let unknown = http
        .put(format!("{base}/cluster/members/127.0.0.1:1"))
        .form(&[("operation", "Down")])
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(a.cluster().view().members.len(), 2);
    let bad_join = http
        .post(format!("{base}/cluster/members"))
        .form(&[("address", "not an address")])
        .send()
        .await
        .unwrap();
    assert_eq!(bad_join.status(), 400);

    // Metrics are exported.
    let m = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(m.contains("concord_cluster_members"), "{m}");
    assert!(m.contains("concord_remote_bytes_out_total"), "{m}");

    // PUT operation=leave (case-insensitive) → b is removed and stops.
    let r = http
        .put(format!("{base}/cluster/members/{}", b.self_address()))
        .form(&[("operation", "leave")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["message"],
        format!("Leaving {}", b.self_address())
    );
    tokio::time::timeout(Duration::from_secs(20), b.terminated())
        .await
        .unwrap();
    a.stop().await;
}
