//! Persistence on the built-in replicated journal (`store = "replicated"`): three
//! in-process nodes, event-sourced counters spread over them, a node leaving — every
//! acknowledged increment is recovered on the nodes that remain, and the events-by-slices
//! stream (`GET /persistence/events/counter`, `concord events`), read before and resumed
//! after the leave, holds every increment; and a second writer of one persistence id on
//! another node fences the first, whose next append is refused; and three nodes scaled
//! down to one, one node after the other, the last answering with every increment.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{fast_config, port_of, wait_for};
use concord::persistence::{Persistence, PersistenceConfig, PersistenceError, Snapshot};
use concord::sharding::Sharding;
use concord_core::persistence::{AtomicWrite, PersistenceId};
use concord_core::MemberStatus;

use common::counter_entity::{Cmd, Counter};

type Region = concord::sharding::ShardRegion<concord::persistence::EventSourcedEntity<Counter>>;

async fn node(seeds: &[u16]) -> (concord::Node, Region, Persistence) {
    node_with(seeds, |_| {}).await
}

async fn node_with(
    seeds: &[u16],
    tune: impl FnOnce(&mut concord::Config),
) -> (concord::Node, Region, Persistence) {
    let mut c = fast_config("journal", seeds);
    c.set_section(&PersistenceConfig {
        store: "replicated".into(),
        snapshot_every: 5,
        write_timeout: Duration::from_secs(2),
        ..Default::default()
    })
    .unwrap();
    tune(&mut c);
    let (layer, persistence) = Persistence::layer();
    let mut sharding = Sharding::new();
    let region = persistence.init_event_sourced(&mut sharding, "counter", |_| Counter, None);
    let builder = concord::Node::builder(c).layer(layer).layer(sharding);
    let n = if seeds.is_empty() {
        let n = builder.start().await.unwrap();
        let me = n.self_address().clone();
        n.cluster().join(me).await.unwrap();
        n
    } else {
        builder.start().await.unwrap()
    };
    (n, region, persistence)
}

