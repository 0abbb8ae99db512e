//! Event-sourced consumers of reliable delivery, effectively once, on in-process nodes
//! sharing one in-memory store: each message applied once across the crash of the
//! entity's node, and a message sent again after the entity recovered recognised from the
//! journal and not applied twice.

mod common;

use std::time::Duration;

use common::delivery::{settings, tune};
use common::{fast_config, port_of, wait_for};
use concord::delivery::{ConsumerEnvelope, DeliveryError, ShardingProducer};
use concord::sharding::{EntityContext, ShardRegion, Sharding};
use concord::Node;

/// An event-sourced ledger: its state is every value appended, in order.
struct Ledger;

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
enum LedgerCommand {
    Append(u64),
    Get,
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
struct Appended(u64);

impl concord::persistence::EventSourced for Ledger {
    type Command = LedgerCommand;
    type Event = Appended;
    type State = Vec<u64>;
    type Reply = Vec<u64>;

    async fn handle_command(
        &mut self,
        _ctx: &mut EntityContext,
        state: &Vec<u64>,
        command: LedgerCommand,
    ) -> concord::persistence::Effect<Self> {
        match command {
            LedgerCommand::Append(v) => concord::persistence::Effect::persist(Appended(v))
                .then_reply(|s: &Vec<u64>| s.clone()),
            LedgerCommand::Get => concord::persistence::Effect::reply(state.clone()),
        }
    }

