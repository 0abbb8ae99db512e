//! Persistence stores and persistent entities: the store contract (conditional appends,
//! replay, deletion, snapshots, durable-state revisions, events by slices) on the
//! in-memory store and on a real PostgreSQL server started by the test; concurrent writers
//! of one persistence id racing through PostgreSQL (never two interleaved histories); the
//! events-by-slices stream under concurrent commits (nothing missed, nothing twice); and
//! an event-sourced counter on a node whose journal is PostgreSQL, recovered by a new node
//! after the first one stopped.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use common::postgres::PgServer;
use concord::persistence::{
    DurableStateStore, EventsQuery, InMemoryStore, Journal, Offset, Persistence, PersistenceConfig,
    PersistenceError, PostgresStore, Snapshot, SnapshotStore,
};
use concord::sharding::Sharding;
use concord::Node;
use concord_core::persistence::{AtomicWrite, PersistenceId};

fn pid(t: &str, id: &str) -> PersistenceId {
    PersistenceId::new(t, id).unwrap()
}

fn write(p: &PersistenceId, first: u64, events: &[&str]) -> AtomicWrite {
    AtomicWrite::new(
        p.clone(),
        first,
        events.iter().map(|e| e.as_bytes().to_vec()).collect(),
        1_700_000_000_000,
    )
    .unwrap()
}

fn all_slices(t: &str, after: Offset) -> EventsQuery {
    EventsQuery {
        entity_type: t.into(),
        slices: 0..=1023,
        after,
        limit: 1000,
    }
}

