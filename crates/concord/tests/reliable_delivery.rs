//! Reliable delivery to sharded entities on in-process nodes over real sockets: every
//! message a producer accepted reaches its entity — across a graceful leave (once, in
//! order: the consumer's memory moves with the entity) and the crash of the entity's node
//! (at least once, no gap, nothing lost); a slow consumer holds its producer to the flow
//! control window; a full buffer refuses with a clear error; `send_and_confirm` answers
//! with the entity's reply; a durable producer stopped like a crash sends the rest once.
//! Event-sourced consumers: `reliable_delivery_effectively_once.rs`.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::delivery::{settings, tune};
use common::{fast_config, port_of, wait_for};
use concord::delivery::{
    init_sharded_consumer, ConsumerEnvelope, DeliveryError, ReliableConsumer, ShardingProducer,
};
use concord::sharding::{Entity, EntityContext, ShardRegion, Sharding};
use concord::{Config, Node};
use concord_core::delivery::DeliverySettings;

/// Every delivery of every incarnation: entity → (value, node port), in delivery order.
type Deliveries = Arc<Mutex<BTreeMap<String, Vec<(u64, u16)>>>>;

/// Records what it is given in the shared log; answers how many it was given here.
struct Log {
    id: String,
    port: Arc<Mutex<u16>>,
    deliveries: Deliveries,
    count: u64,
    slow_ms: u64,
}

impl Entity for Log {
    type Message = u64;
    type Reply = u64;
    type State = u64;

    async fn handle(&mut self, _ctx: &mut EntityContext, value: u64) -> u64 {
        if self.slow_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.slow_ms)).await;
        }
        let port = *self.port.lock().unwrap();
        self.deliveries
            .lock()
            .unwrap()
            .entry(self.id.clone())
            .or_default()
            .push((value, port));
        self.count += 1;
        self.count
    }

    fn hand_off(&mut self) -> Option<u64> {
        Some(self.count)
    }
}

struct Member {
    node: Node,
    region: ShardRegion<ReliableConsumer<Log>>,
}

