//! Cluster Sharding on in-process nodes over real sockets: entities that record what they
//! received (and hand it over when they move), every incarnation's life recorded against
//! one clock (any overlap fails), streams of messages from every node while a node joins
//! and another leaves gracefully, asks, passivation, remembered entities after a crash,
//! and `GET /cluster/shards/{name}`.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{fast_config, port_of, wait_for};
use concord::sharding::{Entity, EntityContext, ShardRegion, Sharding, ShardingError};
use concord::{Config, Node};
use serde::{Deserialize, Serialize};

/// (entity, node port, start, end) of every incarnation.
type Lives = Arc<Mutex<Vec<(String, u16, Instant, Option<Instant>)>>>;

/// An entity that keeps every message it got, hands them over when it moves, and records
/// its life.
struct Recorder {
    id: String,
    port: u16,
    got: Vec<String>,
    lives: Lives,
    started: Instant,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let mut l = self.lives.lock().unwrap();
        if let Some(e) = l
            .iter_mut()
            .find(|e| e.0 == self.id && e.1 == self.port && e.2 == self.started)
        {
            e.3 = Some(Instant::now());
        }
    }
}

#[derive(Serialize, Deserialize, Debug, Clone)]
enum Msg {
    /// Keep this.
    Add(String),
    /// What do you have, and where are you?
    Get,
    /// Stop (passivate) after this message.
    Sleep,
    /// Take this long to answer, ms.
    Slow(u64),
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct Got {
    values: Vec<String>,
    port: u16,
}

impl Entity for Recorder {
    type Message = Msg;
    type Reply = Got;
    type State = Vec<String>;

