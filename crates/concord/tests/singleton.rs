//! Cluster Singleton on in-process nodes over real sockets: every activation of the
//! instance is recorded against one clock (the test process's), and any overlap fails.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{fast_config, port_of, wait_for};
use concord::singleton::{ClusterSingletons, SingletonContext, SingletonRef};
use concord::{Config, Node};

/// (node port, incarnation, start, end) of every activation.
type Log = Arc<Mutex<Vec<(u16, u64, Instant, Option<Instant>)>>>;

/// What the test singleton is asked.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
enum Msg {
    /// Record a sequence number.
    Seq(u32),
    /// Where do you run?
    Where,
}

type Behaviour = Box<
    dyn Fn(
            SingletonContext<Msg, (u16, u64)>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

fn behaviour(log: Log, received: Arc<Mutex<Vec<u32>>>) -> Behaviour {
    Box::new(move |mut ctx| {
        let log = log.clone();
        let received = received.clone();
        Box::pin(async move {
            let port = ctx.node().port;
            let inc = ctx.incarnation();
            log.lock().unwrap().push((port, inc, Instant::now(), None));
            while let Some(env) = ctx.recv().await {
                match env.message {
                    Msg::Seq(n) => received.lock().unwrap().push(n),
                    Msg::Where => {
                        if let Some(r) = env.reply {
                            r.reply((port, inc));
                        }
                    }
                }
            }
            // Stopping takes a moment, as saving state would.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut l = log.lock().unwrap();
            if let Some(e) = l.iter_mut().find(|e| e.1 == inc) {
                e.3 = Some(Instant::now());
            }
        })
    })
}

fn check_no_overlap(log: &Log) {
    let mut l = log.lock().unwrap().clone();
    l.sort_by_key(|e| e.2);
    for w in l.windows(2) {
        let end = w[0]
            .3
            .expect("an earlier instance ended before a later one started");
        assert!(end <= w[1].2, "overlap: {:?} and {:?}", w[0], w[1]);
    }
}

struct Member {
    node: Node,
    proxy: SingletonRef<Msg, (u16, u64)>,
}

async fn start(config: Config, log: &Log, received: &Arc<Mutex<Vec<u32>>>, first: bool) -> Member {
    let mut singletons = ClusterSingletons::new();
    let proxy = singletons.singleton("test", behaviour(log.clone(), received.clone()));
    let node = Node::builder(config)
        .layer(singletons)
        .start()
        .await
        .unwrap();
    if first {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    Member { node, proxy }
}

async fn cluster(
    system: &str,
    n: usize,
    log: &Log,
    received: &Arc<Mutex<Vec<u32>>>,
) -> Vec<Member> {
    let tune = |c: &mut Config| {
        c.cluster.split_brain_resolver.stable_after = Duration::from_secs(2);
    };
    let mut c = fast_config(system, &[]);
    tune(&mut c);
    let first = start(c, log, received, true).await;
    let seed = port_of(&first.node);
    let mut members = vec![first];
    for _ in 1..n {
        let mut c = fast_config(system, &[seed]);
        tune(&mut c);
        members.push(start(c, log, received, false).await);
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

/// Sorts the members oldest first (members joining together may be moved Up in one
/// leader action; then the address decides).
fn by_age(members: &mut [Member]) {
    let view = members[0].node.cluster().view();
    let order: Vec<u16> = view.by_age(None).iter().map(|m| m.address().port).collect();
    members.sort_by_key(|m| order.iter().position(|p| *p == port_of(&m.node)));
}

/// Asks until the singleton answers (it may be moving).
async fn where_is(proxy: &SingletonRef<Msg, (u16, u64)>) -> (u16, u64) {
    for _ in 0..60 {
        if let Ok(r) = proxy.ask(&Msg::Where, Duration::from_secs(1)).await {
            return r;
        }
    }
    panic!("the singleton never answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_leave_hands_over_in_order_without_overlap() {
    let log: Log = Arc::default();
    let received: Arc<Mutex<Vec<u32>>> = Arc::default();
    let mut members = cluster("sgl-leave", 3, &log, &received).await;
    by_age(&mut members);
    let oldest = port_of(&members[0].node);
    let (at, first_inc) = where_is(&members[2].proxy).await;
    assert_eq!(at, oldest, "runs on the oldest");
    // A stream of messages from the third node while the oldest leaves.
    let proxy = members[2].proxy.clone();
    let sender = tokio::spawn(async move {
        for i in 0..300u32 {
            proxy.tell(&Msg::Seq(i)).await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    // Leave while the stream is flowing: once the first messages have arrived.
    wait_for("the first messages delivered", || {
        received.lock().unwrap().len() >= 10
    })
    .await;
    let next_oldest = port_of(&members[1].node);
    let leave_started = Instant::now();
    members[0].node.shutdown().await;
    let (now_at, inc) = where_is(&members[2].proxy).await;
    assert_eq!(now_at, next_oldest, "moved to the next oldest");
    assert_ne!(inc, first_inc);
    eprintln!(
        "leave to answer from the new instance: {:?}",
        leave_started.elapsed()
    );
    sender.await.unwrap();
    wait_for("every message delivered", || {
        received.lock().unwrap().len() >= 300
    })
    .await;
    assert_eq!(
        *received.lock().unwrap(),
        (0..300).collect::<Vec<_>>(),
        "in order, once each"
    );
    check_no_overlap(&log);
    for m in &members[1..] {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_of_the_oldest_moves_it_after_downing_and_the_removal_margin() {
    let log: Log = Arc::default();
    let received: Arc<Mutex<Vec<u32>>> = Arc::default();
    let mut members = cluster("sgl-crash", 3, &log, &received).await;
    by_age(&mut members);
    let (at, _) = where_is(&members[1].proxy).await;
    assert_eq!(at, port_of(&members[0].node));
    let next_oldest = port_of(&members[1].node);
    let crashed = Instant::now();
    members[0].node.stop().await;
    let (now_at, _) = where_is(&members[1].proxy).await;
    assert_eq!(now_at, next_oldest);
    let l = log.lock().unwrap().clone();
    let second = l.iter().find(|e| e.0 == now_at).unwrap();
    assert!(
        second.2 >= crashed + Duration::from_secs(2),
        "waited at least the removal margin"
    );
    check_no_overlap(&log);
    for m in &members[1..] {
        m.node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_use_lease_the_instance_starts_only_while_the_lease_is_held() {
    let dir = tempfile::tempdir().unwrap();
    // Another owner holds the lease far into the future.
    let lease_file = dir.path().join("sgl-lease-singleton-leased.lease");
    std::fs::write(&lease_file, "someone-else 99999999999999").unwrap();
    let log: Log = Arc::default();
    let received: Arc<Mutex<Vec<u32>>> = Arc::default();
    let mut c = fast_config("sgl-lease", &[]);
    c.cluster
        .split_brain_resolver
        .lease_majority
        .lease_directory = dir.path().display().to_string();
    let settings = concord_core::singleton::SingletonSettings {
        use_lease: true,
        lease_retry_interval_ms: 200,
        ..Default::default()
    };
    let mut singletons = ClusterSingletons::new();
    let proxy: SingletonRef<Msg, (u16, u64)> =
        singletons.singleton_with_settings("leased", settings, behaviour(log.clone(), received));
    let node = Node::builder(c).layer(singletons).start().await.unwrap();
    let me = node.self_address().clone();
    node.cluster().join(me).await.unwrap();
    // Up and oldest, but no lease: no instance.
    wait_for("self Up", || {
        node.cluster()
            .view()
            .self_member()
            .is_some_and(|m| m.status == concord_core::MemberStatus::Up)
    })
    .await;
    // Wait until the manager has asked for the lease and been refused twice.
    let refused = |text: &str| -> u64 {
        let node = node.self_address().to_string();
        text.lines()
            .filter(|l| l.starts_with("concord_singleton_lease_refused_total"))
            .filter(|l| l.contains(&format!("node=\"{node}\"")) && l.contains("name=\"leased\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|v| v as u64)
            .sum()
    };
    wait_for("the lease refused twice", || {
        refused(&concord::metrics::render()) >= 2
    })
    .await;
    assert!(log.lock().unwrap().is_empty(), "started without the lease");
    assert!(proxy
        .ask(&Msg::Where, Duration::from_millis(300))
        .await
        .is_err());
    // The other owner lets go: the lease is acquired on the next retry and it starts.
    std::fs::write(&lease_file, "").unwrap();
    let (at, _) = where_is(&proxy).await;
    assert_eq!(at, port_of(&node));
    let held = std::fs::read_to_string(&lease_file).unwrap();
    assert!(held.starts_with(&node.self_address().to_string()), "{held}");
    node.stop().await;
}
