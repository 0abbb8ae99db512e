//! Point-to-point and work-pulling reliable delivery between in-process nodes over real
//! sockets (the delivery layer): a point-to-point producer's messages reach the consumer
//! on another node once and in order, held to the flow control window while it does not
//! confirm; a work-pulling producer spreads work over workers on two nodes and, when one
//! of those nodes crashes, gives what it had not confirmed to the other — every message
//! handled at least once; when a worker's consumer stops while its node stays, that node
//! says so and the worker's messages go to the others. Endpoint names are checked.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::delivery::{settings, tune};
use common::{fast_config, port_of, wait_for, wait_for_async};
use concord::delivery::{DeliveryError, DeliveryHandle, ReliableDelivery};
use concord::{Config, Node};

struct Member {
    node: Node,
    delivery: DeliveryHandle,
}

async fn start(c: Config, first: bool) -> Member {
    let (layer, delivery) = ReliableDelivery::new();
    let node = Node::builder(c).layer(layer).start().await.unwrap();
    if first {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    Member { node, delivery }
}

async fn cluster(system: &str, n: usize) -> Vec<Member> {
    let mut c = fast_config(system, &[]);
    tune(&mut c);
    let first = start(c, true).await;
    let seed = port_of(&first.node);
    let mut members = vec![first];
    for _ in 1..n {
        let mut c = fast_config(system, &[seed]);
        tune(&mut c);
        members.push(start(c, false).await);
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
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn point_to_point_delivers_once_in_order_within_the_window() {
    let members = cluster("rd-p2p", 2).await;
    let mut consumer = members[1]
        .delivery
        .consumer::<u64>("inbox", &settings())
        .await
        .unwrap();
    // One endpoint per name on a node.
    assert!(matches!(
        members[1]
            .delivery
            .consumer::<u64>("inbox", &settings())
            .await,
        Err(DeliveryError::BadName(_))
    ));
    assert!(matches!(
        members[1].delivery.consumer::<u64>("", &settings()).await,
        Err(DeliveryError::BadName(_))
    ));
    let producer = members[0]
        .delivery
        .point_to_point::<u64>("p2p-test", consumer.reference().clone(), settings())
        .await
        .unwrap();
    for v in 0..200u64 {
        producer.send(&v).await.unwrap();
    }
    // Nothing confirmed yet: the producer sends no further than the window.
    let first = consumer.recv().await.unwrap();
    assert_eq!((first.message, first.producer_id.as_str()), (0, "p2p-test"));
    let status = producer.status().await.unwrap();
    assert!(
        status.producer.in_flight <= u64::from(settings().flow_control_window),
        "{status:?}"
    );
    first.confirm();
    let received = Arc::new(Mutex::new(vec![0u64]));
    let r = received.clone();
    let consuming = tokio::spawn(async move {
        while let Some(d) = consumer.recv().await {
            r.lock().unwrap().push(d.message);
            d.confirm();
        }
    });
    producer
        .send_and_confirm(&200, Duration::from_secs(30))
        .await
        .unwrap();
    wait_for("everything confirmed", || {
        received.lock().unwrap().len() == 201
    })
    .await;
    assert_eq!(*received.lock().unwrap(), (0..=200).collect::<Vec<u64>>());
    let status = producer.status().await.unwrap();
    assert_eq!(status.producer.unconfirmed, 0, "{status:?}");
    assert_eq!(status.producer.confirmed, 201, "{status:?}");
    consuming.abort();
    for m in members {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_pulling_spreads_work_and_moves_a_crashed_workers_messages() {
    let members = cluster("rd-work", 3).await;
    let handled: Arc<Mutex<Vec<(u64, usize)>>> = Arc::default();
    let mut workers = Vec::new();
    let mut tasks = Vec::new();
    for (i, m) in members.iter().enumerate().skip(1) {
        let mut w = m
            .delivery
            .consumer::<u64>("worker", &settings())
            .await
            .unwrap();
        workers.push(w.reference().clone());
        let h = handled.clone();
        tasks.push(tokio::spawn(async move {
            while let Some(d) = w.recv().await {
                // A little work per message (not a wait for an event): the other worker
                // pulls meanwhile.
                tokio::time::sleep(Duration::from_millis(2)).await;
                h.lock().unwrap().push((d.message, i));
                d.confirm();
            }
        }));
    }
    let producer = members[0]
        .delivery
        .work_pulling::<u64>("work-test", workers, settings())
        .await
        .unwrap();
    for v in 0..300u64 {
        producer.send(&v).await.unwrap();
    }
    wait_for("both workers busy", || {
        let h = handled.lock().unwrap();
        h.iter().any(|(_, i)| *i == 1) && h.iter().any(|(_, i)| *i == 2)
    })
    .await;
    // The second worker's node crashes (no hand-over); the cluster downs and removes it.
    members[2].node.stop().await;
    tasks[1].abort();
    for v in 300..600u64 {
        producer.send(&v).await.unwrap();
    }
    wait_for_async("every message confirmed", || {
        let producer = producer.clone();
        async move { producer.status().await.unwrap().producer.unconfirmed == 0 }
    })
    .await;
    let status = producer.status().await.unwrap();
    assert_eq!(status.producer.unconfirmed, 0, "{status:?}");
    assert_eq!(status.workers, 1, "the crashed worker left: {status:?}");
    assert!(status.reassigned > 0, "its messages moved: {status:?}");
    let h = handled.lock().unwrap().clone();
    for v in 0..600u64 {
        assert!(h.iter().any(|(x, _)| *x == v), "{v} never handled");
    }
    let on_survivor: Vec<u64> = h.iter().filter(|(_, i)| *i == 1).map(|(v, _)| *v).collect();
    let mut sorted = on_survivor.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        on_survivor.len(),
        "a worker handles each message once"
    );
    for t in tasks {
        t.abort();
    }
    members[0].node.stop().await;
    members[1].node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_stops_while_its_node_stays_gives_its_messages_to_the_others() {
    let members = cluster("rd-work-gone", 3).await;
    let handled: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut working = members[1]
        .delivery
        .consumer::<u64>("worker", &settings())
        .await
        .unwrap();
    let mut stuck = members[2]
        .delivery
        .consumer::<u64>("worker", &settings())
        .await
        .unwrap();
    let workers = vec![working.reference().clone(), stuck.reference().clone()];
    let h = handled.clone();
    let worker = tokio::spawn(async move {
        while let Some(d) = working.recv().await {
            h.lock().unwrap().push(d.message);
            d.confirm();
        }
    });
    // The second worker takes messages and confirms none, then stops; its node stays.
    let (took, taken) = tokio::sync::oneshot::channel();
    let stuck_worker = tokio::spawn(async move {
        let first = stuck.recv().await.unwrap();
        let _ = took.send(first.message);
        std::future::pending::<()>().await;
    });
    let producer = members[0]
        .delivery
        .work_pulling::<u64>("gone-test", workers, settings())
        .await
        .unwrap();
    for v in 0..200u64 {
        producer.send(&v).await.unwrap();
    }
    let held = taken.await.unwrap();
    stuck_worker.abort();
    let _ = stuck_worker.await;
    // Its endpoint is gone: its node answers so, and what it held goes to the other.
    wait_for_async("every message confirmed", || {
        let producer = producer.clone();
        async move { producer.status().await.unwrap().producer.unconfirmed == 0 }
    })
    .await;
    let status = producer.status().await.unwrap();
    assert!(status.reassigned > 0, "its messages moved: {status:?}");
    let mut h = handled.lock().unwrap().clone();
    assert!(
        h.contains(&held),
        "{held}, taken by the stopped worker, was handled"
    );
    h.sort_unstable();
    assert_eq!(h, (0..200).collect::<Vec<u64>>(), "each handled once");
    worker.abort();
    for m in members {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_producer_started_again_sends_what_was_not_confirmed() {
    use concord::persistence::{InMemoryStore, Stores};
    let members = cluster("rd-p2p-durable", 2).await;
    let stores = Stores::of(InMemoryStore::new());
    let mut consumer = members[1]
        .delivery
        .consumer::<u64>("inbox", &settings())
        .await
        .unwrap();
    let reference = consumer.reference().clone();
    let producer = members[0]
        .delivery
        .point_to_point_durable::<u64>("p2p-durable", reference.clone(), settings(), &stores)
        .await
        .unwrap();
    for v in 0..100u64 {
        producer.send(&v).await.unwrap();
    }
    // The first 30 handled and confirmed; the 31st taken, never confirmed.
    let mut handled = Vec::new();
    for _ in 0..30 {
        let d = consumer.recv().await.unwrap();
        handled.push(d.message);
        d.confirm();
    }
    let held = consumer.recv().await.unwrap();
    assert_eq!(held.message, 30);
    // Stopped as by a crash, and started again from its queue.
    producer.stop().await;
    drop(held);
    let again = members[0]
        .delivery
        .point_to_point_durable::<u64>("p2p-durable", reference, settings(), &stores)
        .await
        .unwrap();
    let status = again.status().await.unwrap();
    assert!(
        (70..=100).contains(&status.producer.unconfirmed),
        "it holds what was not confirmed: {status:?}"
    );
    while handled.len() < 30 || handled.last() != Some(&99) {
        let d = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
            .await
            .expect("the rest comes")
            .unwrap();
        handled.push(d.message);
        d.confirm();
    }
    // Sent again from the first one whose confirmation was not recorded (at most 30),
    // in order, to the end.
    let after: Vec<u64> = handled[30..].to_vec();
    let from = after[0];
    assert!(from <= 30, "{after:?}");
    assert_eq!(after, (from..100).collect::<Vec<u64>>());
    for m in members {
        m.node.stop().await;
    }
}