    async fn handle(&mut self, ctx: &mut EntityContext, message: Msg) -> Got {
        match message {
            Msg::Add(v) => self.got.push(v),
            Msg::Get => {}
            Msg::Sleep => ctx.passivate(),
            Msg::Slow(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        }
        Got {
            values: self.got.clone(),
            port: self.port,
        }
    }

    fn hand_off(&mut self) -> Option<Vec<String>> {
        Some(std::mem::take(&mut self.got))
    }
}

fn check_one_incarnation(lives: &Lives) {
    let mut by: BTreeMap<String, Vec<(Instant, Option<Instant>, u16)>> = BTreeMap::new();
    for (e, port, start, end) in lives.lock().unwrap().iter() {
        by.entry(e.clone()).or_default().push((*start, *end, *port));
    }
    for (e, mut v) in by {
        v.sort_by_key(|x| x.0);
        for w in v.windows(2) {
            let end = w[0].1.unwrap_or_else(|| {
                panic!(
                    "{e}: an incarnation on {} still alive when one started on {}",
                    w[0].2, w[1].2
                )
            });
            assert!(
                end <= w[1].0,
                "{e}: alive twice ({:?} and {:?})",
                w[0],
                w[1]
            );
        }
    }
}

struct Member {
    node: Node,
    region: ShardRegion<Recorder>,
}

fn tune(c: &mut Config) {
    c.cluster.split_brain_resolver.stable_after = Duration::from_secs(2);
    c.update_section(|s: &mut concord::sharding::ShardingConfig| {
        s.rebalance_interval = Duration::from_millis(500);
        s.retry_interval = Duration::from_millis(200);
        s.number_of_shards = 30;
    })
    .expect("the section parses");
}

async fn start(c: Config, lives: &Lives, first: bool) -> Member {
    let mut sharding = Sharding::new();
    let lives2 = lives.clone();
    let port = c.remote.port;
    let _ = port;
    let ports = Arc::new(Mutex::new(0u16));
    let p2 = ports.clone();
    let region = sharding.init(
        "recorder",
        move |id: &str, state: Option<Vec<String>>| {
            let port = *p2.lock().unwrap();
            let started = Instant::now();
            lives2
                .lock()
                .unwrap()
                .push((id.to_string(), port, started, None));
            Recorder {
                id: id.to_string(),
                port,
                got: state.unwrap_or_default(),
                lives: lives2.clone(),
                started,
            }
        },
        None,
    );
    let node = Node::builder(c).layer(sharding).start().await.unwrap();
    *ports.lock().unwrap() = port_of(&node);
    if first {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    Member { node, region }
}

async fn cluster(system: &str, n: usize, lives: &Lives) -> Vec<Member> {
    let mut c = fast_config(system, &[]);
    tune(&mut c);
    let first = start(c, lives, true).await;
    let seed = port_of(&first.node);
    let mut members = vec![first];
    for _ in 1..n {
        let mut c = fast_config(system, &[seed]);
        tune(&mut c);
        members.push(start(c, lives, false).await);
    }
    wait_all_up(&members, n).await;
    members
}

async fn wait_all_up(members: &[Member], n: usize) {
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
}

/// Asks until answered (the entity may be moving).
async fn get(region: &ShardRegion<Recorder>, id: &str) -> Got {
    for _ in 0..100 {
        match region
            .entity_ref(id)
            .ask(&Msg::Get, Duration::from_secs(2))
            .await
        {
            Ok(g) => return g,
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    panic!("{id} never answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_and_graceful_leave_move_entities_with_their_messages_in_order() {
    let lives: Lives = Arc::default();
    let mut members = cluster("shd-move", 3, &lives).await;
    let entities: Vec<String> = (0..24).map(|i| format!("e{i}")).collect();
    // Each node sends a numbered stream to every entity while a fourth node joins and
    // then the second leaves gracefully.
    let sent = Arc::new(Mutex::new(BTreeMap::<(usize, String), u32>::new()));
    let stops: Vec<Arc<std::sync::atomic::AtomicBool>> = (0..members.len())
        .map(|_| Arc::new(std::sync::atomic::AtomicBool::new(false)))
        .collect();
    let mut senders = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let region = m.region.clone();
        let (entities, sent, stop) = (entities.clone(), sent.clone(), stops[i].clone());
        senders.push(tokio::spawn(async move {
            let mut seq = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for e in &entities {
                    if region
                        .entity_ref(e.clone())
                        .tell(&Msg::Add(format!("{i}-{seq}")))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    sent.lock().unwrap().insert((i, e.clone()), seq + 1);
                }
                seq += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A fourth node joins: it takes its share of the shards.
    let seed = port_of(&members[0].node);
    let mut c = fast_config("shd-move", &[seed]);
    tune(&mut c);
    members.push(start(c, &lives, false).await);
    wait_all_up(&members, 4).await;
    let newcomer = port_of(&members[3].node);
    wait_for("the new node hosts entities", || {
        lives
            .lock()
            .unwrap()
            .iter()
            .any(|(_, p, _, end)| *p == newcomer && end.is_none())
    })
    .await;
    // The second node leaves gracefully; its sender stops first (a node that is leaving
    // may still accept a tell it cannot deliver: its region goes away), the others keep
    // sending through the leave.
    let leaver = port_of(&members[1].node);
    let mut senders: Vec<Option<tokio::task::JoinHandle<()>>> =
        senders.into_iter().map(Some).collect();
    stops[1].store(true, std::sync::atomic::Ordering::Relaxed);
    if let Some(s) = senders[1].take() {
        let _ = s.await;
    }
    members[1].node.shutdown().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for stop in &stops {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    for s in senders.into_iter().flatten() {
        let _ = s.await;
    }
    // Every entity has every message of every node once, in each node's order (the last
    // ones may still be on their way: wait until each entity has as many as were sent).
    let sent = sent.lock().unwrap().clone();
    let reader = members[0].region.clone();
    let from = |got: &Got, i: usize| -> Vec<u32> {
        got.values
            .iter()
            .filter_map(|v| v.split_once('-'))
            .filter(|(o, _)| *o == i.to_string())
            .map(|(_, s)| s.parse().unwrap())
            .collect()
    };
    for e in &entities {
        let want = |i: usize| sent.get(&(i, e.clone())).copied().unwrap_or(0) as usize;
        let mut got = get(&reader, e).await;
        for _ in 0..100 {
            if (0..3).all(|i| from(&got, i).len() >= want(i)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            got = get(&reader, e).await;
        }
        assert_ne!(got.port, leaver, "{e} is not on the node that left");
        for i in 0..3 {
            assert_eq!(
                from(&got, i),
                (0..want(i) as u32).collect::<Vec<_>>(),
                "{e}: node {i}'s messages, once each, in order"
            );
        }
    }
    check_one_incarnation(&lives);
    for (i, m) in members.iter().enumerate() {
        if i != 1 {
            m.node.stop().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_passivation_and_the_management_route() {
    let lives: Lives = Arc::default();
    let members = cluster("shd-ask", 2, &lives).await;
    let a = members[0].region.entity_ref("alpha");
    a.tell(&Msg::Add("x".into())).await.unwrap();
    let got = a
        .ask(&Msg::Add("y".into()), Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(got.values, vec!["x", "y"]);
    // From the other node, wherever alpha lives.
    let got = members[1]
        .region
        .entity_ref("alpha")
        .ask(&Msg::Get, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(got.values, vec!["x", "y"]);
    // Passivation: it stops after the message; the next message starts it afresh.
    let before = lives
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.0 == "alpha")
        .count();
    a.ask(&Msg::Sleep, Duration::from_secs(5)).await.unwrap();
    wait_for("alpha stopped", || {
        lives
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.0 == "alpha")
            .all(|l| l.3.is_some())
    })
    .await;
    let got = a.ask(&Msg::Get, Duration::from_secs(5)).await.unwrap();
    assert!(got.values.is_empty(), "a fresh incarnation: {got:?}");
    assert_eq!(
        lives
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.0 == "alpha")
            .count(),
        before + 1
    );
    // An ask that is not answered in time.
    let err = members[0]
        .region
        .entity_ref("beta")
        .ask(&Msg::Slow(2_000), Duration::from_millis(200))
        .await
        .unwrap_err();
    assert!(matches!(err, ShardingError::Timeout(_)), "{err:?}");
    // GET /cluster/shards/recorder: every region with its shards and entities.
    let url = format!(
        "http://{}/cluster/shards/recorder",
        members[0].node.management_addr().unwrap()
    );
    let body: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    let regions = body["regions"].as_array().expect("regions");
    let total: u64 = regions
        .iter()
        .flat_map(|r| r["shards"].as_array().unwrap().iter())
        .map(|s| s["numEntities"].as_u64().unwrap())
        .sum();
    assert_eq!(total, 2, "alpha and beta: {body}");
    assert!(regions.iter().all(|r| r["shardRegion"]
        .as_str()
        .unwrap()
        .starts_with("concord://shd-ask@")));
    let missing = reqwest::get(format!(
        "http://{}/cluster/shards/nope",
        members[0].node.management_addr().unwrap()
    ))
    .await
    .unwrap();
    assert_eq!(missing.status(), 404);
    check_one_incarnation(&lives);
    for m in &members {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_entities_start_again_after_their_node_crashes() {
    let lives: Lives = Arc::default();
    let sys = "shd-remember";
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut members = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let seeds: Vec<u16> = members
            .first()
            .map(|m: &Member| port_of(&m.node))
            .into_iter()
            .collect();
        let mut c = fast_config(sys, &seeds);
        tune(&mut c);
        c.update_section(|s: &mut concord::sharding::ShardingConfig| {
            s.remember_entities = true;
        })
        .expect("the section parses");
        c.data_dir = dir.path().display().to_string();
        members.push(start(c, &lives, i == 0).await);
    }
    wait_all_up(&members, 3).await;
    let live_on = |port: u16| -> Vec<String> {
        lives
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.1 == port && l.3.is_none())
            .map(|l| l.0.clone())
            .collect()
    };
    // At least 12 entities, and more until one lives off the first node (on a busy machine
    // the other regions may register with the coordinator after the first shards went).
    let mut i = 0;
    while i < 12
        || (live_on(port_of(&members[1].node)).is_empty()
            && live_on(port_of(&members[2].node)).is_empty())
    {
        assert!(i < 500, "no entity was allocated off the first node");
        members[0]
            .region
            .entity_ref(format!("r{i}"))
            .ask(&Msg::Add("hi".into()), Duration::from_secs(5))
            .await
            .unwrap();
        i += 1;
    }
    // The node (other than the first, where the coordinator runs) with most entities.
    let v = if live_on(port_of(&members[1].node)).len() >= live_on(port_of(&members[2].node)).len()
    {
        1
    } else {
        2
    };
    let victim = port_of(&members[v].node);
    let on_victim = live_on(victim);
    assert!(!on_victim.is_empty(), "an entity on the victim");
    // Crash (no hand-over); the others down it after stable-after, remove it, wait the
    // removal margin, and the coordinator allocates its shards again at once: the
    // remembered entities start with no message sent to them.
    members[v].node.stop().await;
    wait_for("remembered entities running elsewhere", || {
        let l = lives.lock().unwrap();
        on_victim.iter().all(|e| {
            l.iter()
                .any(|x| &x.0 == e && x.1 != victim && x.3.is_none())
        })
    })
    .await;
    check_one_incarnation(&lives);
    for (i, m) in members.iter().enumerate() {
        if i != v {
            m.node.stop().await;
        }
    }
}