/// Asks `id`, again while sharding cannot deliver yet (the entity's answer as it is: a
/// store error is not retried, an increment may have been stored).
async fn ask(region: &Region, id: &str, cmd: Cmd) -> Result<i64, PersistenceError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match region
            .entity_ref(id)
            .ask(&cmd, Duration::from_secs(10))
            .await
        {
            Ok(answer) => return answer,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "sharding never answered: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Three nodes (the first joins itself, the others it) with nothing that downs anyone
/// (`downing-provider = "none"`).
async fn three_without_downing() -> [(concord::Node, Region, Persistence); 3] {
    let no_downing = |c: &mut concord::Config| c.cluster.downing_provider = "none".into();
    let a = node_with(&[], no_downing).await;
    let seed = port_of(&a.0);
    let b = node_with(&[seed], no_downing).await;
    let c = node_with(&[seed], no_downing).await;
    [a, b, c]
}

/// Waits until each of `nodes` sees all of them Up and they report their journal's
/// handoffs done.
async fn wait_up_and_settled(nodes: &[&concord::Node]) {
    for n in nodes {
        wait_for("every member Up", || {
            n.cluster()
                .view()
                .members_with_status(MemberStatus::Up)
                .count()
                == nodes.len()
        })
        .await;
    }
    wait_journal_settled(nodes).await;
}

/// Waits until `nodes` report their journal's handoffs done (a replica answers once they
/// are).
async fn wait_journal_settled(nodes: &[&concord::Node]) {
    let addr = nodes[0].management_addr().unwrap();
    let names: Vec<String> = nodes.iter().map(|n| n.self_address().to_string()).collect();
    common::wait_for_async("journal handoffs done", || {
        let names = names.clone();
        async move { journal_settled(addr, &names).await }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_survive_a_node_leaving_and_a_second_writer_is_fenced() {
    let (a, ra, pa) = node(&[]).await;
    let seed = port_of(&a);
    let (b, rb, pb) = node(&[seed]).await;
    let (c, _rc, _pc) = node(&[seed]).await;
    wait_up_and_settled(&[&a, &b, &c]).await;
    let mut totals = BTreeMap::new();
    for i in 1..=60i64 {
        let id = format!("c{}", i % 12);
        let total = totals.entry(id.clone()).or_insert(0i64);
        *total += i;
        assert_eq!(ask(&ra, &id, Cmd::Add(i)).await, Ok(*total), "{id}");
    }
    // The node's share of the journal is on disk, and its gauge says how much; its
    // commits are timed.
    let addr = a.management_addr().unwrap();
    let label = format!("node=\"{}\"", a.self_address());
    common::wait_for_async("the journal's disk gauge and commit summary", || {
        let label = label.clone();
        async move {
            let Ok(r) = reqwest::get(format!("http://{addr}/metrics")).await else {
                return false;
            };
            r.text().await.is_ok_and(|t| {
                let positive = |name: &str| {
                    t.lines().any(|l| {
                        l.starts_with(name)
                            && l.contains(&label)
                            && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) > Some(0.0)
                    })
                };
                positive("concord_journal_disk_bytes")
                    && positive("concord_journal_commit_seconds_count")
            })
        }
    })
    .await;
    let mut stream = StreamReader::new(&b);
    stream.read_until_every_event(&totals, 60).await;
    // The CLI reads the same stream from its start.
    let url = format!("http://{}", b.management_addr().unwrap());
    let lines = common::events_cli(&url, "counter", 5).await;
    assert_eq!(lines, stream.events[..5].to_vec());
    // c leaves: its entities and its share of the journal move to a and b.
    c.shutdown().await;
    wait_for("two members", || a.cluster().view().members.len() == 2).await;
    wait_journal_settled(&[&a, &b]).await;
    for (id, total) in &totals {
        assert_eq!(
            ask(&rb, id, Cmd::Get).await,
            Ok(*total),
            "{id} after the leave"
        );
    }
    // More increments after the leave; the stream, resumed where it was, has them too.
    for i in 61..=72i64 {
        let id = format!("c{}", i % 12);
        let total = totals.entry(id.clone()).or_insert(0i64);
        *total += i;
        assert_eq!(ask(&rb, &id, Cmd::Add(i)).await, Ok(*total), "{id}");
    }
    stream.read_until_every_event(&totals, 72).await;

    // Two writers of one persistence id: the one that recovered last wins.
    let journal = |p: &Persistence| p.stores().expect("started: its node answered").journal;
    let (ja, jb) = (journal(&pa), journal(&pb));
    let pid = PersistenceId::new("raw", "x").unwrap();
    let w = |first: u64, tag: &str| {
        AtomicWrite::new(pid.clone(), first, vec![tag.as_bytes().to_vec()], 0).unwrap()
    };
    let (_, h) = ja.replay_with_highest(&pid, 1, 10).await.unwrap();
    assert_eq!(h, 0);
    ja.append(w(1, "a1")).await.unwrap();
    let (events, h) = jb.replay_with_highest(&pid, 1, 10).await.unwrap();
    assert_eq!((events.len(), h), (1, 1));
    assert!(matches!(
        ja.append(w(2, "stale")).await,
        Err(PersistenceError::Conflict { seq_nr: 2, .. })
    ));
    jb.append(w(2, "b2")).await.unwrap();
    let events = ja.replay(&pid, 1, 10).await.unwrap();
    let payloads: Vec<Vec<u8>> = events.into_iter().map(|e| e.payload).collect();
    assert_eq!(payloads, vec![b"a1".to_vec(), b"b2".to_vec()]);
    // A recovery from the newest snapshot is one query: the snapshot and the events after it.
    let snapshots = pb.stores().expect("started").snapshots;
    let snapshot = Snapshot {
        seq_nr: 1,
        timestamp_ms: 1,
        payload: b"state at 1".to_vec(),
    };
    snapshots.save(&pid, snapshot.clone()).await.unwrap();
    let start = ja.replay_from_snapshot(&pid, 10).await.unwrap();
    let start = start.expect("the replicated journal keeps the snapshots");
    assert_eq!(start.snapshot, Some(snapshot));
    let after: Vec<(u64, Vec<u8>)> = start
        .events
        .into_iter()
        .map(|e| (e.seq_nr, e.payload))
        .collect();
    assert_eq!((after, start.highest), (vec![(2, b"b2".to_vec())], 2));
    // A log of 3 MB (30 writes of 100 kB) is recovered and read on another node page after
    // page: every page fits in a frame (a 3 MB promise would be dropped as too large).
    let big = PersistenceId::new("raw", "big").unwrap();
    let payload = |i: u64| vec![i as u8; 100_000];
    ja.replay_with_highest(&big, 1, 10).await.unwrap();
    for i in 1..=30u64 {
        let write = AtomicWrite::new(big.clone(), i, vec![payload(i)], 0).unwrap();
        ja.append(write).await.unwrap();
    }
    let (mut events, h) = jb.replay_with_highest(&big, 1, 100_000).await.unwrap();
    assert_eq!(h, 30);
    assert!(
        !events.is_empty() && events.len() < 30,
        "{} in one page",
        events.len()
    );
    while events.len() < 30 {
        let next = events.len() as u64 + 1;
        let page = jb.replay(&big, next, 100_000).await.unwrap();
        assert!(!page.is_empty(), "the page from {next}");
        events.extend(page);
    }
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            (e.seq_nr, &e.payload),
            (i as u64 + 1, &payload(i as u64 + 1))
        );
    }
    // A write larger than a promise can carry is refused before anything is stored.
    let too_big = AtomicWrite::new(big.clone(), 31, vec![vec![0; 600_000]], 0).unwrap();
    assert!(matches!(
        jb.append(too_big).await,
        Err(PersistenceError::Rejected { .. })
    ));
    // A node that joins now takes its share of that log by handoff, in pages that each fit
    // in a frame (one page of 256 records would be 3 MB): its handoffs end.
    let (d, _rd, pd) = node(&[seed]).await;
    wait_for("d Up", || {
        a.cluster()
            .view()
            .members_with_status(MemberStatus::Up)
            .count()
            == 3
    })
    .await;
    wait_journal_settled(&[&a, &b, &d]).await;
    let (events, h) = journal(&pd)
        .replay_with_highest(&big, 1, 100_000)
        .await
        .unwrap();
    assert_eq!((h, events.first().map(|e| e.seq_nr)), (30, Some(1)));
    d.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}

/// A reader of `GET /persistence/events/counter` on one node, page after page, resuming
/// after the last offset it read.
struct StreamReader {
    client: common::client::ManagementClient,
    from: String,
    /// Every event read, in order (the replicated store's stream is at least once).
    events: Vec<serde_json::Value>,
}

impl StreamReader {
    fn new(node: &concord::Node) -> StreamReader {
        let addr = node.management_addr().unwrap();
        StreamReader {
            client: common::client::ManagementClient::new(&format!("http://{addr}")),
            from: "0".into(),
            events: Vec::new(),
        }
    }

    /// Reads on (the stream shows events `events-delay` after they are written) until
    /// `count` distinct events are read and their increments add up to `totals`; offsets
    /// rise page after page.
    async fn read_until_every_event(&mut self, totals: &BTreeMap<String, i64>, count: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            // A replica still taking over a segment answers unavailable: read again.
            if let Ok(page) = self
                .client
                .events_page("counter", &self.from, "0-1023", 7)
                .await
            {
                for e in &page.events {
                    let offset: concord::persistence::Offset =
                        e["offset"].as_str().unwrap().parse().unwrap();
                    let last: concord::persistence::Offset = self.from.parse().unwrap();
                    assert!(offset > last, "offsets rise: {offset} after {last}");
                    self.from = offset.to_string();
                    self.events.push(e.clone());
                }
            }
            let mut seen = BTreeMap::new();
            for e in &self.events {
                let id = e["persistenceId"].as_str().unwrap();
                seen.insert(
                    (
                        id.trim_start_matches("counter|").to_string(),
                        e["seqNr"].as_u64(),
                    ),
                    e["event"].as_i64().unwrap(),
                );
            }
            let mut sums: BTreeMap<String, i64> = BTreeMap::new();
            for ((id, _), v) in &seen {
                *sums.entry(id.clone()).or_default() += v;
            }
            if seen.len() == count && &sums == totals {
                return;
            }
            assert!(
                seen.len() <= count && std::time::Instant::now() < deadline,
                "the stream holds {} events, {count} written",
                seen.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// True once the nodes named `nodes` report no pending segment, no outgoing handoff and
/// no incomplete copy (the gauges of `GET /metrics`, shared by the in-process nodes).
async fn journal_settled(addr: std::net::SocketAddr, nodes: &[String]) -> bool {
    let Ok(r) = reqwest::get(format!("http://{addr}/metrics")).await else {
        return false;
    };
    let Ok(text) = r.text().await else {
        return false;
    };
    let gauges: Vec<&str> = text
        .lines()
        .filter(|l| {
            (l.starts_with("concord_journal_pending_segments")
                || l.starts_with("concord_journal_outgoing_handoffs")
                || l.starts_with("concord_journal_incomplete_segments"))
                && nodes.iter().any(|n| l.contains(&format!("node=\"{n}\"")))
        })
        .collect();
    gauges.len() == 3 * nodes.len() && gauges.iter().all(|l| l.ends_with(" 0"))
}

/// A split brain forced with link faults while nothing downs anyone (`downing-provider =
/// "none"`): the writer on the minority side cannot write, the majority side's new writer
/// fences it, and after the heal the old writer is refused — the log holds one history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_split_brain_the_second_writer_is_refused() {
    let [(a, _ra, pa), (b, _rb, pb), (c, _rc, pc)] = three_without_downing().await;
    // The ring's first handoffs done on all three (during the partition a could not send
    // its part).
    wait_up_and_settled(&[&a, &b, &c]).await;
    let stores = |p: &Persistence| p.stores().unwrap().journal;
    let (ja, jb, jc) = (stores(&pa), stores(&pb), stores(&pc));
    let pid = PersistenceId::new("raw", "split").unwrap();
    let w = |first: u64, tag: &str| {
        AtomicWrite::new(pid.clone(), first, vec![tag.as_bytes().to_vec()], 0).unwrap()
    };
    ja.replay_with_highest(&pid, 1, 10).await.unwrap();
    ja.append(w(1, "a1")).await.unwrap();

    // a | b c, both ways; nobody is downed.
    let cut = |from: &concord::Node, to: &concord::Node, on: bool| {
        let f = concord::remote::LinkFaults {
            blackhole_outbound: on,
            blackhole_inbound: on,
            ..Default::default()
        };
        from.transport().set_faults(to.self_address().clone(), f);
    };
    for (x, y) in [(&a, &b), (&a, &c), (&b, &a), (&c, &a)] {
        cut(x, y, true);
    }
    // The majority side's writer recovers (fencing a) and writes.
    let (events, h) = jb.replay_with_highest(&pid, 1, 10).await.unwrap();
    assert_eq!((events.len(), h), (1, 1));
    jb.append(w(2, "b2")).await.unwrap();
    // The minority side's writer cannot reach a majority: refused, nothing chosen.
    let refused = ja.append(w(2, "a2")).await;
    assert!(
        matches!(
            refused,
            Err(PersistenceError::Unavailable { .. } | PersistenceError::Conflict { .. })
        ),
        "{refused:?}"
    );
    for (x, y) in [(&a, &b), (&a, &c), (&b, &a), (&c, &a)] {
        cut(x, y, false);
    }
    // Healed: the old writer is refused for good; the log is the winner's.
    let again = ja.append(w(2, "a2")).await;
    assert!(
        matches!(again, Err(PersistenceError::Conflict { .. })),
        "{again:?}"
    );
    let (events, h) = jc.replay_with_highest(&pid, 1, 10).await.unwrap();
    let payloads: Vec<Vec<u8>> = events.into_iter().map(|e| e.payload).collect();
    assert_eq!((payloads, h), (vec![b"a1".to_vec(), b"b2".to_vec()], 2));
    for n in [a, b, c] {
        n.shutdown().await;
    }
}

/// `GET /persistence/journal/waits` of the node whose management API is at `base`.
async fn journal_waits(base: &str) -> Vec<serde_json::Value> {
    let v = common::get_json(&format!("{base}/persistence/journal/waits")).await;
    v["waits"].as_array().expect("a list of waits").clone()
}

/// `POST /persistence/journal/give-up` naming `lost`, to the node at `base`.
async fn give_up(base: &str, lost: &[String]) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/persistence/journal/give-up"))
        .json(&serde_json::json!({ "lost": lost }))
        .send()
        .await
        .unwrap()
}

/// The operator's routes: the waits after a ring change (none once the handoffs ended),
/// and a give-up that refuses a member that is up and takes an address that is not one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_journal_routes_show_the_waits_and_give_up_only_replicas_not_up() {
    let (a, _ra, _pa) = node(&[]).await;
    wait_journal_settled(&[&a]).await;
    let base = format!("http://{}", a.management_addr().unwrap());
    assert!(journal_waits(&base).await.is_empty());
    let r = give_up(&base, &[a.self_address().to_string()]).await;
    assert_eq!(r.status(), 400);
    let why = r.text().await.unwrap();
    assert!(why.contains("member of the ring"), "{why}");
    let r = give_up(&base, &["concord://journal@127.0.0.1:1".into()]).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"released": [], "told": 0}));
    a.shutdown().await;
}

