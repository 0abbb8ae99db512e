//! The receptionist and distributed pub-sub on three in-process nodes over real sockets:
//! a handle registered on one node is found and followed from the others and gets what
//! they send; a subscriber on every node gets what one node publishes, once; a group send
//! reaches one subscriber; a message of the wrong type is dropped and counted; the
//! registrations of a node that left disappear; limits refuse with a clear error.

mod common;

use std::time::Duration;

use common::{fast_config, port_of, wait_for, wait_for_async, wait_self_up};
use concord::ddata::DistributedData;
use concord::pubsub::{PubSub, PubSubError};
use concord::receptionist::{Receptionist, ReceptionistError, ReceptionistLayer, ServiceKey};
use concord::{Config, Node};
use concord_core::ddata::ReplicatorSettings;

struct Member {
    node: Node,
    receptionist: Receptionist,
    pubsub: PubSub,
}

async fn start(seeds: &[u16], tune: impl FnOnce(&mut Config)) -> Member {
    let mut c = fast_config("receptionist", seeds);
    c.update_section(|r: &mut concord::receptionist::ReceptionistConfig| {
        r.pruning_interval = Duration::from_millis(200);
    })
    .unwrap();
    tune(&mut c);
    let (ddata, replicator) = DistributedData::with_settings(ReplicatorSettings {
        gossip_interval_ms: 300,
        delta_propagation_interval_ms: 100,
        notify_subscribers_interval_ms: 100,
        ..Default::default()
    });
    let (layer, receptionist) = ReceptionistLayer::new(replicator);
    let node = Node::builder(c)
        .layer(ddata)
        .layer(layer)
        .start()
        .await
        .unwrap();
    if seeds.is_empty() {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    wait_self_up(&node).await;
    let pubsub = PubSub::new(receptionist.clone());
    Member {
        node,
        receptionist,
        pubsub,
    }
}

async fn cluster() -> Vec<Member> {
    let a = start(&[], |_| {}).await;
    let seed = port_of(&a.node);
    let b = start(&[seed], |_| {}).await;
    let c = start(&[seed], |_| {}).await;
    let members = vec![a, b, c];
    wait_for("three Up everywhere", || {
        members.iter().all(|m| {
            m.node
                .cluster()
                .view()
                .members_with_status(concord_core::MemberStatus::Up)
                .count()
                == 3
        })
    })
    .await;
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_handle_is_found_followed_and_reached_and_goes_with_its_node() {
    let m = cluster().await;
    let key = ServiceKey::<String>::new("greeter").unwrap();
    let mut follow = m[0].receptionist.subscribe(&key).await.unwrap();
    assert!(follow.next().await.unwrap().all.is_empty());
    let mut handle = m[2].receptionist.register(&key).await.unwrap();
    let instance = handle.instance().clone();
    // Followed from node 0: the listing changes to the new handle.
    let listing = tokio::time::timeout(Duration::from_secs(30), follow.next())
        .await
        .expect("a listing change")
        .unwrap();
    assert_eq!(listing.reachable, vec![instance.clone()]);
    // Found from node 1, and reached from there.
    wait_for_async("node 1 finds the handle", || async {
        m[1].receptionist.find(&key).await.unwrap().reachable == vec![instance.clone()]
    })
    .await;
    m[1].receptionist
        .tell(&key, &instance, &"hello".to_string())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), handle.recv()).await;
    assert_eq!(got.unwrap().as_deref(), Some("hello"));
    // A message of another type under the same key is dropped (and counted), not a panic.
    let wrong = ServiceKey::<(u8, u8, u8)>::new("greeter").unwrap();
    m[1].receptionist
        .tell(&wrong, &instance, &(1, 2, 3))
        .await
        .unwrap();
    m[1].receptionist
        .tell(&key, &instance, &"after".to_string())
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), handle.recv()).await;
    assert_eq!(got.unwrap().as_deref(), Some("after"));
    // The management route (and the dashboard panel) list it.
    let url = format!(
        "http://{}/cluster/receptionist",
        m[1].node.management_addr().unwrap()
    );
    let registry = common::get_json(&url).await;
    assert_eq!(registry["keys"][0]["key"], "greeter", "{registry}");
    assert_eq!(
        registry["keys"][0]["instances"][0],
        instance.to_string().as_str(),
        "{registry}"
    );

    // The node leaves: its registration disappears from the others' listings.
    m[2].node.shutdown().await;
    drop(handle);
    wait_for_async("the departed node's handle gone", || async {
        m[0].receptionist.find(&key).await.unwrap().all.is_empty()
    })
    .await;
    // The registry itself is cleaned by the leader, not only filtered.
    wait_for_async("the leader pruned the registry", || async {
        let k = concord_core::ddata::Key::<concord_core::ddata::ORSet<String>>::new(
            "receptionist/greeter",
        )
        .unwrap();
        m[0].receptionist_replicator()
            .get(&k, concord_core::ddata::ReadConsistency::Local)
            .await
            .unwrap()
            .is_none_or(|s| s.elements().next().is_none())
    })
    .await;
    for x in &m[..2] {
        x.node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_reaches_every_subscriber_once_and_a_group_send_reaches_one() {
    let m = cluster().await;
    let topics: Vec<_> = m
        .iter()
        .map(|x| x.pubsub.topic::<u32>("chat").unwrap())
        .collect();
    let mut subs = Vec::new();
    for t in &topics {
        subs.push(t.subscribe().await.unwrap());
    }
    // Two subscribers on node 1: both get each message, but it crosses the wire once.
    subs.push(topics[1].subscribe().await.unwrap());
    wait_for_async("node 0 knows the three subscribed nodes", || async {
        topics[0].subscribers().await.unwrap().reachable.len() == 3
    })
    .await;
    for n in 0..5u32 {
        assert_eq!(topics[0].publish(&n).await.unwrap(), 3);
    }
    for s in &mut subs {
        for n in 0..5u32 {
            let got = tokio::time::timeout(Duration::from_secs(10), s.recv()).await;
            assert_eq!(got.unwrap(), Some(n));
        }
    }

    // A group: a send reaches exactly one of its subscribers.
    let mut workers = Vec::new();
    for t in &topics {
        workers.push(t.subscribe_in_group("workers").await.unwrap());
    }
    wait_for_async("node 0 knows the three workers", || async {
        topics[0].group("workers").await.unwrap().reachable.len() == 3
    })
    .await;
    assert!(topics[0].send("workers", &42).await.unwrap());
    let mut got = 0;
    for w in &mut workers {
        if let Ok(Some(v)) = tokio::time::timeout(Duration::from_millis(1500), w.recv()).await {
            assert_eq!(v, 42);
            got += 1;
        }
    }
    assert_eq!(got, 1);
    assert!(!topics[0].send("nobody", &1).await.unwrap());

    // The last local subscriber going deregisters the node's handle.
    let s2 = subs.remove(2);
    drop(s2);
    wait_for_async("node 2 no longer listed for the topic", || async {
        topics[0].subscribers().await.unwrap().all.len() == 2
    })
    .await;
    for x in &m {
        x.node.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_refuse_with_a_clear_error() {
    let a = start(&[], |c| {
        c.update_section(|r: &mut concord::receptionist::ReceptionistConfig| {
            r.max_registrations = 1;
        })
        .unwrap();
        c.update_section(|p: &mut concord::receptionist::PubSubConfig| {
            p.max_topics = 1;
            p.max_subscribers_per_topic = 1;
        })
        .unwrap();
    })
    .await;
    let key = ServiceKey::<u32>::new("one").unwrap();
    let first = a.receptionist.register(&key).await.unwrap();
    let e = a.receptionist.register(&key).await.err().unwrap();
    assert!(matches!(e, ReceptionistError::Refused(_)), "{e}");
    assert!(e.to_string().contains("max-registrations"), "{e}");
    first.deregister().await;
    let t = a.pubsub.topic::<u32>("t").unwrap();
    let _s = t.subscribe().await.unwrap();
    let e = t.subscribe().await.err().unwrap();
    assert!(matches!(e, PubSubError::TooManySubscribers { .. }), "{e}");
    let e = a
        .pubsub
        .topic::<u32>("u")
        .unwrap()
        .subscribe()
        .await
        .err()
        .unwrap();
    assert!(matches!(e, PubSubError::TooManyTopics(1)), "{e}");
    assert!(a.pubsub.topic::<u32>("a b").is_err());
    // Names that would be ambiguous or take pub-sub's keys are refused.
    assert!(a.pubsub.topic::<u32>("a/b").is_err());
    assert!(matches!(
        t.subscribe_in_group("g/h").await,
        Err(PubSubError::InvalidName(_))
    ));
    assert!(ServiceKey::<u32>::new("pubsub/topic/t").is_err());
    a.node.shutdown().await;
}

impl Member {
    fn receptionist_replicator(&self) -> concord::ddata::Replicator {
        self.receptionist.replicator()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routers_spread_hash_and_broadcast_over_the_instances() {
    use concord::receptionist::RoutingLogic;
    let m = cluster().await;
    let key = ServiceKey::<u32>::new("worker").unwrap();
    let mut handles = Vec::new();
    for x in &m {
        handles.push(x.receptionist.register(&key).await.unwrap());
    }
    let mut rr = m[0]
        .receptionist
        .router(&key, RoutingLogic::RoundRobin)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), rr.wait_for(3))
        .await
        .expect("three instances")
        .unwrap();
    for n in 0..6u32 {
        assert_eq!(rr.tell(&n).await.unwrap(), 1);
    }
    // Round robin: two each.
    for h in &mut handles {
        for _ in 0..2 {
            let got = tokio::time::timeout(Duration::from_secs(10), h.recv()).await;
            assert!(got.unwrap().is_some());
        }
    }
    // Consistent hashing: one key, one instance, from any node.
    let hashing_a = m[0]
        .receptionist
        .router(&key, RoutingLogic::ConsistentHashing)
        .await
        .unwrap();
    let mut hashing_b = m[1]
        .receptionist
        .router(&key, RoutingLogic::ConsistentHashing)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), hashing_b.wait_for(3))
        .await
        .expect("three instances")
        .unwrap();
    assert_eq!(hashing_a.instances(), hashing_b.instances());
    for n in 0..4u32 {
        hashing_a.tell_keyed(b"user-7", &n).await.unwrap();
        hashing_b.tell_keyed(b"user-7", &(n + 100)).await.unwrap();
    }
    let mut receivers = 0;
    for h in &mut handles {
        if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(1500), h.recv()).await {
            receivers += 1;
            for _ in 0..7 {
                let got = tokio::time::timeout(Duration::from_secs(10), h.recv()).await;
                assert!(got.unwrap().is_some());
            }
        }
    }
    assert_eq!(receivers, 1, "one key, one instance");
    // Broadcast: everyone.
    let mut all = m[2]
        .receptionist
        .router(&key, RoutingLogic::Broadcast)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), all.wait_for(3))
        .await
        .expect("three instances")
        .unwrap();
    assert_eq!(all.tell(&9).await.unwrap(), 3);
    for h in &mut handles {
        let got = tokio::time::timeout(Duration::from_secs(10), h.recv()).await;
        assert_eq!(got.unwrap(), Some(9));
    }
    for x in &m {
        x.node.shutdown().await;
    }
}