async fn start(c: Config, deliveries: &Deliveries, first: bool, slow_ms: u64) -> Member {
    let mut sharding = Sharding::new();
    let port = Arc::new(Mutex::new(0u16));
    let (p, d) = (port.clone(), deliveries.clone());
    let region = init_sharded_consumer(
        &mut sharding,
        "log",
        move |id: &str, count: Option<u64>| Log {
            id: id.to_string(),
            port: p.clone(),
            deliveries: d.clone(),
            count: count.unwrap_or(0),
            slow_ms,
        },
        None,
        settings(),
    );
    let node = Node::builder(c).layer(sharding).start().await.unwrap();
    *port.lock().unwrap() = port_of(&node);
    if first {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    Member { node, region }
}

async fn cluster(system: &str, n: usize, deliveries: &Deliveries, slow_ms: u64) -> Vec<Member> {
    let mut c = fast_config(system, &[]);
    tune(&mut c);
    let first = start(c, deliveries, true, slow_ms).await;
    let seed = port_of(&first.node);
    let mut members = vec![first];
    for _ in 1..n {
        let mut c = fast_config(system, &[seed]);
        tune(&mut c);
        members.push(start(c, deliveries, false, slow_ms).await);
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

/// Sends `values` to every entity in turn, retrying while the buffer is full.
async fn send_all(
    producer: &ShardingProducer<ReliableConsumer<Log>>,
    entities: &[String],
    values: std::ops::Range<u64>,
) {
    for v in values {
        for e in entities {
            loop {
                match producer.send(e, &v).await {
                    Ok(_) => break,
                    Err(DeliveryError::BufferFull { .. }) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(other) => panic!("send failed: {other}"),
                }
            }
        }
    }
}

async fn wait_all_confirmed(producer: &ShardingProducer<ReliableConsumer<Log>>) {
    for _ in 0..600 {
        if producer.status().await.unwrap().unconfirmed == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not confirmed: {:?}", producer.status().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_accepted_message_arrives_across_a_graceful_leave_and_a_crash() {
    let deliveries: Deliveries = Arc::default();
    let members = cluster("rd-faults", 4, &deliveries, 0).await;
    let entities: Vec<String> = (0..16).map(|i| format!("log-{i}")).collect();
    let producer = ShardingProducer::start(
        format!("test@{}", members[0].node.self_address()),
        members[0].node.self_address(),
        members[0].region.clone(),
        settings(),
    );
    send_all(&producer, &entities, 1..41).await;
    // Every entity has started somewhere; note who hosts what.
    wait_for("every entity has messages", || {
        deliveries.lock().unwrap().len() == entities.len()
    })
    .await;
    let leaver = port_of(&members[2].node);
    let victim = port_of(&members[3].node);
    // A graceful leave while the producer keeps sending.
    let sending = {
        let (producer, entities) = (producer.clone(), entities.clone());
        tokio::spawn(async move { send_all(&producer, &entities, 41..81).await })
    };
    members[2].node.shutdown().await;
    sending.await.unwrap();
    // The crash of another node (no hand-over) while the producer keeps sending.
    let sending = {
        let (producer, entities) = (producer.clone(), entities.clone());
        tokio::spawn(async move { send_all(&producer, &entities, 81..121).await })
    };
    members[3].node.stop().await;
    sending.await.unwrap();
    wait_all_confirmed(&producer).await;

    let d = deliveries.lock().unwrap().clone();
    let mut crashed_entities = 0;
    for e in &entities {
        let got = &d[e];
        let values: Vec<u64> = got.iter().map(|(v, _)| *v).collect();
        // Nothing lost, never a gap.
        let mut highest = 0;
        for v in &values {
            assert!(*v <= highest + 1, "{e}: a gap before {v}: {values:?}");
            highest = highest.max(*v);
        }
        assert_eq!(highest, 120, "{e}: {values:?}");
        if got.iter().any(|(_, p)| *p == victim) {
            // It lived on the node that crashed: what it handled there and had not
            // confirmed may come again.
            crashed_entities += 1;
        } else {
            assert_eq!(
                values,
                (1..=120).collect::<Vec<_>>(),
                "{e}: once each, in order (it moved only gracefully)"
            );
        }
    }
    let moved_gracefully = d
        .values()
        .filter(|got| got.iter().any(|(_, p)| *p == leaver))
        .count();
    eprintln!(
        "{} entities, {moved_gracefully} on the node that left, {crashed_entities} on the node that crashed; {:?}",
        entities.len(),
        producer.status().await.unwrap()
    );
    for (i, m) in members.iter().enumerate() {
        if i < 2 {
            m.node.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_holds_its_producer_to_the_window_and_a_full_buffer_refuses() {
    let deliveries: Deliveries = Arc::default();
    let members = cluster("rd-slow", 1, &deliveries, 20).await;
    let small = DeliverySettings {
        buffer_size: 30,
        ..settings()
    };
    let producer = ShardingProducer::start(
        "slow-test",
        members[0].node.self_address(),
        members[0].region.clone(),
        small,
    );
    let mut refused = 0;
    let mut accepted = 0u64;
    for v in 1..=100u64 {
        match producer.send("one", &v).await {
            Ok(seq) => {
                accepted += 1;
                assert_eq!(seq, accepted);
            }
            Err(DeliveryError::BufferFull { limit: 30 }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        let s = producer.status().await.unwrap();
        assert!(s.in_flight <= 10, "{s:?}: more in flight than the window");
        assert!(
            s.in_flight + s.window <= 10,
            "{s:?}: the window opened too far"
        );
        assert!(s.unconfirmed <= 30, "{s:?}");
    }
    assert!(refused > 0, "the buffer never filled");
    wait_all_confirmed(&producer).await;
    let values: Vec<u64> = deliveries.lock().unwrap()["one"]
        .iter()
        .map(|(v, _)| *v)
        .collect();
    assert_eq!(values.len() as u64, accepted);
    // The entity's own answer comes back with the confirmation; a direct ask still works.
    let reply = producer
        .send_and_confirm("one", &1_000, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(reply, Some(accepted + 1));
    let direct = members[0]
        .region
        .entity_ref("one")
        .ask(&ConsumerEnvelope::Direct(2_000), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(direct.reply, Some(accepted + 2));
    assert!(direct.control.is_none());
    // Stopped: a caller waiting for a confirmation hears so (at ≥ 20 ms a message, the
    // one behind 20 others is not confirmed yet), and nothing more is taken.
    let held = |s: concord::delivery::ProducerStatus| s.confirmed + s.unconfirmed as u64;
    let before = held(producer.status().await.unwrap());
    for v in 0..20u64 {
        producer.send("one", &(3_000 + v)).await.unwrap();
    }
    let waiting = {
        let producer = producer.clone();
        tokio::spawn(async move {
            producer
                .send_and_confirm("one", &4_000, Duration::from_secs(30))
                .await
        })
    };
    // Its message is held (so the caller waits for the confirmation) before the stop.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while held(producer.status().await.unwrap()) < before + 21 {
        assert!(std::time::Instant::now() < deadline, "never taken");
        tokio::task::yield_now().await;
    }
    producer.stop().await;
    assert_eq!(waiting.await.unwrap(), Err(DeliveryError::Stopped));
    assert_eq!(
        producer.send("one", &5_000).await,
        Err(DeliveryError::Stopped)
    );
    members[0].node.stop().await;
}

/// The durable producer `orders` on `member`'s node, with its queue in `stores`.
async fn orders(
    member: &Member,
    stores: &concord::persistence::Stores,
) -> ShardingProducer<ReliableConsumer<Log>> {
    ShardingProducer::start_durable(
        "orders",
        member.node.self_address(),
        member.region.clone(),
        settings(),
        stores,
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_producer_stopped_like_a_crash_and_started_again_delivers_the_rest_once() {
    use concord::persistence::{InMemoryStore, Stores};
    let deliveries: Deliveries = Arc::default();
    // A slow consumer, so that much is unconfirmed when the producer stops.
    let members = cluster("rd-durable", 1, &deliveries, 10).await;
    let stores = Stores::of(InMemoryStore::new());
    let first = orders(&members[0], &stores).await;
    let entities = ["a".to_string(), "b".to_string()];
    send_all(&first, &entities, 1..101).await;
    wait_for("some delivered", || {
        deliveries
            .lock()
            .unwrap()
            .values()
            .map(Vec::len)
            .sum::<usize>()
            >= 20
    })
    .await;
    let before = first.status().await.unwrap();
    assert!(before.unconfirmed > 50, "{before:?}");
    first.stop().await;
    assert_eq!(first.send("a", &1).await, Err(DeliveryError::Stopped));
    // Started again with the same id: it sends what was never confirmed.
    let second = orders(&members[0], &stores).await;
    let restored = second.status().await.unwrap();
    assert!(restored.unconfirmed > 0, "{restored:?}");
    send_all(&second, &entities, 101..111).await;
    wait_all_confirmed(&second).await;
    let d = deliveries.lock().unwrap().clone();
    for e in &entities {
        let values: Vec<u64> = d[e].iter().map(|(v, _)| *v).collect();
        // The consumer still knows what it handled: nothing twice, nothing lost.
        assert_eq!(values, (1..=110).collect::<Vec<_>>(), "{e}");
    }
    // A second producer with the same id while the first runs: its first write fails and
    // it stops; the first goes on.
    let third = orders(&members[0], &stores).await;
    second.send("a", &111).await.unwrap();
    match third.send("a", &112).await {
        Err(DeliveryError::Store(why)) => assert!(why.contains("writing"), "{why}"),
        other => panic!("the second writer was not refused: {other:?}"),
    }
    assert_eq!(third.send("a", &113).await, Err(DeliveryError::Stopped));
    second.send("a", &112).await.unwrap();
    wait_all_confirmed(&second).await;
    members[0].node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_with_an_idempotency_key_is_handled_once_whichever_producer_repeats_it() {
    let deliveries: Deliveries = Arc::default();
    let members = cluster("rd-key-plain", 2, &deliveries, 0).await;
    let producers: Vec<ShardingProducer<ReliableConsumer<Log>>> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            ShardingProducer::start(
                format!("asker-{i}"),
                m.node.self_address(),
                m.region.clone(),
                settings(),
            )
        })
        .collect();
    let t = Duration::from_secs(30);
    assert_eq!(producers[0].ask("log-k", "req-1", &7, t).await.unwrap(), 1);
    assert_eq!(producers[0].ask("log-k", "req-1", &7, t).await.unwrap(), 1);
    assert_eq!(producers[1].ask("log-k", "req-1", &7, t).await.unwrap(), 1);
    assert_eq!(producers[1].ask("log-k", "req-2", &8, t).await.unwrap(), 2);
    let handled: Vec<u64> = deliveries.lock().unwrap()["log-k"]
        .iter()
        .map(|(v, _)| *v)
        .collect();
    assert_eq!(handled, vec![7, 8], "each request handled once");
    for m in members {
        m.node.stop().await;
    }
}