/// Two of three nodes destroyed, their disks gone: every segment lost a majority of its
/// replicas, so the survivor waits for them and its counters take no increment;
/// once they are downed and removed, a give-up ends the waits and the counters take
/// increments again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_give_up_a_lone_survivor_takes_writes_again() {
    let [(a, ra, _pa), (b, _rb, _pb), (c, _rc, _pc)] = three_without_downing().await;
    wait_up_and_settled(&[&a, &b, &c]).await;
    for i in 0..5 {
        assert_eq!(ask(&ra, &format!("g{i}"), Cmd::Add(1)).await, Ok(1));
    }
    let lost: Vec<String> = [&b, &c]
        .iter()
        .map(|n| n.self_address().to_string())
        .collect();
    for (n, addr) in [b, c].into_iter().zip(&lost) {
        n.stop().await;
        a.cluster().down(addr.parse().unwrap()).await.unwrap();
    }
    wait_for("b and c removed", || a.cluster().view().members.len() == 1).await;
    let base = format!("http://{}", a.management_addr().unwrap());
    let waiting = journal_waits(&base).await;
    assert!(!waiting.is_empty(), "the survivor waits for its lost peers");
    assert!(waiting.iter().all(|w| w["awaited"]
        .as_array()
        .unwrap()
        .iter()
        .all(|a| lost.iter().any(|l| a == l))));
    assert!(
        ask(&ra, "g0", Cmd::Add(1)).await.is_err(),
        "no increment while the segments wait"
    );
    let r = give_up(&base, &lost).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["told"], 0);
    assert!(!body["released"].as_array().unwrap().is_empty());
    assert!(journal_waits(&base).await.is_empty(), "no wait left");
    // The counters take increments again (a counter whose entity stopped on the refused
    // increment starts again on the next message).
    for i in 0..5 {
        let id = format!("g{i}");
        common::wait_for_async(&format!("{id} taking an increment"), || async {
            ask(&ra, &id, Cmd::Add(1)).await.is_ok()
        })
        .await;
    }
    a.shutdown().await;
}