/// What every store must do.
async fn contract<S: Journal + SnapshotStore + DurableStateStore>(s: &S) {
    let a = pid("order", "a");
    let b = pid("order", "b");
    // Appends: the next number only, all events of a write or none.
    s.append(write(&a, 1, &["a1", "a2"])).await.unwrap();
    let conflict = s.append(write(&a, 2, &["x"])).await.unwrap_err();
    assert_eq!(
        conflict,
        PersistenceError::Conflict {
            persistence_id: "order|a".into(),
            seq_nr: 2
        }
    );
    assert!(
        matches!(
            s.append(write(&a, 5, &["gap"])).await,
            Err(PersistenceError::Conflict { .. })
        ),
        "a gap is refused"
    );
    assert!(matches!(
        s.append(write(&a, 1, &["y", "z", "w"])).await,
        Err(PersistenceError::Conflict { .. })
    ));
    s.append(write(&a, 3, &["a3"])).await.unwrap();
    s.append(write(&b, 1, &["b1"])).await.unwrap();
    assert_eq!(s.highest_seq_nr(&a).await.unwrap(), 3);
    assert_eq!(s.highest_seq_nr(&pid("order", "none")).await.unwrap(), 0);
    let replayed: Vec<(u64, Vec<u8>)> = s
        .replay(&a, 2, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq_nr, e.payload))
        .collect();
    assert_eq!(replayed, vec![(2, b"a2".to_vec()), (3, b"a3".to_vec())]);
    assert_eq!(s.replay(&a, 1, 1).await.unwrap().len(), 1, "max");
    let (events, highest) = s.replay_with_highest(&a, 2, 10).await.unwrap();
    assert_eq!((events.len(), events[0].seq_nr, highest), (2, 2, 3));
    let (events, highest) = s.replay_with_highest(&a, 9, 10).await.unwrap();
    assert_eq!((events.len(), highest), (0, 3));
    let (events, highest) = s
        .replay_with_highest(&pid("order", "none"), 1, 10)
        .await
        .unwrap();
    assert_eq!((events.len(), highest), (0, 0));
    assert_eq!(
        s.replay_with_highest(&a, 1, 2).await.unwrap().0.len(),
        2,
        "max"
    );

    // Events by slices: every event once, resumable after any offset.
    let stream = s
        .events_by_slices(&all_slices("order", Offset::START))
        .await
        .unwrap();
    let seen: Vec<(String, u64)> = stream
        .iter()
        .map(|e| (e.event.persistence_id.to_string(), e.event.seq_nr))
        .collect();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(stream.windows(2).all(|w| w[0].offset < w[1].offset));
    let rest = s
        .events_by_slices(&all_slices("order", stream[1].offset))
        .await
        .unwrap();
    assert_eq!(rest, stream[2..].to_vec());
    let slice_of_b = b.slice();
    let only_b = s
        .events_by_slices(&EventsQuery {
            slices: slice_of_b..=slice_of_b,
            ..all_slices("order", Offset::START)
        })
        .await
        .unwrap();
    assert!(only_b
        .iter()
        .all(|e| e.event.persistence_id.slice() == slice_of_b));
    assert!(only_b.iter().any(|e| e.event.persistence_id == b));
    assert!(s
        .events_by_slices(&all_slices("other", Offset::START))
        .await
        .unwrap()
        .is_empty());

    // Deleting events keeps the highest number: the next write still must be 4.
    Journal::delete_to(s, &a, 3).await.unwrap();
    assert!(s.replay(&a, 1, 10).await.unwrap().is_empty());
    assert_eq!(s.highest_seq_nr(&a).await.unwrap(), 3);
    assert!(s.append(write(&a, 1, &["again"])).await.is_err());
    s.append(write(&a, 4, &["a4"])).await.unwrap();

    // Snapshots: the newest loads; deletion up to a number.
    for seq in [2, 4] {
        s.save(
            &a,
            Snapshot {
                seq_nr: seq,
                timestamp_ms: 7,
                payload: vec![seq as u8],
            },
        )
        .await
        .unwrap();
    }
    assert_eq!(s.load_latest(&a).await.unwrap().unwrap().seq_nr, 4);
    SnapshotStore::delete_to(s, &a, 4).await.unwrap();
    assert_eq!(s.load_latest(&a).await.unwrap(), None);

    // Durable state: revisions in order, each only after the previous.
    let c = pid("cart", "c");
    assert_eq!(s.get(&c).await.unwrap().revision, 0);
    s.upsert(&c, 1, Some(b"one".to_vec())).await.unwrap();
    assert!(matches!(
        s.upsert(&c, 1, Some(b"other".to_vec())).await,
        Err(PersistenceError::Conflict { seq_nr: 1, .. })
    ));
    let skip = s.upsert(&c, 3, Some(b"skip".to_vec())).await;
    assert!(
        matches!(skip, Err(PersistenceError::Conflict { .. })),
        "{skip:?}"
    );
    s.upsert(&c, 2, None).await.unwrap();
    let st = s.get(&c).await.unwrap();
    assert_eq!((st.revision, st.payload), (2, None));
    s.upsert(&c, 3, Some(b"three".to_vec())).await.unwrap();
    assert_eq!(s.get(&c).await.unwrap().payload, Some(b"three".to_vec()));
    assert!(matches!(
        s.upsert(&c, 0, None).await,
        Err(PersistenceError::Rejected { .. })
    ));
}

#[tokio::test]
async fn the_in_memory_store_keeps_the_contract() {
    contract(&InMemoryStore::new()).await;
}

/// Writers that each read the highest number and append after it, racing: every stored
/// event must name the number its writer read as the one before it.
async fn racing_writers(store: Arc<PostgresStore>, id: &str, writers: usize, rounds: usize) {
    let p = pid("race", id);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let store = store.clone();
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let (mut won, mut lost) = (0, 0);
            for _ in 0..rounds {
                let h = store.highest_seq_nr(&p).await.unwrap();
                let payloads = vec![
                    format!("{w}:{h}").into_bytes(),
                    format!("{w}:{h}+").into_bytes(),
                ];
                match store
                    .append(AtomicWrite::new(p.clone(), h + 1, payloads, 0).unwrap())
                    .await
                {
                    Ok(()) => won += 1,
                    Err(PersistenceError::Conflict { .. }) => lost += 1,
                    Err(e) => panic!("{e}"),
                }
            }
            (won, lost)
        }));
    }
    let mut total_won = 0;
    let mut total_lost = 0;
    for t in tasks {
        let (w, l) = t.await.unwrap();
        total_won += w;
        total_lost += l;
    }
    let events = store.replay(&p, 1, 100_000).await.unwrap();
    assert_eq!(events.len(), 2 * total_won, "every won write stored whole");
    for (i, pair) in events.chunks(2).enumerate() {
        let first = String::from_utf8(pair[0].payload.clone()).unwrap();
        let second = String::from_utf8(pair[1].payload.clone()).unwrap();
        let (writer, read) = first.split_once(':').unwrap();
        assert_eq!(pair[0].seq_nr, 2 * i as u64 + 1);
        assert_eq!(
            read.parse::<u64>().unwrap(),
            pair[0].seq_nr - 1,
            "written after what it read"
        );
        assert_eq!(
            second,
            format!("{writer}:{read}+"),
            "one write's events together"
        );
    }
    assert!(total_lost > 0, "the writers did race ({total_won} won)");
}