/// This node's value of the gauge or counter `name` (with `extra` in its labels), if shown.
async fn series(n: &Node, name: &str, extra: &str) -> Option<f64> {
    let url = format!("http://{}/metrics", n.management_addr().unwrap());
    let text = reqwest::get(url).await.ok()?.text().await.ok()?;
    let label = format!("node=\"{}\"", n.self_address());
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label) && l.contains(extra))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mailbox_byte_budget_drops_beyond_it_and_gets_every_byte_back() {
    let a = start(&[], |c| {
        c.update_section(|r: &mut concord::receptionist::ReceptionistConfig| {
            r.max_mailbox_bytes = 65_536;
        })
        .unwrap();
    })
    .await;
    let key = ServiceKey::<Vec<u8>>::new("big").unwrap();
    let mut h = a.receptionist.register(&key).await.unwrap();
    let me = h.instance().clone();
    let message = vec![7u8; 4_000];
    for _ in 0..40 {
        a.receptionist.tell(&key, &me, &message).await.unwrap();
    }
    // About 16 of the 40 fit in 64 KiB; the rest are dropped and counted.
    let mut got = 0;
    while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), h.recv()).await {
        assert_eq!(m.len(), 4_000);
        got += 1;
    }
    assert!((10..40).contains(&got), "{got} received");
    wait_for_async("the drops counted", || async {
        series(
            &a.node,
            "concord_receptionist_dropped_total",
            "mailbox-full",
        )
        .await
        .is_some_and(|d| d + f64::from(got) >= 40.0)
    })
    .await;
    wait_for_async("every received byte back in the budget", || async {
        series(&a.node, "concord_receptionist_mailbox_bytes", "").await == Some(0.0)
    })
    .await;
    // Messages left in a dropped handle's mailbox come back too.
    for _ in 0..5 {
        a.receptionist.tell(&key, &me, &message).await.unwrap();
    }
    wait_for_async("five waiting", || async {
        series(&a.node, "concord_receptionist_mailbox_bytes", "")
            .await
            .is_some_and(|b| b > 0.0)
    })
    .await;
    drop(h);
    wait_for_async("a dropped handle's bytes back in the budget", || async {
        series(&a.node, "concord_receptionist_mailbox_bytes", "").await == Some(0.0)
    })
    .await;
    a.node.shutdown().await;
}