/// Scaling down to one node: two of three leave one right after the other (each list
/// shrinks; the second to leave hands its copies to the last before it goes, caught up or
/// not), and the last node alone answers for every counter, with every increment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_of_three_nodes_left_one_by_one_answers_with_every_increment() {
    let (a, ra, _pa) = node(&[]).await;
    let seed = port_of(&a);
    let (b, rb, _pb) = node(&[seed]).await;
    let (c, _rc, _pc) = node(&[seed]).await;
    wait_up_and_settled(&[&a, &b, &c]).await;
    let mut totals = BTreeMap::new();
    for i in 1..=24i64 {
        let id = format!("c{}", i % 8);
        let total = totals.entry(id.clone()).or_insert(0i64);
        *total += i;
        assert_eq!(ask(&rb, &id, Cmd::Add(i)).await, Ok(*total), "{id}");
    }
    // b leaves right after c, whether or not a and b have caught up from one another:
    // leaving, b hands its copies to a before it goes.
    c.shutdown().await;
    wait_for("two members", || a.cluster().view().members.len() == 2).await;
    b.shutdown().await;
    wait_for("one member", || a.cluster().view().members.len() == 1).await;
    // The journal takes the ring change in a moment after the membership view shows it.
    common::wait_for_async("the last node answering", || async {
        let get = tokio::time::timeout(Duration::from_secs(3), ask(&ra, "c0", Cmd::Get));
        matches!(get.await, Ok(Ok(_)))
    })
    .await;
    for (id, total) in &totals {
        assert_eq!(
            ask(&ra, id, Cmd::Get).await,
            Ok(*total),
            "{id} on the last node"
        );
    }
    assert_eq!(ask(&ra, "c1", Cmd::Add(100)).await, Ok(totals["c1"] + 100));
}
