//! Reliable delivery to a cluster singleton on in-process nodes over real sockets: the
//! singleton runs a consumer endpoint where it runs; a producer on another node follows it
//! to the oldest member. When the oldest leaves gracefully the singleton moves, and every
//! message sent before, during and after the move is handled (at least once; each
//! instance handles what it gets in order), those sent after it by the new instance.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::delivery::settings;
use common::{fast_config, port_of, wait_for, wait_for_async};
use concord::delivery::{DeliveryError, DeliveryHandle, ReliableDelivery};
use concord::singleton::{ClusterSingletons, SingletonContext};
use concord::{Config, Node};

/// (instance's node port, value) in the order handled.
type Handled = Arc<Mutex<Vec<(u16, u64)>>>;

struct Member {
    node: Node,
    delivery: DeliveryHandle,
}

/// The singleton: a consumer endpoint `ledger` on its node while it runs.
fn ledger(
    delivery: DeliveryHandle,
    handled: Handled,
) -> impl Fn(
    SingletonContext<(), ()>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
       + Send
       + Sync
       + 'static {
    move |mut ctx: SingletonContext<(), ()>| {
        let (delivery, handled) = (delivery.clone(), handled.clone());
        Box::pin(async move {
            let port = ctx.node().port;
            // The previous instance's endpoint may still be closing on this node: retry.
            let mut consumer = loop {
                match delivery.consumer::<u64>("ledger", &settings()).await {
                    Ok(c) => break c,
                    Err(DeliveryError::BadName(_)) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(e) => panic!("{e}"),
                }
            };
            loop {
                tokio::select! {
                    m = ctx.recv() => if m.is_none() { break },
                    d = consumer.recv() => match d {
                        Some(d) => {
                            handled.lock().unwrap().push((port, d.message));
                            d.confirm();
                        }
                        None => break,
                    },
                }
            }
        })
    }
}

async fn start(c: Config, handled: &Handled, first: bool) -> Member {
    let (layer, delivery) = ReliableDelivery::new();
    let mut singletons = ClusterSingletons::new();
    let _proxy = singletons.singleton("ledger", ledger(delivery.clone(), handled.clone()));
    let node = Node::builder(c)
        .layer(layer)
        .layer(singletons)
        .start()
        .await
        .unwrap();
    if first {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    Member { node, delivery }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_follows_the_singleton_when_it_moves() {
    let handled: Handled = Arc::default();
    let system = "rd-singleton";
    let tune =
        |c: &mut Config| c.cluster.split_brain_resolver.stable_after = Duration::from_secs(2);
    let mut c = fast_config(system, &[]);
    tune(&mut c);
    let first = start(c, &handled, true).await;
    let seed = port_of(&first.node);
    let mut members = vec![first];
    for _ in 1..3 {
        let mut c = fast_config(system, &[seed]);
        tune(&mut c);
        members.push(start(c, &handled, false).await);
    }
    wait_for("all Up", || {
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
    // Oldest first; the producer runs on the youngest.
    let order: Vec<u16> = members[0]
        .node
        .cluster()
        .view()
        .by_age(None)
        .iter()
        .map(|m| m.address().port)
        .collect();
    members.sort_by_key(|m| order.iter().position(|p| *p == port_of(&m.node)));
    let (oldest, next) = (port_of(&members[0].node), port_of(&members[1].node));
    let producer = members[2]
        .delivery
        .to_singleton::<u64>("ledger-feed", "ledger", None, settings())
        .await
        .unwrap();
    assert!(matches!(
        members[2]
            .delivery
            .to_singleton::<u64>("other-feed", "", None, settings())
            .await,
        Err(DeliveryError::BadName(_))
    ));
    for v in 0..100u64 {
        producer.send(&v).await.unwrap();
    }
    wait_for("the first hundred handled on the oldest", || {
        let h = handled.lock().unwrap();
        (0..100).all(|v| h.contains(&(oldest, v)))
    })
    .await;
    // The oldest leaves: the singleton moves to the next oldest, and so do the messages,
    // including those sent while it moves.
    let leaving = members.remove(0);
    let sending = {
        let producer = producer.clone();
        tokio::spawn(async move {
            for v in 100..200u64 {
                producer.send(&v).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let leaver = leaving.node.self_address().clone();
    leaving.node.shutdown().await;
    sending.await.unwrap();
    // Once the producer's node no longer counts the leaver, the singleton runs on the next
    // oldest: what is sent now is handled there.
    wait_for("the leaver gone from the producer's view", || {
        !members[1]
            .node
            .cluster()
            .view()
            .members
            .values()
            .any(|m| m.unique_address.address == leaver)
    })
    .await;
    for v in 200..300u64 {
        producer.send(&v).await.unwrap();
    }
    wait_for_async("every message confirmed", || {
        let producer = producer.clone();
        async move { producer.status().await.unwrap().producer.unconfirmed == 0 }
    })
    .await;
    let h = handled.lock().unwrap().clone();
    for v in 0..300u64 {
        assert!(h.iter().any(|(_, x)| *x == v), "{v} never handled");
    }
    for v in 200..300u64 {
        assert!(
            h.contains(&(next, v)),
            "{v}, sent after the move, handled on {next}"
        );
    }
    for port in [oldest, next] {
        // Each instance's first handling of each value is in order (a message may come
        // again: at least once).
        let mut first: Vec<u64> = Vec::new();
        for (_, v) in h.iter().filter(|(p, _)| *p == port) {
            if !first.contains(v) {
                first.push(*v);
            }
        }
        assert!(
            first.windows(2).all(|w| w[0] < w[1]),
            "the instance on {port} handled in order: {first:?}"
        );
    }
    for m in members {
        m.node.stop().await;
    }
}