    fn apply_event(state: &mut Vec<u64>, event: &Appended) {
        state.push(event.0);
    }
}

type LedgerRegion = ShardRegion<
    concord::persistence::EventSourcedEntity<concord::delivery::ReliableEventSourced<Ledger>>,
>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_sourced_consumer_applies_each_message_once_across_a_crash_of_its_node() {
    use concord::persistence::{InMemoryStore, Stores};
    // One store shared by the nodes (the journal outlives the crashed node).
    let stores = Stores::of(InMemoryStore::new());
    let system = "rd-es";
    let mut nodes: Vec<(Node, LedgerRegion)> = Vec::new();
    for _ in 0..3 {
        let seeds: Vec<u16> = nodes.first().map(|(n, _)| port_of(n)).into_iter().collect();
        nodes.push(ledger_node(system, &stores, &seeds).await);
    }
    wait_for("all Up", || {
        nodes.iter().all(|(n, _)| {
            n.cluster()
                .view()
                .members_with_status(concord_core::MemberStatus::Up)
                .count()
                == 3
        })
    })
    .await;
    let producer = ShardingProducer::start(
        "ledger-feed",
        nodes[0].0.self_address(),
        nodes[0].1.clone(),
        settings(),
    );
    let entities: Vec<String> = (0..12).map(|i| format!("l{i}")).collect();
    let send = |range: std::ops::Range<u64>| {
        let (producer, entities) = (producer.clone(), entities.clone());
        async move {
            for v in range {
                for e in &entities {
                    loop {
                        match producer.send(e, &LedgerCommand::Append(v)).await {
                            Ok(_) => break,
                            Err(DeliveryError::BufferFull { .. }) => {
                                tokio::time::sleep(Duration::from_millis(20)).await
                            }
                            Err(other) => panic!("{other}"),
                        }
                    }
                }
            }
        }
    };
    send(1..31).await;
    // Crash the third node while messages are in flight.
    let sending = tokio::spawn(send(31..61));
    tokio::time::sleep(Duration::from_millis(200)).await;
    nodes[2].0.stop().await;
    sending.await.unwrap();
    for _ in 0..600 {
        if producer.status().await.unwrap().unconfirmed == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        producer.status().await.unwrap().unconfirmed,
        0,
        "not all confirmed"
    );
    for e in &entities {
        let mut got = None;
        for _ in 0..100 {
            match nodes[0]
                .1
                .entity_ref(e.clone())
                .ask(
                    &ConsumerEnvelope::Direct(LedgerCommand::Get),
                    Duration::from_secs(5),
                )
                .await
            {
                Ok(Ok(r)) => {
                    got = r.reply;
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        // Effectively once: every value applied exactly once, in order.
        assert_eq!(got, Some((1..=60).collect::<Vec<u64>>()), "{e}");
    }
    eprintln!("{:?}", producer.status().await.unwrap());
    nodes[0].0.stop().await;
    nodes[1].0.stop().await;
}

/// A node with the ledger as a reliable consumer on `stores`, joining `seeds` (none: it
/// forms the cluster).
async fn ledger_node(
    system: &str,
    stores: &concord::persistence::Stores,
    seeds: &[u16],
) -> (Node, LedgerRegion) {
    let mut c = fast_config(system, seeds);
    tune(&mut c);
    let (layer, persistence) = concord::persistence::Persistence::layer_with(stores.clone());
    let mut sharding = Sharding::new();
    let region = concord::delivery::init_event_sourced_consumer(
        &persistence,
        &mut sharding,
        "ledger",
        |_| Ledger,
        None,
        settings(),
    );
    let node = Node::builder(c)
        .layer(layer)
        .layer(sharding)
        .start()
        .await
        .unwrap();
    if seeds.is_empty() {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    (node, region)
}

/// Sends a producer's message `seq_nr` (its producer confirmed up to `confirmed`) straight
/// to the ledger `l`, as a resend after a crash would; the consumer's answer.
async fn sequenced(
    region: &LedgerRegion,
    seq_nr: u64,
    confirmed: u64,
) -> concord::delivery::ConsumerReply<Vec<u64>> {
    let message = concord::delivery::Sequenced {
        producer_id: "feed".into(),
        incarnation: concord_core::delivery::Incarnation {
            started_ms: 1,
            generation: 1,
            nonce: 7,
        },
        seq_nr,
        confirmed_seq_nr: confirmed,
        payload: concord::sharding::entity::encode(&LedgerCommand::Append(seq_nr)).unwrap(),
    };
    for _ in 0..100 {
        if let Ok(Ok(r)) = region
            .entity_ref("l")
            .ask(
                &ConsumerEnvelope::Sequenced(message.clone()),
                Duration::from_secs(5),
            )
            .await
        {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the ledger never answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_again_after_the_consumer_recovered_is_recognised_and_not_applied_twice() {
    use concord_core::delivery::ConsumerMessage;
    let stores = concord::persistence::Stores::of(concord::persistence::InMemoryStore::new());
    let (node, region) = ledger_node("rd-once", &stores, &[]).await;
    for seq in 1..=3 {
        let r = sequenced(&region, seq, seq - 1).await;
        assert_eq!(r.reply, Some((1..=seq).collect::<Vec<_>>()));
    }
    // The node crashes before the confirmation of 3 reached the producer; the entity
    // recovers on a new node from the journal.
    node.stop().await;
    let (node, region) = ledger_node("rd-once-2", &stores, &[]).await;
    // The producer sends 3 again (it knows only 2 confirmed): recognised, not applied.
    let again = sequenced(&region, 3, 2).await;
    assert_eq!(again.reply, None, "handled twice");
    assert!(
        matches!(
            again.control,
            Some(ConsumerMessage::Request {
                confirmed_seq_nr: 3,
                ..
            })
        ),
        "{:?}",
        again.control
    );
    let next = sequenced(&region, 4, 2).await;
    assert_eq!(next.reply, Some(vec![1, 2, 3, 4]));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_with_an_idempotency_key_is_applied_once_across_producers_and_a_crash() {
    let stores = concord::persistence::Stores::of(concord::persistence::InMemoryStore::new());
    let (node, region) = ledger_node("rd-key", &stores, &[]).await;
    let first = ShardingProducer::start("a", node.self_address(), region.clone(), settings());
    let ask = |p: &ShardingProducer<_>, key: &'static str, v: u64| {
        let p = p.clone();
        async move {
            p.ask("l", key, &LedgerCommand::Append(v), Duration::from_secs(30))
                .await
                .unwrap()
        }
    };
    assert_eq!(ask(&first, "req-1", 10).await, vec![10]);
    // The same request again: answered as the first time, not applied again.
    assert_eq!(ask(&first, "req-1", 10).await, vec![10]);
    assert_eq!(ask(&first, "req-2", 20).await, vec![10, 20]);
    assert!(matches!(
        first
            .ask("l", "", &LedgerCommand::Get, Duration::from_secs(1))
            .await,
        Err(DeliveryError::BadName(_))
    ));
    // The node crashes; the entity recovers on a new node from the journal, and another
    // producer repeats the first request: the answer comes from the journal.
    node.stop().await;
    let (node, region) = ledger_node("rd-key-2", &stores, &[]).await;
    let second = ShardingProducer::start("b", node.self_address(), region.clone(), settings());
    assert_eq!(ask(&second, "req-1", 10).await, vec![10]);
    let state = region
        .entity_ref("l")
        .ask(
            &ConsumerEnvelope::Direct(LedgerCommand::Get),
            Duration::from_secs(10),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(state.reply, Some(vec![10, 20]), "each request applied once");
    node.stop().await;
}