/// Appenders of many ids commit concurrently while a reader follows the stream by offset:
/// it must see every event exactly once.
async fn stream_under_concurrent_commits(store: Arc<PostgresStore>) {
    let mut tasks = Vec::new();
    for w in 0..6u64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..40u64 {
                let p = pid("stream", &format!("{w}-{}", n % 5));
                let h = store.highest_seq_nr(&p).await.unwrap();
                store
                    .append(AtomicWrite::new(p, h + 1, vec![vec![w as u8]], 0).unwrap())
                    .await
                    .unwrap();
            }
        }));
    }
    let mut seen: BTreeMap<(String, u64), usize> = BTreeMap::new();
    let mut offset = Offset::START;
    let mut done = false;
    loop {
        let page = store
            .events_by_slices(&EventsQuery {
                limit: 17,
                ..all_slices("stream", offset)
            })
            .await
            .unwrap();
        for e in &page {
            assert!(
                e.offset > offset,
                "{} after {}; page {:?}",
                e.offset,
                offset,
                page.iter()
                    .map(|e| e.offset.to_string())
                    .collect::<Vec<_>>()
            );
            offset = e.offset;
            *seen
                .entry((e.event.persistence_id.to_string(), e.event.seq_nr))
                .or_default() += 1;
        }
        if done && page.is_empty() {
            break;
        }
        if !done && tasks.iter().all(|t| t.is_finished()) {
            done = true;
        }
        if page.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(seen.len(), 240, "every event");
    assert!(seen.values().all(|n| *n == 1), "once each");
    let per_id: BTreeSet<u64> = seen
        .keys()
        .filter(|k| k.0 == "stream|0-0")
        .map(|k| k.1)
        .collect();
    assert_eq!(per_id, (1..=8).collect());
}

use common::counter_entity::{Cmd, Counter};

/// A one-node cluster with sharding and the persistence layer on `url` (from a file).
async fn counter_node(url_file: &std::path::Path) -> (Node, CounterRegion) {
    let mut c = common::fast_config("persist", &[]);
    let mut p = PersistenceConfig {
        store: "postgres".into(),
        snapshot_every: 7,
        ..Default::default()
    };
    p.postgres.url_file = Some(url_file.to_path_buf());
    c.set_section(&p).unwrap();
    let (layer, persistence) = Persistence::layer();
    let mut sharding = Sharding::new();
    let region = persistence.init_event_sourced(&mut sharding, "counter", |_| Counter, None);
    let node = Node::builder(c)
        .layer(layer)
        .layer(sharding)
        .start()
        .await
        .unwrap();
    let me = node.self_address().clone();
    node.cluster().join(me).await.unwrap();
    (node, region)
}

type CounterRegion =
    concord::sharding::ShardRegion<concord::persistence::EventSourcedEntity<Counter>>;

/// Asks `id`, again while sharding is not ready (the node just started); the entity's
/// answer as it is.
async fn ask(region: &CounterRegion, id: &str, cmd: Cmd) -> Result<i64, PersistenceError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match region
            .entity_ref(id)
            .ask(&cmd, Duration::from_secs(10))
            .await
        {
            Ok(r) => return r,
            Err(e) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "sharding never answered: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn entities_recover_on_a_new_node(server: &PgServer) {
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("pg-url");
    std::fs::write(&url_file, server.url()).unwrap();
    let (node, region) = counter_node(&url_file).await;
    let mut expected = BTreeMap::new();
    for i in 0..60i64 {
        let id = format!("c{}", i % 6);
        let v = ask(&region, &id, Cmd::Add(i)).await;
        let total = expected.entry(id).or_insert(0i64);
        *total += i;
        assert_eq!(v, Ok(*total));
    }
    node.shutdown().await;
    // A new node (the old one is gone with its memory): every counter recovers.
    let (node, region) = counter_node(&url_file).await;
    for (id, total) in &expected {
        let v = ask(&region, id, Cmd::Get).await;
        assert_eq!(v, Ok(*total), "{id}");
    }
    events_route_and_cli(&node, &expected).await;
    node.shutdown().await;
}

