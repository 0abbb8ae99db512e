//! Partitioned services on four in-process nodes over real sockets: the leader's table
//! reaches every node and the instances run where it says; routing logics (round robin,
//! consistent hashing, broadcast) reach the instances; a leaving node hands its instances
//! off gracefully, one instance at a time, with a sender's messages in order and none lost;
//! `GET /cluster/services` shows the table; bad input is refused or counted.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{fast_config, get_json, port_of, wait_for, wait_self_up};
use concord::services::{
    InstancePolicy, PartitionPath, PartitionedServices, RoutingLogic, Service, ServiceContext,
    ServicesError, ServicesLayer,
};
use concord::Node;
use concord_core::MemberStatus;

const T: Duration = Duration::from_secs(10);

/// Shared by every node's instances of the test (all in one process).
#[derive(Clone, Default)]
struct Probe {
    running: Arc<AtomicI64>,
    max_running: Arc<AtomicI64>,
    /// (node, sequence) in the order the instances handled them.
    log: Arc<Mutex<Vec<(String, u64)>>>,
}

struct Recorder {
    node: String,
    probe: Probe,
}

impl Recorder {
    fn new(ctx: &ServiceContext, probe: &Probe) -> Recorder {
        let now = probe.running.fetch_add(1, Ordering::SeqCst) + 1;
        probe.max_running.fetch_max(now, Ordering::SeqCst);
        Recorder {
            node: ctx.node().to_string(),
            probe: probe.clone(),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.probe.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Service for Recorder {
    type Message = u64;
    type Reply = String;

    async fn handle(&mut self, _ctx: &mut ServiceContext, seq: u64) -> String {
        self.probe
            .log
            .lock()
            .unwrap()
            .push((self.node.clone(), seq));
        self.node.clone()
    }
}

struct Member {
    node: Node,
    services: PartitionedServices,
}

async fn start(seeds: &[u16], echo: &Probe, solo: &Probe) -> Member {
    let mut c = fast_config("services", seeds);
    c.update_section(|s: &mut concord::services::ServicesConfig| {
        s.gossip_interval = Duration::from_millis(100);
        s.handoff_timeout = Duration::from_secs(5);
    })
    .unwrap();
    let (layer, services) = ServicesLayer::new();
    let node = Node::builder(c).layer(layer).start().await.unwrap();
    if seeds.is_empty() {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    wait_self_up(&node).await;
    let (e, s) = (echo.clone(), solo.clone());
    services
        .register(
            "echo",
            InstancePolicy::Fixed(2),
            move |ctx: &ServiceContext| Recorder::new(ctx, &e),
        )
        .await
        .unwrap();
    services
        .register(
            "solo",
            InstancePolicy::Fixed(1),
            move |ctx: &ServiceContext| Recorder::new(ctx, &s),
        )
        .await
        .unwrap();
    Member { node, services }
}

async fn cluster(n: usize, echo: &Probe, solo: &Probe) -> Vec<Member> {
    let a = start(&[], echo, solo).await;
    let seed = port_of(&a.node);
    let mut members = vec![a];
    for _ in 1..n {
        members.push(start(&[seed], echo, solo).await);
    }
    wait_for("all Up everywhere", || {
        members
            .iter()
            .all(|m| common::count_status(&m.node, MemberStatus::Up) == n)
    })
    .await;
    members
}

fn path(p: &str) -> PartitionPath {
    PartitionPath::new(p).unwrap()
}

fn instances(m: &Member, p: &str) -> Vec<String> {
    m.services
        .snapshot()
        .state
        .table
        .instances(&path(p))
        .unwrap_or(&[])
        .iter()
        .map(|n| n.address.to_string())
        .collect()
}

async fn placed(members: &[Member]) {
    wait_for("the table on every node, nothing pending", || {
        let first = members[0].services.snapshot();
        members.iter().all(|m| {
            let s = m.services.snapshot();
            s.state == first.state
                && s.state.pending.is_empty()
                && instances(m, "echo").len() == 2
                && instances(m, "solo").len() == 1
        })
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_table_converges_and_routing_logics_reach_the_instances() {
    let (echo, solo) = (Probe::default(), Probe::default());
    let m = cluster(3, &echo, &solo).await;
    placed(&m).await;
    let hosts: BTreeSet<String> = instances(&m[0], "echo").into_iter().collect();
    // The instances run exactly where the table says.
    wait_for("instances running", || {
        echo.running.load(Ordering::SeqCst) == 2 && solo.running.load(Ordering::SeqCst) == 1
    })
    .await;

    // Round robin from every node: both instances answer, nobody else.
    let mut answered = BTreeMap::new();
    for (i, member) in m.iter().enumerate() {
        let r = member
            .services
            .service_ref::<Recorder>(path("echo"))
            .with_routing(RoutingLogic::RoundRobin);
        for k in 0..6u64 {
            let node = r.ask(&(i as u64 * 100 + k), T).await.unwrap();
            *answered.entry(node).or_insert(0) += 1;
        }
    }
    assert_eq!(answered.keys().cloned().collect::<BTreeSet<_>>(), hosts);
    assert!(answered.values().all(|c| *c == 9), "{answered:?}");

    // Consistent hashing: one key, one instance, from every node.
    let mut by_key = BTreeSet::new();
    for member in &m {
        let r = member
            .services
            .service_ref::<Recorder>(path("echo"))
            .with_routing(RoutingLogic::ConsistentHashing);
        for _ in 0..3 {
            by_key.insert(r.ask_keyed(b"user-42", &1, T).await.unwrap());
        }
    }
    assert_eq!(by_key.len(), 1, "{by_key:?}");

    // Broadcast reaches both instances.
    let before = echo.log.lock().unwrap().len();
    m[2].services
        .service_ref::<Recorder>(path("echo"))
        .broadcast(&7777)
        .await
        .unwrap();
    wait_for("broadcast to both", || {
        echo.log.lock().unwrap()[before..]
            .iter()
            .filter(|(_, s)| *s == 7777)
            .count()
            == 2
    })
    .await;

    // The management API shows the table.
    let url = format!(
        "http://{}/cluster/services",
        m[1].node.management_addr().unwrap()
    );
    let json = get_json(&url).await;
    let table = json["table"].as_array().unwrap();
    assert_eq!(table.len(), 2, "{json}");
    assert_eq!(json["registered"].as_array().unwrap().len(), 2, "{json}");

    // Bad input: a path that is not one, a duplicate registration.
    let bad = m[0]
        .services
        .register("../x", InstancePolicy::Fixed(1), |ctx: &ServiceContext| {
            Recorder::new(ctx, &Probe::default())
        })
        .await;
    assert!(matches!(bad, Err(ServicesError::Refused(_))), "{bad:?}");
    let dup = m[0]
        .services
        .register("echo", InstancePolicy::Fixed(1), |ctx: &ServiceContext| {
            Recorder::new(ctx, &Probe::default())
        })
        .await;
    assert!(matches!(dup, Err(ServicesError::Refused(_))), "{dup:?}");
    for member in m {
        member.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaving_host_hands_off_one_instance_at_a_time_with_order_kept() {
    let (echo, solo) = (Probe::default(), Probe::default());
    let mut m = cluster(4, &echo, &solo).await;
    placed(&m).await;
    let host = instances(&m[0], "solo")[0].clone();
    let leaving = m
        .iter()
        .position(|x| x.node.self_address().to_string() == host)
        .unwrap();
    // Senders: every other node tells a sequence while the host leaves.
    let senders: Vec<usize> = (0..m.len()).filter(|i| *i != leaving).collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for &i in &senders {
        let r = m[i].services.service_ref::<Recorder>(path("solo"));
        let stop = stop.clone();
        let base = (i as u64 + 1) * 1_000_000;
        tasks.push(tokio::spawn(async move {
            let mut seq = 0;
            while !stop.load(Ordering::SeqCst) {
                r.tell(&(base + seq)).await.unwrap();
                seq += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            // The last one is asked: once it is answered everything before it has been
            // handled (one instance, in order).
            r.ask(&(base + seq), T).await.unwrap();
            seq + 1
        }));
    }
    wait_for("the old host handles messages", || {
        solo.log.lock().unwrap().len() >= 20
    })
    .await;
    let gone = m.remove(leaving);
    gone.node
        .coordinated_shutdown()
        .run(concord_core::ShutdownReason::Requested);
    tokio::time::timeout(Duration::from_secs(60), gone.node.terminated())
        .await
        .expect("the leaving node stops");
    placed(&m).await;
    assert_ne!(instances(&m[0], "solo")[0], host);
    wait_for("the new host handles messages", || {
        solo.log.lock().unwrap().iter().any(|(n, _)| *n != host)
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut sent = Vec::new();
    for t in tasks {
        sent.push(t.await.unwrap());
    }
    assert_eq!(
        solo.max_running.load(Ordering::SeqCst),
        1,
        "two instances of the single-instance service ran at once"
    );
    let log = solo.log.lock().unwrap().clone();
    assert!(
        log.iter().any(|(n, _)| *n == host) && log.iter().any(|(n, _)| *n != host),
        "the instance did not move"
    );
    for (k, &i) in senders.iter().enumerate() {
        let base = (i as u64 + 1) * 1_000_000;
        let got: Vec<u64> = log
            .iter()
            .map(|(_, s)| *s)
            .filter(|s| (base..base + 1_000_000).contains(s))
            .map(|s| s - base)
            .collect();
        assert_eq!(
            got,
            (0..sent[k]).collect::<Vec<_>>(),
            "sender {i}: lost or out of order across the handoff"
        );
    }
    let handoffs: u64 = gone.services.snapshot().stats.handoffs;
    assert!(handoffs >= 1, "no graceful handoff: {handoffs}");
    for member in m {
        member.node.stop().await;
    }
}
