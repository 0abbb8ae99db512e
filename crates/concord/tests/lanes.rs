//! Lane isolation: two nodes with Akka's default failure-detector settings (heartbeat 1 s,
//! acceptable pause 3 s, threshold 8) flood each other's ordinary lane for 20 s as fast as
//! the lane accepts messages. Heartbeats travel on the control lane, a connection and queue
//! of their own, so no member may become unreachable meanwhile.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::bench_layer::payload_frame;
use common::bench_layer::{BenchLayer, BenchProbe};
use common::wait_for;
use concord::{Config, Node, SubscriptionItem};
use concord_core::{ClusterEvent, Lane, MemberStatus};

const FLOOD: Duration = Duration::from_secs(20);

fn default_timings(seed: Option<u16>) -> Config {
    let mut c = Config {
        system: "lanes".into(),
        ..Config::default()
    };
    c.remote.port = 0;
    c.management.enabled = false;
    c.cluster.seed_nodes = seed
        .map(|p| vec![format!("127.0.0.1:{p}")])
        .unwrap_or_default();
    c
}

async fn start(seed: Option<u16>) -> (Node, BenchProbe) {
    let (layer, probe) = BenchLayer::new();
    let node = Node::builder(default_timings(seed))
        .layer(layer)
        .start()
        .await
        .unwrap();
    if seed.is_none() {
        let me = node.self_address().clone();
        node.cluster().join(me).await.unwrap();
    }
    (node, probe)
}

/// Floods `to` from `from` on the ordinary lane until `stop`.
fn flood(from: &Node, to: &Node, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let lane = from
        .transport()
        .outbound_lane(to.self_address(), Lane::Ordinary);
    let uid = to.cluster().self_unique_address().uid;
    let payload = Bytes::from(vec![7u8; 512]);
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let batch = (0..64).map(|_| payload_frame(uid, payload.clone()));
            if lane.send_all_wait(batch).await.is_err() {
                return;
            }
        }
    })
}

/// Watches `node`'s membership until `stop`; sets `seen` if anyone becomes unreachable.
fn watch(node: &Node, seen: Arc<AtomicBool>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let mut sub = node.cluster().subscribe();
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            match tokio::time::timeout(Duration::from_millis(200), sub.recv()).await {
                Ok(Some(SubscriptionItem::Event(ClusterEvent::UnreachableMember(m)))) => {
                    eprintln!("unreachable: {}", m.address());
                    seen.store(true, Ordering::Relaxed);
                }
                Ok(Some(SubscriptionItem::CurrentClusterState(v))) if !v.unreachable.is_empty() => {
                    seen.store(true, Ordering::Relaxed)
                }
                Ok(None) => return,
                _ => {}
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_ordinary_lane_never_delays_heartbeats_into_unreachability() {
    let (a, probe_a) = start(None).await;
    let (b, probe_b) = start(Some(a.remoting_addr().port())).await;
    wait_for("both Up on both", || {
        [&a, &b].iter().all(|n| {
            let v = n.cluster().view();
            v.members.len() == 2 && v.members.values().all(|m| m.status == MemberStatus::Up)
        })
    })
    .await;
    let unreachable = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let watchers = [
        watch(&a, unreachable.clone(), stop.clone()),
        watch(&b, unreachable.clone(), stop.clone()),
    ];
    a.cluster().take_max_heartbeat_rtt_ms();
    b.cluster().take_max_heartbeat_rtt_ms();
    let floods = [flood(&a, &b, stop.clone()), flood(&b, &a, stop.clone())];
    let started = Instant::now();
    // The flood runs for its whole time; the watchers report as it goes.
    while started.elapsed() < FLOOD && !unreachable.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for f in floods {
        let _ = f.await;
    }
    for w in watchers {
        let _ = w.await;
    }
    let rtt = a
        .cluster()
        .take_max_heartbeat_rtt_ms()
        .max(b.cluster().take_max_heartbeat_rtt_ms());
    let (ra, rb) = (probe_a.received(), probe_b.received());
    eprintln!(
        "flood of {:?}: a received {ra}, b received {rb} messages; largest heartbeat round trip {rtt} ms",
        started.elapsed()
    );
    assert!(
        !unreachable.load(Ordering::Relaxed),
        "a member became unreachable during the flood (largest heartbeat round trip {rtt} ms)"
    );
    assert!(
        ra > 100_000 && rb > 100_000,
        "the ordinary lanes were flooded: {ra} and {rb} messages"
    );
    for n in [&a, &b] {
        assert!(n
            .cluster()
            .view()
            .members
            .values()
            .all(|m| m.status == MemberStatus::Up));
    }
    b.stop().await;
    a.stop().await;
}