/// `GET /persistence/events/counter` as pages, as a resumed event stream, and through
/// `concord events`: the 60 increments, their values summing to each counter's total.
async fn events_route_and_cli(node: &Node, totals: &BTreeMap<String, i64>) {
    let addr = node.management_addr().unwrap();
    let client = common::client::ManagementClient::new(&format!("http://{addr}"));
    let mut events = Vec::new();
    let mut from = "0".to_string();
    loop {
        let page = client
            .events_page("counter", &from, "0-1023", 7)
            .await
            .unwrap();
        if page.events.is_empty() {
            break;
        }
        from = page.next.clone();
        events.extend(page.events);
    }
    assert_eq!(events.len(), 60);
    let mut sums: BTreeMap<String, i64> = BTreeMap::new();
    for e in &events {
        let id = e["persistenceId"]
            .as_str()
            .unwrap()
            .trim_start_matches("counter|");
        *sums.entry(id.to_string()).or_default() += e["event"].as_i64().unwrap();
    }
    assert_eq!(&sums, totals);
    assert!(
        client
            .events_page("counter", "x", "0-1023", 7)
            .await
            .is_err(),
        "a bad offset is 400"
    );

    // The event stream, resumed after the 50th event with Last-Event-ID.
    let resume_after = events[49]["offset"].as_str().unwrap().to_string();
    let mut resp = reqwest::Client::new()
        .get(format!("http://{addr}/persistence/events/counter"))
        .header("accept", "text/event-stream")
        .header("last-event-id", &resume_after)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let mut text = String::new();
    let mut ids = Vec::new();
    while ids.len() < 10 {
        let chunk = tokio::time::timeout(Duration::from_secs(30), resp.chunk())
            .await
            .expect("the stream sends the remaining events")
            .unwrap()
            .expect("the stream stays open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        ids = text
            .lines()
            .filter_map(|l| l.strip_prefix("id: ").or_else(|| l.strip_prefix("id:")))
            .map(|s| s.trim().to_string())
            .collect();
    }
    let expected: Vec<String> = events[50..]
        .iter()
        .map(|e| e["offset"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, expected);

    // The CLI prints one JSON object per line.
    let lines = common::events_cli(&format!("http://{addr}"), "counter", 5).await;
    assert_eq!(lines, events[..5].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_store_keeps_the_contract_under_racing_writers_and_recovers_entities() {
    let server = tokio::task::spawn_blocking(PgServer::start).await.unwrap();
    let store = Arc::new(
        PostgresStore::connect(&server.url(), 8, Duration::from_secs(10))
            .await
            .unwrap(),
    );
    contract(store.as_ref()).await;
    // The schema is created only when absent: a second connect finds it.
    PostgresStore::connect(&server.url(), 2, Duration::from_secs(10))
        .await
        .unwrap();
    racing_writers(store.clone(), "1", 8, 40).await;
    // More writers than batch workers, long enough that a worker often holds back a second
    // write of the id for its next batch while another waits on the queue (this once hung:
    // the held write waited for the queue's lock, every writer for its answer).
    tokio::time::timeout(
        Duration::from_secs(120),
        racing_writers(store.clone(), "2", 24, 60),
    )
    .await
    .expect("racing writers all answered");
    stream_under_concurrent_commits(store.clone()).await;
    entities_recover_on_a_new_node(&server).await;
    let bad =
        PostgresStore::connect("host=/nonexistent-dir user=x", 1, Duration::from_secs(2)).await;
    assert!(matches!(bad, Err(PersistenceError::Unavailable { .. })));
}
